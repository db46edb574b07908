"""Communication against computation: the predicted compute time of an iteration beside its communication.

Compute per device per iteration = 6 * params * tokens / (t * p * cp) FLOPs (forward and backward of a
transformer; recomputation and attention's own FLOPs not counted), params the ones a token passes through (a
mixture-of-experts model's active parameters: its top-k experts, not all), tokens = b * s * microbatches of one
model replica, at the achieved rate given in TFLOP/s per device.
"""

from __future__ import annotations

from microbench.workload.distribution import Workload
from microbench.workload.model import active_parameter_count


def flops_per_device(w: Workload) -> float:
    """FLOPs of one device per iteration: 6 x active params x tokens of a replica / (t x p x cp)."""
    tokens = w.micro_batch * w.model.seq * w.microbatches
    params = w.params if not w.model.experts else active_parameter_count(w.model)
    return 6 * params * tokens / (w.tp * w.pp * w.cp)

RULE = ("compute time = 6 * params * tokens per device / achieved FLOP/s, tokens per device = "
        "b*s*microbatches/(t*p*cp) (forward and backward; activation recomputation not counted; a mixture of experts counts its active "
        "parameters); communication is one device's: a modelled "
        "workload's pipeline send/recv counts sum the p stages (Eq. 4), so their time is divided by p (the mean "
        "stage); communication share without overlap = comm/(comm+compute), with perfect overlap = "
        "max(0, comm-compute)/max(comm, compute); with measured overlap, exposed = sum of each message's time x (1 - its "
        "collective's measured overlap at its size), kept between max(0, comm-compute) and comm, share = "
        "exposed/(compute+exposed)")


def per_device_communication_us(weighting: dict, w: Workload, field: str = "time_us") -> float:
    """Predicted communication time (us) of one device per iteration of a modelled workload (``field``:
    the messages' priced ``time_us``, or their ``exposed_us`` after the measured overlap).

    Every modelled message is counted per rank except pipeline send/recv, whose counts are summed over the p
    stages as Eq. 4 sums its volume: their predicted time is divided by p.
    """
    rows = [r for r in weighting["messages"] if r["phase"] != "setup"]
    pipeline = sum(r[field] for r in rows if r["collective"] in ("send", "recv"))
    return sum(r[field] for r in rows) - pipeline * (1 - 1 / w.pp)


def compute_vs_communication(w: Workload, comm_us: float, tflops: float, exposed_us: float | None = None) -> dict:
    """Compute and communication seconds per iteration of one device (``comm_us`` in microseconds, ``tflops``
    in achieved TFLOP/s per device) and communication's share of the iteration; with ``exposed_us`` (the
    communication the measured overlap leaves exposed, us) also that estimate beside the two bounds."""
    tokens = w.micro_batch * w.model.seq * w.microbatches
    flops = flops_per_device(w)
    compute_s = flops / (tflops * 1e12)
    comm_s = comm_us * 1e-6
    longer = max(comm_s, compute_s)
    return {
        "tflops_per_device": tflops,
        "tokens_per_replica": tokens,
        "flops_per_device": flops,
        "compute_s": compute_s,
        "communication_s": comm_s,
        "share_no_overlap": comm_s / (comm_s + compute_s) if comm_s + compute_s else 0.0,
        "share_perfect_overlap": max(0.0, comm_s - compute_s) / longer if longer else 0.0,
        "iteration_no_overlap_s": comm_s + compute_s,
        "iteration_perfect_overlap_s": longer,
        **(measured_overlap(comm_s, compute_s, exposed_us * 1e-6) if exposed_us is not None else {}),
    }


def measured_overlap(comm_s: float, compute_s: float, exposed_s: float) -> dict:
    """Exposed communication per iteration with the measured overlap, bounded by the two extremes: at most all
    of it, and at least what exceeds the compute (no more can hide than there is compute to hide behind)."""
    exposed = min(comm_s, max(exposed_s, comm_s - compute_s))
    iteration = compute_s + exposed
    return {"exposed_measured_overlap_s": exposed, "exposed_no_overlap_s": comm_s,
            "exposed_perfect_overlap_s": max(0.0, comm_s - compute_s),
            "iteration_measured_overlap_s": iteration,
            "share_measured_overlap": exposed / iteration if iteration else 0.0}

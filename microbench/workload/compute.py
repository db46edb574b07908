"""Communication against computation: the predicted compute time of an iteration beside its communication.

Compute per device per iteration = 6 * params * tokens / (t * p) FLOPs (forward and backward of a dense
transformer; recomputation not counted), tokens = b * s * microbatches of one model replica, at the achieved
rate given in TFLOP/s per device.
"""

from __future__ import annotations

from microbench.workload.distribution import Workload

RULE = ("compute time = 6 * params * tokens per device / achieved FLOP/s, tokens per device = b*s*microbatches/(t*p) "
        "(forward and backward; activation recomputation not counted); communication is one device's: a modelled "
        "workload's pipeline send/recv counts sum the p stages (Eq. 4), so their time is divided by p (the mean "
        "stage); communication share without overlap = comm/(comm+compute), with perfect overlap = "
        "max(0, comm-compute)/max(comm, compute)")


def per_device_communication_us(weighting: dict, w: Workload) -> float:
    """Predicted communication time (us) of one device per iteration of a modelled workload.

    Every modelled message is counted per rank except pipeline send/recv, whose counts are summed over the p
    stages as Eq. 4 sums its volume: their predicted time is divided by p.
    """
    pipeline = sum(r["time_us"] for r in weighting["messages"]
                   if r["collective"] in ("send", "recv") and r["phase"] != "setup")
    return weighting["time_per_iteration_us"] - pipeline * (1 - 1 / w.pp)


def compute_vs_communication(w: Workload, comm_us: float, tflops: float) -> dict:
    """Compute and communication seconds per iteration of one device (``comm_us`` in microseconds, ``tflops``
    in achieved TFLOP/s per device) and communication's share of the iteration."""
    tokens = w.micro_batch * w.model.seq * w.microbatches
    flops = 6 * w.params * tokens / (w.tp * w.pp)
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
    }

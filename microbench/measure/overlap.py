"""The overlap of a non-blocking collective with compute, at one size, on one rank (OMB's and IMB's method).

After the engine has timed t_pure (post then wait, back to back: the record's ``latency_us``):

1. the compute target: ``--compute-us T``, else R x t_pure (``--compute-ratio R``, default 1 as OMB), t_pure
   being the mean across ranks of each rank's mean, so every rank computes for the same time;
2. the kernel is calibrated to the target on each rank (microbench.measure.compute_kernels), through the timed
   loop's own compute path; with ``--num-tests K`` the compute is cut into K chunks, each followed by a
   completion test (MPI_Test / ``is_completed()``), as OMB's ``--num_test``;
3. the overlapped iterations: post, compute (and tests), wait, each part timed apart
   (``loops.OVERLAP_PARTS``): warmup, then as many timed iterations as the t_pure phase, on the same
   buffers and slots, with the same barrier, flush and ``--check`` as any size.

Per rank, from its means: OMB's overlap = max(0, 100 - 100 (overall - compute) / pure) (compute without the
tests, which OMB counts as communication); IMB's overlap = 100 max(0, min(1, (pure + compute - overall) /
max(pure, compute))). The same formulas on the medians (of overall, compute and t_pure) give figures that a
few descheduled iterations cannot sink. microbench.measure.overlap_stats summarises them across ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from microbench.benchmarks.table import Collective, Context
from microbench.measure import compute_kernels
from microbench.measure.compute_kernels import KERNELS, Calibration
from microbench.measure.loops import OVERLAP_PARTS, OverlapWork, TimedLoop

OVERALL, POST, COMPUTE, TEST, WAIT = range(len(OVERLAP_PARTS))


@dataclass(frozen=True)
class OverlapPlan:
    """What the compute is: --compute-ratio / --compute-us, --num-tests, --kernel."""

    compute_ratio: float | None
    compute_us: float | None
    num_tests: int
    kernel: str

    @classmethod
    def of(cls, opts) -> "OverlapPlan":
        return cls(opts.compute_ratio, opts.compute_us, opts.num_tests, opts.kernel)

    def target_us(self, pure_mean_us: float) -> float:
        """The compute time every rank aims at (us)."""
        return self.compute_us if self.compute_us is not None else self.compute_ratio * pure_mean_us


@dataclass
class OverlapMeasurement:
    """What one rank measured in the overlapped iterations of one size."""

    parts_us: np.ndarray  #: (iterations, 5) us, columns OVERLAP_PARTS
    pure_us: float  #: this rank's mean t_pure
    pure_p50_us: float  #: and its median
    target_us: float
    calibration: Calibration
    kernel: dict  #: the kernel as the record states it
    check_errors: int | None


def omb_overlap_pct(overall: float, compute: float, pure: float) -> float:
    """OMB: max(0, 100 - 100 (t_overall - t_compute) / t_pure), in [0, 100]; 0 when t_pure is 0."""
    if pure <= 0:
        return 0.0
    return float(min(100.0, max(0.0, 100.0 - 100.0 * (overall - compute) / pure)))


def imb_overlap_pct(overall: float, compute: float, pure: float) -> float:
    """IMB: 100 max(0, min(1, (t_pure + t_CPU - t_ovrl) / max(t_pure, t_CPU))); 0 when both are 0."""
    longer = max(pure, compute)
    if longer <= 0:
        return 0.0
    return float(100.0 * max(0.0, min(1.0, (pure + compute - overall) / longer)))


def kernel_for(name: str, loop: TimedLoop, cache_bytes: int | None):
    """The loop's kernel ``name``, made once per loop (the stream arrays are large): the host kernels run from
    the loop's own library."""
    kernels = loop.__dict__.setdefault("overlap_kernels", {})
    if name not in kernels:
        if name == "gemm":
            kernels[name] = compute_kernels.CudaGemm()
        else:
            kernels[name] = compute_kernels.HostKernel(KERNELS[name], loop.kernel_library(), cache_bytes)
    return kernels[name]


def describe_kernel(name: str, kernel, cal: Calibration) -> dict:
    """The kernel, its size and the memory traffic it states, for the record."""
    spec = KERNELS[name]
    out = {"name": name, "what": spec.what, "units_per_chunk": cal.units, "chunks": cal.chunks,
           "flops_per_unit": spec.flops_per_unit, "bytes_per_unit": spec.bytes_per_unit,
           "working_set_bytes": getattr(kernel, "working_set_bytes", 0)}
    out.update(getattr(kernel, "unit_facts", lambda: {})())
    return out


def measure(coll: Collective, ctx: Context, slots: Sequence, calls: Sequence, loop: TimedLoop, settings,
            plan: OverlapPlan, pure_samples_us: np.ndarray, iterations: int, barrier: Callable[[], None],
            agree_mean: Callable[[float], float], cache_bytes: int | None,
            push: Callable[[int], None] | None = None, pull: Callable[[int], None] | None = None
            ) -> OverlapMeasurement:
    """Calibrate the compute and time the overlapped iterations of one size on this rank (collective).

    ``settings`` is the size's engine.LoopSettings (warmup, check, sync, flush); ``pure_samples_us`` this
    rank's t_pure samples; ``agree_mean(x)`` the mean of x across ranks."""
    pure_us = float(np.mean(pure_samples_us)) if len(pure_samples_us) else 0.0
    pure_p50_us = float(np.median(pure_samples_us)) if len(pure_samples_us) else 0.0
    target_us = plan.target_us(agree_mean(pure_us))
    kernel = kernel_for(plan.kernel, loop, cache_bytes)
    if hasattr(kernel, "size_for"):  # the GEMM's matrix order follows the target
        kernel.size_for(target_us * 1e3)
    chunks = max(1, plan.num_tests)
    cal = compute_kernels.calibrate(lambda u, c, r: loop.time_compute(kernel, u, c, r), target_us * 1e3, chunks)
    work = OverlapWork(kernel, cal.units, chunks, plan.num_tests > 0)
    prepared = loop.prepare(calls)
    sync = barrier if (settings.sync_barrier or settings.flush_each is not None) else None
    barrier()
    loop.run_overlap(prepared, settings.warmup, work, start=0, barrier=sync, flush=settings.flush_each)
    barrier()
    if settings.check:
        parts, errors = _checked(coll, ctx, slots, loop, prepared, work, iterations, settings.warmup, sync,
                                 settings.flush_each, push, pull)
    else:
        parts = loop.run_overlap(prepared, iterations, work, start=settings.warmup, barrier=sync,
                                 flush=settings.flush_each)
        errors = None
    return OverlapMeasurement(parts.astype(np.float64) / 1e3, pure_us, pure_p50_us, target_us, cal,
                              describe_kernel(plan.kernel, kernel, cal), errors)


def _checked(coll, ctx, slots, loop, prepared, work, iterations, start, sync, flush, push, pull):
    """Each overlapped iteration filled before and verified after (untimed): (parts ns, mismatches)."""
    out = np.zeros((iterations, len(OVERLAP_PARTS)), dtype=np.int64)
    errors = 0
    for i in range(iterations):
        k = (start + i) % len(slots)
        coll.fill(slots[k], ctx, i)
        if push:
            push(k)
        out[i] = loop.run_overlap(prepared, 1, work, start=k, barrier=sync, flush=flush)[0]
        if pull:
            pull(k)
        errors += coll.verify(slots[k], ctx, i)
    return out, errors

"""Compute slices for the replay: the overlap work's calibrated host kernel run for a given time.

The ``flops`` kernel (``measure/compute_kernels.py``: multiply-adds on doubles in registers, no memory
traffic) is calibrated once per distinct slice length to run that long on this rank; a slice then runs
the calibrated units. The iteration's compute comes from ``--tflops``: 6 x params x tokens / (t x p) FLOP
per device (``workload/compute.py``) at that achieved rate.
"""

from __future__ import annotations

from microbench.measure.compute_kernels import KERNELS, HostKernel, calibrate, standalone_library
from microbench.replay.schedule import Compute, Step
from microbench.workload.distribution import Workload


def iteration_compute_s(workload: Workload, tflops: float) -> float:
    """Seconds of compute per iteration of one device at ``tflops`` achieved TFLOP/s."""
    from microbench.workload.compute import flops_per_device  # issue 42: active parameters, / cp

    return flops_per_device(workload) / (tflops * 1e12)


class SliceKernel:
    """Runs compute slices of the lengths ``steps`` hold, each calibrated on this rank."""

    def __init__(self, steps: list[Step]):
        self.kernel = HostKernel(KERNELS["flops"], standalone_library(), None)
        lengths = sorted({s.seconds for s in steps if isinstance(s, Compute)})
        self.calibrations = {s: calibrate(self.kernel.time_in_c, s * 1e9, 1) for s in lengths}

    def __call__(self, seconds: float) -> None:
        self.kernel.compute(self.calibrations[seconds].units)

    def describe(self) -> dict:
        """The kernel and, per slice length (s), its calibration error (measured / target - 1)."""
        return {"kernel": "flops", "what": KERNELS["flops"].what,
                "slices": [{"seconds": s, "units": c.units, "calibration_error": round(c.error, 4)}
                           for s, c in self.calibrations.items()]}

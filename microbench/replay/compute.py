"""Compute slices for the replay: a calibrated kernel run for a given time, on the host or on the GPU.

On the host (``--device cpu``, and the MPI replay) the ``flops`` kernel (``measure/compute_kernels.py``:
multiply-adds on doubles in registers, no memory traffic) is calibrated once per distinct slice length to run
that long on this rank; a slice then runs the calibrated units. On CUDA (the torch replay with ``--device cuda``)
a slice is the ``gemm`` kernel, square fp32 matrix products on the current stream, as a training step's compute:
one order for every slice (the largest whose one product takes at most a quarter of the shortest slice), the
products per slice calibrated with CUDA events; the host then waits for the current stream, so a slice ends
when its products do, while the collectives posted before it run on NCCL's streams beside them and compete
for the GPU's SMs and memory as in training. The iteration's compute comes from ``--tflops``: 6 x params x
tokens / (t x p) FLOP per device (``workload/compute.py``) at that achieved rate.
"""

from __future__ import annotations

from microbench.measure.compute_kernels import KERNELS, HostKernel, calibrate, standalone_library
from microbench.replay.schedule import Compute, Step
from microbench.workload.distribution import Workload


def iteration_compute_s(workload: Workload, tflops: float) -> float:
    """Seconds of compute per iteration of one device at ``tflops`` achieved TFLOP/s."""
    tokens = workload.micro_batch * workload.model.seq * workload.microbatches
    return 6 * workload.params * tokens / (workload.tp * workload.pp) / (tflops * 1e12)


class SliceKernel:
    """Runs compute slices of the lengths ``steps`` hold, each calibrated on this rank: the host kernel, or on
    ``device`` "cuda" the GEMM (``gemm``: a ``compute_kernels.CudaGemm``, made here unless given)."""

    def __init__(self, steps: list[Step], device: str = "cpu", gemm=None):
        lengths = sorted({s.seconds for s in steps if isinstance(s, Compute)})
        self.device = device
        if device == "cuda":
            if gemm is None:
                from microbench.measure.compute_kernels import CudaGemm

                gemm = CudaGemm()
            self.name, self.kernel = "gemm", gemm
            if lengths:
                gemm.size_for(lengths[0] * 1e9)
            self.calibrations = {s: calibrate(gemm.time_events, s * 1e9, 1) for s in lengths}
            self._wait = _current_stream_wait(gemm.torch)
        else:
            self.name, self.kernel = "flops", HostKernel(KERNELS["flops"], standalone_library(), None)
            self.calibrations = {s: calibrate(self.kernel.time_in_c, s * 1e9, 1) for s in lengths}
            self._wait = None

    def __call__(self, seconds: float) -> None:
        self.kernel.compute(self.calibrations[seconds].units)
        if self._wait is not None:
            self._wait()

    def describe(self) -> dict:
        """The kernel and, per slice length (s), its calibration error (measured / target - 1)."""
        out = {"kernel": self.name, "what": KERNELS[self.name].what,
               "slices": [{"seconds": s, "units": c.units, "calibration_error": round(c.error, 4)}
                          for s, c in self.calibrations.items()]}
        if self.name == "gemm":
            out["matrix_order"] = self.kernel.n
        return out


def _current_stream_wait(torch):
    """The host waits for the current stream (the slice's products), not for the whole device."""
    current = torch.cuda.current_stream
    return lambda: current().synchronize()

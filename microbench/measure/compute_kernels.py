"""The compute a non-blocking benchmark overlaps with its collective, and its calibration to a target time.

Host kernels run in C (``native/mbcompute.c``): in the native loop inside the loop's own library, in the
Python loops through ctypes from a build of mbcompute.c with the C compiler (``$CC``, else cc or gcc;
cached like the native loop). Per call one kernel runs ``units`` units:

- ``flops`` (compute-bound): 8 independent multiply-adds on doubles in registers per unit, 16 FLOP and
  0 bytes of memory traffic per unit.
- ``stream`` (memory-bandwidth-bound): one element of a triad a[i] = b[i] + s c[i] on doubles per unit,
  2 FLOP, 16 B read and 8 B written per unit (24 B; 32 B counting the write-allocate read), over three
  arrays sized to at least twice the last-level cache so that every call streams from memory.
- ``gemm`` (torch on CUDA): square fp32 matrix products on the current stream, 2 n^3 FLOP and 3 n^2 x 4 B
  per unit (one product; A and B read, C written), n chosen so that one product takes at most a quarter
  of the target; timed with CUDA events.

Calibration (per size): units per chunk = target / rate, then the kernel alone is timed (median of several
repetitions of all chunks) and the units rescaled by target / measured, three times; the last median is the
recorded ``calibrated_us`` and ``calibration_error`` = measured / target - 1.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from microbench.errors import RunError
from microbench.measure.native import toolchain

SOURCE = Path(__file__).parent / "native" / "mbcompute.c"
CALIBRATION_ROUNDS = 3
MIN_WORKING_SET = 8 << 20  #: stream arrays together span at least this, and twice the cache


@dataclass(frozen=True)
class KernelSpec:
    """A kernel as the records state it."""

    name: str
    code: int  #: mbcompute.c's MB_KERNEL_* (0: not a host kernel)
    what: str
    flops_per_unit: float
    bytes_per_unit: float  #: memory traffic, bytes read + written (no write-allocate)


KERNELS = {
    "flops": KernelSpec("flops", 1, "compute-bound: 8 independent multiply-adds on doubles in registers per unit",
                        16, 0),
    "stream": KernelSpec("stream", 2, "memory-bandwidth-bound: one element of a[i] = b[i] + s*c[i] on doubles "
                                      "per unit, arrays at least twice the last-level cache", 2, 24),
    "gemm": KernelSpec("gemm", 0, "CUDA: square fp32 matrix products on the current stream, one per unit", 0, 0),
}
HOST_KERNELS = ("flops", "stream")


class MbKernel(ctypes.Structure):
    """Mirror of ``mb_kernel`` in mbcompute.c."""

    _fields_ = [("kernel", ctypes.c_int), ("n", ctypes.c_longlong), ("pos", ctypes.c_longlong),
                ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p),
                ("acc", ctypes.c_double * 8)]


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Set the argument types of the kernel functions of a library built from (or including) mbcompute.c."""
    lib.mb_compute.restype = None
    lib.mb_compute.argtypes = [ctypes.POINTER(MbKernel), ctypes.c_longlong]
    lib.mb_time_compute.restype = None
    lib.mb_time_compute.argtypes = [ctypes.POINTER(MbKernel), ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_void_p]
    return lib


def c_compiler() -> str:
    """$CC, else cc or gcc on PATH (the standalone kernel library needs no MPI)."""
    import shutil

    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise RunError("non-blocking benchmarks in a Python loop need a C compiler for the host compute kernel "
                   "(set $CC, or install cc/gcc)")


def standalone_library() -> ctypes.CDLL:
    """mbcompute.c built on its own with the C compiler, cached (for the Python loops)."""
    try:
        path = toolchain.build_cached_with("mbcompute", [SOURCE], [], ".so", c_compiler())
        return declare(ctypes.CDLL(str(path)))
    except (toolchain.NativeUnavailable, OSError) as exc:
        raise RunError(f"cannot build the host compute kernel: {exc}") from exc


class HostKernel:
    """One rank's host kernel: its C state (and stream arrays, written here) and the library that runs it."""

    def __init__(self, spec: KernelSpec, lib: ctypes.CDLL, cache_bytes: int | None):
        self.spec, self.lib = spec, lib
        self.struct = MbKernel(spec.code)
        self.struct.acc[:] = [2.0] * 8  # converges towards 1.0, the fixed point of a * m + d
        self.arrays: list[np.ndarray] = []
        if spec.name == "stream":
            n = max(2 * (cache_bytes or 0), MIN_WORKING_SET) // 24 + 1
            self.arrays = [np.full(n, v) for v in (0.0, 1.0, 2.0)]  # written by this rank before any timing
            self.struct.n = n
            self.struct.a, self.struct.b, self.struct.c = (a.ctypes.data for a in self.arrays)
        self.pointer = ctypes.pointer(self.struct)
        self._compute = lib.mb_compute

    @property
    def working_set_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def compute(self, units: int) -> None:
        """Run ``units`` units (a ctypes call: the GIL is released while it runs)."""
        self._compute(self.pointer, units)

    def time_in_c(self, units: int, chunks: int, reps: int) -> np.ndarray:
        """``reps`` runs of ``chunks`` x ``units`` units, each timed in C (ns)."""
        out = np.zeros(reps, dtype=np.int64)
        self.lib.mb_time_compute(self.pointer, units, chunks, reps, out.ctypes.data)
        return out

    def time_from_python(self, units: int, chunks: int, reps: int) -> np.ndarray:
        """The same runs, each timed in Python around its ctypes calls, as a Python loop calls them (ns)."""
        import time

        clock, compute, out = time.perf_counter_ns, self.compute, np.zeros(reps, dtype=np.int64)
        for r in range(reps):
            t0 = clock()
            for _ in range(chunks):
                compute(units)
            out[r] = clock() - t0
        return out


@dataclass
class Calibration:
    """A kernel calibrated to a target time on this rank."""

    target_ns: float
    units: int  #: per chunk
    chunks: int
    measured_ns: float  #: median time of all chunks alone, after calibration

    @property
    def error(self) -> float:
        """measured / target - 1 (0.02: the compute runs 2 % longer than asked)."""
        return self.measured_ns / self.target_ns - 1 if self.target_ns > 0 else 0.0


def repetitions(target_ns: float) -> int:
    """Repetitions per calibration round: about 2 ms of compute, between 5 and 200."""
    return int(min(200, max(5, 2e6 / max(target_ns, 1.0))))


def calibrate(timer: Callable[[int, int, int], np.ndarray], target_ns: float, chunks: int) -> Calibration:
    """Units per chunk so that ``chunks`` chunks take ``target_ns``; ``timer(units, chunks, reps)`` returns
    the time of each of ``reps`` runs (ns). Units double from 1 until a run takes 20 us or the target, then
    rescale CALIBRATION_ROUNDS times by target / median."""
    units, floor_ns = 1, min(target_ns, 20_000.0)
    while True:
        took = float(np.median(timer(units, chunks, 3)))
        if took >= floor_ns or units >= 1 << 40:
            break
        units *= 2
    reps = repetitions(target_ns)
    for _ in range(CALIBRATION_ROUNDS):
        units = max(1, round(units * target_ns / max(took, 1.0)))
        took = float(np.median(timer(units, chunks, reps)))
    return Calibration(target_ns, units, chunks, took)


class CudaGemm:
    """The GPU kernel (torch on CUDA): ``units`` square fp32 products C = A B of order n on the current
    stream, n the largest of GEMM_ORDERS whose one product takes at most a quarter of the target
    (``size_for``); timed with CUDA events. Not run without a GPU (the tests skip it)."""

    GEMM_ORDERS = (128, 256, 512, 1024, 2048, 4096)

    def __init__(self):
        import torch

        self.torch = torch
        self.n = 0
        self.mats = ()

    def _use(self, n: int) -> None:
        if n != self.n:
            t = self.torch
            self.n = n
            self.mats = tuple(t.ones((n, n), dtype=t.float32, device="cuda") for _ in range(3))

    def size_for(self, target_ns: float) -> None:
        """Choose n for a target (ns): the largest order whose product takes at most target / 4."""
        chosen = self.GEMM_ORDERS[0]
        for n in self.GEMM_ORDERS:
            self._use(n)
            if float(np.median(self.time_events(1, 1, 3))) > target_ns / 4:
                break
            chosen = n
        self._use(chosen)

    def compute(self, units: int) -> None:
        a, b, c = self.mats
        mm = self.torch.mm
        for _ in range(units):
            mm(a, b, out=c)

    def time_events(self, units: int, chunks: int, reps: int) -> np.ndarray:
        """``reps`` runs of ``chunks`` x ``units`` products, each between two events (ns)."""
        Event = self.torch.cuda.Event
        pairs = [(Event(enable_timing=True), Event(enable_timing=True)) for _ in range(reps)]
        self.torch.cuda.synchronize()
        for begin, end in pairs:
            begin.record()
            for _ in range(chunks):
                self.compute(units)
            end.record()
        self.torch.cuda.synchronize()
        return np.array([round(b.elapsed_time(e) * 1e6) for b, e in pairs], dtype=np.int64)

    def unit_facts(self) -> dict:
        n = self.n
        return {"matrix_order": n, "flops_per_unit": 2.0 * n ** 3, "bytes_per_unit": 3.0 * n * n * 4}

"""The native loops: the timed loop in C (``NativeLoop``) and the Python loop over the C call shim
(``ShimPythonLoop``), with the loading of what ``toolchain`` built and the call descriptions the loops run.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
from pathlib import Path

import numpy as np

from microbench.measure.loops import OVERLAP_PARTS, LoopBase, OverlapWork, PythonLoop, call_sequence
from microbench.measure.native.toolchain import KINDS, MbCall, NativeUnavailable, same_version


def load_shim(path: Path, expected_version: str):
    """Import the built C call shim and make sure it talks to the MPI mpi4py loaded."""
    import importlib.machinery
    import importlib.util

    try:
        loader = importlib.machinery.ExtensionFileLoader("mbcall", str(path))
        spec = importlib.util.spec_from_file_location("mbcall", str(path), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}") from exc
    same_version(module.library_version(), expected_version)
    return module


def load(path: Path, expected_version: str) -> ctypes.CDLL:
    """Load the built library and make sure it talks to the MPI mpi4py loaded."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}") from exc
    lib.mb_calibrate.restype = ctypes.c_double
    lib.mb_calibrate.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.mb_run.restype = ctypes.c_int
    lib.mb_run.argtypes = [ctypes.POINTER(MbCall), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                           ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
    lib.mb_run_overlap.restype = ctypes.c_int
    lib.mb_run_overlap.argtypes = [ctypes.POINTER(MbCall), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    buf = ctypes.create_string_buffer(8192)
    lib.mb_library_version(buf, len(buf))
    same_version(buf.value.decode(errors="replace"), expected_version)
    return lib


class NativeCall:
    """One iteration's arguments for the C loop, with the Python objects they point into kept alive."""

    def __init__(self, kind: str, comm, dtype, op=None, send=None, recv=None, ack=None, count: int = 0,
                 peer: int = -1, root: int = 0, initiator: bool = False, window: int = 1, MPI=None,
                 counts: np.ndarray | None = None):
        if count > 2**31 - 1:
            raise NativeUnavailable("element count above 2^31-1")
        from microbench.measure.device import address_of

        if counts is not None:
            counts = np.ascontiguousarray(counts, dtype=np.intc)
        self.keep = (comm, dtype, op, send, recv, ack, counts)
        self.kind = kind
        self.struct = MbCall(
            KINDS[kind], count, peer, root, int(initiator), window,
            address_of(send) or None, address_of(recv) or None, address_of(ack) or None,
            MPI._addressof(comm), MPI._addressof(dtype), MPI._addressof(op) if op is not None else None,
            counts.ctypes.data if counts is not None else None,
        )


def invariant_tsc() -> bool:
    """Whether the CPU's time-stamp counter ticks at a constant rate in every state (Linux cpuinfo flags)."""
    if os.environ.get("MICROBENCH_TIMER", "") == "clock":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"constant_tsc", "nonstop_tsc"} <= flags
    except OSError:
        pass
    return False


def calibrated_timer(calibrate) -> tuple[float, str]:
    """Run mb_calibrate (``calibrate(want_tsc, ms)``): (ns per TSC tick, "tsc"), or (0.0, "host")."""
    ns_per_tick = calibrate(1 if invariant_tsc() else 0, 20)
    return ns_per_tick, "tsc" if ns_per_tick > 0 else "host"


class NativeLoop(LoopBase):
    """The timed loop in C; same interface and semantics as loops.PythonLoop.

    ``timer`` is "tsc" when the lean loop reads the invariant TSC (converted to ns with a rate measured
    against CLOCK_MONOTONIC over 20 ms at start; ``MICROBENCH_TIMER=clock`` turns it off), else "host".
    """

    kind = "native"
    call_path = "native"

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.ns_per_tick, self.timer = calibrated_timer(lib.mb_calibrate)
        self.last_timer = self.timer  #: the clock of the latest run (mb_run reads the TSC in its lean mode only)

    def prepare(self, calls):
        array = (MbCall * len(calls))(*[c.struct for c in calls])
        return (array, len(calls), calls)

    def run(self, prepared, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        """``iters`` iterations in C. A host flush buffer is written by the C loop itself; a flush the C loop
        cannot write (device memory, ``host_memory`` false) runs from Python before each iteration, which then
        runs alone in C after its barrier."""
        out = np.empty(max(iters, 0), dtype=np.int64)
        out.fill(0)  # the loop writes one duration per iteration: no page of this may fault in the timed loop
        if iters <= 0:
            return out
        self.last_timer = self.timer if barrier is None and flush is None else "host"
        if flush is not None and not flush.host_memory:
            for i in range(iters):
                flush(i)
                self._run_c(prepared, 1, start + i, True, None, out[i:i + 1])
            return out
        self._run_c(prepared, iters, start, barrier is not None, flush, out)
        return out

    def _run_c(self, prepared, iters: int, start: int, barrier: bool, flush, out: np.ndarray) -> None:
        array, ncalls, _ = prepared
        flush_ptr, flush_bytes = (flush.address, flush.nbytes) if flush is not None else (None, 0)
        rc = self.lib.mb_run(array, ncalls, iters, start, 1 if barrier else 0, flush_ptr, flush_bytes,
                             out.ctypes.data)
        if rc != 0:
            raise RuntimeError(f"native loop: MPI call failed with error code {rc}")

    def kernel_library(self) -> ctypes.CDLL:
        """The compute kernels run from this loop's own library (the same build as the timed loop); their
        prototypes are set here, on first use (a run without non-blocking benchmarks never imports them)."""
        from microbench.measure import compute_kernels

        return compute_kernels.declare(self.lib)

    def time_compute(self, kernel, units: int, chunks: int, reps: int) -> np.ndarray:
        return kernel.time_in_c(units, chunks, reps)

    def run_overlap(self, prepared, iters: int, work: OverlapWork, start: int = 0, barrier=None,
                    flush=None) -> np.ndarray:
        """mb_run_overlap: (iters, 5) durations in ns, columns OVERLAP_PARTS."""
        out = np.zeros((max(iters, 0), len(OVERLAP_PARTS)), dtype=np.int64)
        self.last_timer = self.timer
        if flush is not None and not flush.host_memory:  # a device flush runs from Python, as in run
            for i in range(iters):
                flush(i)
                self._overlap_c(prepared, 1, start + i, True, None, work, out[i:i + 1])
        elif iters > 0:
            self._overlap_c(prepared, iters, start, barrier is not None, flush, work, out)
        return out

    def _overlap_c(self, prepared, iters: int, start: int, barrier: bool, flush, work: OverlapWork, out) -> None:
        array, ncalls, _ = prepared
        flush_ptr, flush_bytes = (flush.address, flush.nbytes) if flush is not None else (None, 0)
        rc = self.lib.mb_run_overlap(array, ncalls, iters, start, 1 if barrier else 0, flush_ptr, flush_bytes,
                                     work.kernel.pointer, work.units, work.chunks, int(work.tests), out.ctypes.data)
        if rc != 0:
            raise RuntimeError(f"native loop: MPI call failed with error code {rc}")


class _BoundCalls(list):
    """Shim callables, one per buffer slot, with the NativeCalls whose buffers they point into kept alive."""

    keep: list


class ShimPythonLoop(PythonLoop):
    """The Python loop over calls bound in the C call shim (mbcall.c).

    The Python loop's iterations, one C function call each: it runs the iteration exactly as the native
    loop does (no per-call argument handling) and, in the lean loop, stamps the clock at its end into a
    buffer read after the loop, so the figure holds the MPI call plus CPython's loop, one Python-level
    call and the GIL's release and return. ``timer`` as NativeLoop's (the stamps are the same clock).
    """

    call_path = "shim"

    def __init__(self, module):
        self.module = module
        self.ns_per_tick, self.timer = calibrated_timer(module.calibrate)
        self.last_timer = self.timer  #: the clock of the latest run (the stamps are read in the lean loop only)

    def prepare(self, calls) -> list:
        bound = _BoundCalls(self.module.bind(ctypes.addressof(c.struct)) for c in calls)
        bound.keep = list(calls)
        return bound

    def run(self, calls: list, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        if barrier is not None or flush is not None or iters <= 0:
            self.last_timer = "host"  # both ends read in Python around each call
            return super().run(calls, iters, start, barrier, flush)
        stamps = np.empty(iters + 1, dtype=np.int64)
        stamps.fill(0)  # every page written here, so none faults in the timed loop
        single, sequence = call_sequence(calls, iters, start)
        module = self.module
        try:
            ns_per_tick = module.start(stamps.ctypes.data, iters + 1)
            if single is not None:
                for _ in itertools.repeat(None, iters):
                    single()
            else:
                for call in sequence:
                    call()
        finally:
            written = module.stop()
        if written != iters + 1:
            raise RuntimeError(f"C call shim: {written - 1} end stamps for {iters} iterations")
        self.last_timer = "tsc" if ns_per_tick > 0 else "host"
        durations = np.diff(stamps)
        if ns_per_tick > 0:
            durations = np.rint(durations * ns_per_tick).astype(np.int64)
        return durations

    def parts(self, prepared) -> list:
        """(post, test, wait) of each bound non-blocking call, through the shim's post/test/wait."""
        m = self.module
        return [(functools.partial(m.post, call.__self__), m.test, m.wait) for call in prepared]

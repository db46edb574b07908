"""The native timing loop (``mbloop.c``) and the Python loop's C call shim (``mbcall.c``, a Python
extension module that includes mbloop.c), both compiled with the mpicc of the MPI that mpi4py loaded.

Built at first use and cached (``$MICROBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/microbench``, else
``~/.cache/microbench``) under a key of the source, the compiler and the library, so a new MPI gets a
new build. Concurrent ranks serialise on a lock file and publish the library by atomic rename. The
compiler is ``$MICROBENCH_MPICC`` if set, else ``<prefix>/bin/mpicc`` beside the loaded libmpi, else the
mpicc mpi4py was built with, else ``mpicc`` on PATH. After loading, the library's MPI version string
must equal the one mpi4py reports, so a build against another MPI is never used. The shim's cache key
also holds the Python version and its include folder, and it needs that folder's Python.h.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

from microbench import compute_kernels
from microbench.loops import OVERLAP_PARTS, LoopBase, OverlapWork, PythonLoop, call_sequence

SOURCE = Path(__file__).with_name("mbloop.c")
SHIM_SOURCE = Path(__file__).with_name("mbcall.c")
COMPUTE_SOURCE = Path(__file__).with_name("mbcompute.c")  #: included by mbloop.c


def _call_kinds(source: Path) -> dict[str, int]:
    """mbloop.c's call kinds (its ``MB_NAME = value`` enum), by lower-case name: the C file is their one
    definition, so a new kind is added there alone."""
    block = re.search(r"enum\s*{(.*?)}", source.read_text(), re.S).group(1)
    return {name.lower(): int(value) for name, value in re.findall(r"MB_(\w+)\s*=\s*(\d+)", block)}


KINDS = _call_kinds(SOURCE)


class NativeUnavailable(Exception):
    """The native loop cannot be built or loaded here (the reason is the message)."""


class MbCall(ctypes.Structure):
    """Mirror of ``mb_call`` in mbloop.c."""

    _fields_ = [
        ("kind", ctypes.c_int), ("count", ctypes.c_int), ("peer", ctypes.c_int), ("root", ctypes.c_int),
        ("initiator", ctypes.c_int), ("window", ctypes.c_int),
        ("sbuf", ctypes.c_void_p), ("rbuf", ctypes.c_void_p), ("ack", ctypes.c_void_p),
        ("comm_addr", ctypes.c_void_p), ("dtype_addr", ctypes.c_void_p), ("op_addr", ctypes.c_void_p),
        ("counts", ctypes.c_void_p),
    ]


def cache_dir() -> Path:
    base = os.environ.get("MICROBENCH_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "microbench" if xdg else Path.home() / ".cache" / "microbench"


def find_mpicc(mpi_prefix: str | None) -> str:
    """The MPI C compiler wrapper that belongs to the loaded MPI."""
    override = os.environ.get("MICROBENCH_MPICC")
    if override:
        found = shutil.which(override)
        if not found:
            raise NativeUnavailable(f"MICROBENCH_MPICC={override} is not an executable")
        return found
    if mpi_prefix:
        candidate = Path(mpi_prefix) / "bin" / "mpicc"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    try:
        import mpi4py

        configured = mpi4py.get_config().get("mpicc")
        if configured and shutil.which(configured):
            return shutil.which(configured)
    except Exception:  # noqa: BLE001 - optional information
        pass
    found = shutil.which("mpicc")
    if not found:
        raise NativeUnavailable("no mpicc beside the MPI library, in mpi4py's configuration or on PATH")
    return found


def _compile_flags(mpicc: str) -> str:
    for flag in ("-show", "-showme", "--showme"):
        try:
            out = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return ""


def _python_include() -> str:
    """Folder of this interpreter's Python.h (the C call shim needs it)."""
    include = sysconfig.get_paths().get("include") or ""
    if not (Path(include) / "Python.h").exists():
        raise NativeUnavailable(f"no Python.h in {include or '?'} (install this Python's development headers, "
                                f"e.g. python3-dev)")
    return include


def build(mpi_prefix: str | None, libmpi_path: str | None) -> Path:
    """Compile (or find in the cache) the native loop library; returns its path."""
    return _build_cached("mbloop", [SOURCE, COMPUTE_SOURCE], [], ".so", mpi_prefix, libmpi_path)


def build_shim(mpi_prefix: str | None, libmpi_path: str | None) -> Path:
    """Compile (or find in the cache) the C call shim, a Python extension module; returns its path."""
    include = _python_include()
    # hidden: the module's only export is PyInit_mbcall, so its mb_* functions never bind to another copy
    return _build_cached("mbcall", [SHIM_SOURCE, SOURCE, COMPUTE_SOURCE], ["-fvisibility=hidden", f"-I{include}", f"-I{SOURCE.parent}"],
                         sysconfig.get_config_var("EXT_SUFFIX") or ".so", mpi_prefix, libmpi_path,
                         key_extra=[include, sys.version])


def build_cached_with(name: str, sources: list[Path], flags: list[str], suffix: str, compiler: str) -> Path:
    """Compile ``sources[0]`` with ``compiler`` (no MPI involved), cached like the native loop."""
    return _build_cached(name, sources, flags, suffix, None, None, compiler=compiler)


def _build_cached(name: str, sources: list[Path], flags: list[str], suffix: str, mpi_prefix: str | None,
                  libmpi_path: str | None, key_extra: list[str] = (), compiler: str | None = None) -> Path:
    """Compile ``sources[0]`` (which may include the others) under a cache key of everything that matters."""
    mpicc = compiler or find_mpicc(mpi_prefix)
    stat = os.stat(libmpi_path) if libmpi_path and os.path.exists(libmpi_path) else None
    key_text = b"\0".join([*(src.read_bytes() for src in sources), mpicc.encode(), _compile_flags(mpicc).encode(),
                           str(libmpi_path).encode(), str(stat.st_size if stat else "").encode(),
                           str(int(stat.st_mtime) if stat else "").encode(), *(x.encode() for x in key_extra)])
    key = hashlib.sha256(key_text).hexdigest()[:16]
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NativeUnavailable(f"cannot create the cache directory {directory}: {exc}") from exc
    target = directory / f"{name}-{key}{suffix}"
    if target.exists():
        return target
    try:
        return _compile(mpicc, directory, f"{name}-{key}", target, [*flags, str(sources[0])])
    except OSError as exc:  # a cache folder this user cannot write, a full disk
        raise NativeUnavailable(f"cannot build in the cache directory {directory}: {exc}") from exc


def _compile(mpicc: str, directory: Path, stem: str, target: Path, args: list[str]) -> Path:
    """Compile under a lock so that concurrent ranks build once; publish by atomic rename."""
    with open(directory / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if target.exists():  # another rank built it while we waited
                return target
            fd, tmp = tempfile.mkstemp(prefix=f"{stem}-", suffix=".so", dir=directory)
            os.close(fd)
            cmd = [mpicc, "-O2", "-fPIC", "-shared", "-o", tmp, *args]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                os.unlink(tmp)
                raise NativeUnavailable(f"{mpicc} failed to run: {exc}") from exc
            if out.returncode != 0:
                os.unlink(tmp)
                first = (out.stderr or out.stdout).strip().splitlines()
                raise NativeUnavailable(f"{mpicc} failed: {first[0] if first else 'exit ' + str(out.returncode)}")
            os.replace(tmp, target)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _same_version(got: str, expected: str) -> None:
    got, expected = got.replace("\x00", "").strip(), expected.replace("\x00", "").strip()
    if got != expected:
        raise NativeUnavailable(f"built against another MPI ({got.splitlines()[0] if got else '?'})")


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
    _same_version(module.library_version(), expected_version)
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
    compute_kernels.declare(lib)
    buf = ctypes.create_string_buffer(8192)
    lib.mb_library_version(buf, len(buf))
    _same_version(buf.value.decode(errors="replace"), expected_version)
    return lib


class NativeCall:
    """One iteration's arguments for the C loop, with the Python objects they point into kept alive."""

    def __init__(self, kind: str, comm, dtype, op=None, send=None, recv=None, ack=None, count: int = 0,
                 peer: int = -1, root: int = 0, initiator: bool = False, window: int = 1, MPI=None,
                 counts: np.ndarray | None = None):
        if count > 2**31 - 1:
            raise NativeUnavailable("element count above 2^31-1")
        from microbench.device import address_of

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
        """The compute kernels run from this loop's own library (the same build as the timed loop)."""
        return self.lib

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

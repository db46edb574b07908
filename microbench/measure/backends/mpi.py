"""MPI transport through mpi4py: library discovery, initialisation, the benchmark primitives.

Each primitive returns a zero-argument callable that performs one iteration, with every argument bound
in advance so that the timed loop does nothing but call it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from microbench.benchmarks.table import MPI_CALLS, nonblocking_mpi_call

if TYPE_CHECKING:  # pragma: no cover
    from microbench.measure.backends.nonblocking import NonBlocking

_TAG_DATA, _TAG_ACK = 1, 2


def _nonblocking_twin(blocking: str):
    """The primitive i<blocking>: the blocking primitive's call, posted non-blocking (see ``_nonblocking``)."""
    def primitive(self, *args):
        return self._nonblocking(getattr(self, blocking)(*args))

    primitive.__name__ = primitive.__qualname__ = f"i{blocking}"
    return primitive


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

    #: the MPI function each blocking primitive calls, as the benchmark table says (reduce_scatter: see
    #: ``reduce_scatter_call``)
    CALLS = MPI_CALLS
    #: --reduce-scatter-call: block (MPI_Reduce_scatter_block, as nccl-tests and torch) or vector
    #: (MPI_Reduce_scatter with n equal receive counts, as OMB's osu_reduce_scatter)
    REDUCE_SCATTER_CALLS = {"block": "MPI_Reduce_scatter_block", "vector": "MPI_Reduce_scatter"}

    def __init__(self, comm, MPI, reduce_scatter_call: str = "block"):
        self.comm, self.MPI = comm, MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self.reduce_scatter_call = reduce_scatter_call

    def on(self, comm) -> "MPIBackend":
        """The same primitives on another communicator (a sub-communicator of the run's)."""
        return type(self)(comm, self.MPI, self.reduce_scatter_call)

    def call_name(self, primitive: str) -> str | None:
        """The MPI function a primitive's iteration calls (recorded as ``mpi_call``; non-blocking primitives:
        the I-form of their blocking twin's, MPI_Iallreduce for iallreduce)."""
        if primitive == "reduce_scatter":
            return self.REDUCE_SCATTER_CALLS[self.reduce_scatter_call]
        if primitive not in self.CALLS and primitive.startswith("i") and primitive[1:] in self.CALLS:
            return nonblocking_mpi_call(self.call_name(primitive[1:]))
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
        missing = datatype_refusal(self.MPI, dtype)
        if missing:
            return missing
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

    def alltoallv(self, send, recv, send_counts, recv_counts):
        """MPI_Alltoallv: ``send_counts[j]`` elements to rank j, ``recv_counts[j]`` from it, blocks back to back."""
        sc, sd = _counts_and_displacements(send_counts)
        rc, rd = _counts_and_displacements(recv_counts)
        s = (self.MPI.buffer(send) if isinstance(send, np.ndarray) else send, (sc, sd), self.mpi_type(send))
        r = (self.MPI.buffer(recv) if isinstance(recv, np.ndarray) else recv, (rc, rd), self.mpi_type(recv))
        return functools.partial(self.comm.Alltoallv, s, r)

    # Non-blocking collectives: the blocking call's arguments, posted with its MPI_I* twin -------------
    def _nonblocking(self, blocking: functools.partial) -> "NonBlocking":
        from microbench.measure.backends.nonblocking import NonBlocking  # non-blocking benchmarks alone

        name = blocking.func.__name__  # Allreduce -> Iallreduce, Bcast -> Ibcast
        start = getattr(self.comm, "I" + name[0].lower() + name[1:])
        return NonBlocking(functools.partial(start, *blocking.args), self.MPI.Request.Test, self.MPI.Request.Wait)

    iallreduce, ireduce = _nonblocking_twin("allreduce"), _nonblocking_twin("reduce")
    iallgather, ireduce_scatter = _nonblocking_twin("allgather"), _nonblocking_twin("reduce_scatter")
    ibroadcast, ialltoall = _nonblocking_twin("broadcast"), _nonblocking_twin("alltoall")
    ialltoallv = _nonblocking_twin("alltoallv")

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

    def shift(self, send, recv, dest, source):
        """One step of a shift along this communicator (the replay's pipeline send): send to ``dest`` and receive
        from ``source`` at once (MPI_Sendrecv); None at either end: no partner there (MPI_PROC_NULL)."""
        null = self.MPI.PROC_NULL
        return functools.partial(self.comm.Sendrecv, self._spec(send), null if dest is None else dest, _TAG_DATA,
                                 self._spec(recv), null if source is None else source, _TAG_DATA)

    def barrier(self):
        return self.comm.Barrier


class NativeMPIBackend(MPIBackend):
    """The same primitives, described for the C loop (microbench.measure.native) instead of called from Python."""

    def _call(self, kind, arr_for_type, **kw):
        from microbench.measure.native.loops import NativeCall

        return NativeCall(kind, self.comm, self.mpi_type(arr_for_type), MPI=self.MPI, **kw)

    def _nonblocking(self, blocking):
        """The blocking call's description with its non-blocking kind (allreduce -> iallreduce, bcast -> ibcast)."""
        from microbench.measure.native.toolchain import KINDS

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

    def alltoallv(self, send, recv, send_counts, recv_counts):
        """The C loop's MPI_Alltoallv: ``counts`` holds send counts, send displacements, receive counts and receive
        displacements (n each) and ``count`` the n they are."""
        sc, sd = _counts_and_displacements(send_counts, np.intc)
        rc, rd = _counts_and_displacements(recv_counts, np.intc)
        return self._call("alltoallv", send, send=send, recv=recv, count=self.size,
                          counts=np.concatenate([sc, sd, rc, rd]))

    def pingpong(self, send, recv, peer, initiator):
        if peer is None:
            return self._call("nothing", send)
        return self._call("pingpong", send, send=send, recv=recv, count=_elements(send), peer=peer, initiator=initiator)

    def stream(self, send, recv, ack, peer, sender, window, bidirectional):
        if peer is None:
            return self._call("nothing", send)
        return self._call("bistream" if bidirectional else "stream", send, send=send, recv=recv, ack=ack,
                          count=_elements(send), peer=peer, initiator=sender, window=window)

    def shift(self, send, recv, dest, source):
        from microbench.measure.native.toolchain import NativeUnavailable

        raise NativeUnavailable("the C loop has no shift (MPI_Sendrecv): the replay calls it from Python")


def _nothing() -> None:
    return None


def _counts_and_displacements(counts, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Counts and the displacements of blocks laid back to back (elements), as ``dtype``: int64 for mpi4py (which
    calls the large-count MPI_Alltoallv_c where an int cannot hold them), C int for the C loop."""
    wide = np.ascontiguousarray(counts, dtype=np.int64)
    displacements = np.zeros(len(wide), dtype=np.int64)
    np.cumsum(wide[:-1], out=displacements[1:])
    if dtype is np.intc and (len(wide) and (displacements[-1] + wide[-1]) > np.iinfo(np.intc).max):
        from microbench.measure.native.toolchain import NativeUnavailable

        raise NativeUnavailable("an alltoallv of more than 2^31-1 elements (C int counts and displacements)")
    return wide.astype(dtype), displacements.astype(dtype)


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


def datatype_refusal(MPI, dtype) -> str | None:
    """Why the loaded MPI library has no datatype for DTYPE (None when it has one): needs mpi4py imported, not
    MPI initialised, so the ``--np`` parent asks it before starting any rank."""
    mpi_type = MPI._typedict.get(dtype.numpy.char) if dtype.numpy is not None else None
    if mpi_type is None or mpi_type == MPI.DATATYPE_NULL:
        return f"{dtype.name} has no MPI datatype in this library; use --backend torch for {dtype.name}"
    return None

"""torch.distributed transport: process-group setup, the benchmark primitives, a gloo control plane.

Setup. Under torchrun the process group comes from its environment (env://). Under mpiexec or srun,
rank 0 opens a TCPStore on a port the kernel picks (port 0, so concurrent jobs never collide) and the
other ranks learn host and port from rank 0 through MPI; every rank then joins with that store.

Primitives return zero-argument callables with their tensors bound, like the MPI backend's. Where the
torch API is in place only (all_reduce, reduce), the benchmark runs in place and says so. In-place
reduce_scatter follows NCCL's convention (each rank's result at its own block of the input).
The newest collective names of the installed torch are used (all_gather_single, reduce_scatter_single
where they exist, all_gather_into_tensor and reduce_scatter_tensor before).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from microbench.cluster.torch_runtime import import_torch
from microbench.measure.backends.nonblocking import NonBlocking

_TAG_DATA, _TAG_ACK = 1, 2


def torch_dtype(torch, name: str):
    return {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
            "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
            "uint8": torch.uint8}[name]


def host_tensor(torch, array: np.ndarray):
    """A CPU tensor sharing memory with a numpy array (bfloat16 through its 16-bit pattern)."""
    if array.dtype.itemsize == 2 and array.dtype.char == "E":  # ml_dtypes.bfloat16
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class TorchBackend:
    """Benchmark primitives on torch.distributed (tensors on the CPU or one CUDA device)."""

    name = "torch"
    #: primitives whose torch API works in place only (all_reduce, reduce)
    in_place_only: tuple[str, ...] = ("allreduce", "reduce", "iallreduce", "ireduce")
    #: where an in-place reduce_scatter leaves this rank's result: at its own block (NCCL's convention)
    in_place_result_at_rank = True

    def __init__(self, group=None):
        self.torch, self.dist = import_torch()
        self.group = group
        #: this rank and the rank count in ``group`` (the run's group holds every rank: the world's numbers)
        self.rank = self.dist.get_rank(group)
        self.size = self.dist.get_world_size(group)
        d = self.dist
        self.ops = {"sum": d.ReduceOp.SUM, "max": d.ReduceOp.MAX, "min": d.ReduceOp.MIN}
        self._connected: set[int] = set()  #: peers this rank has exchanged with (see connect)
        self._all_gather = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor
        self._reduce_scatter = getattr(d, "reduce_scatter_single", None) or d.reduce_scatter_tensor

    def call_name(self, primitive: str) -> str | None:
        """The MPI function a primitive calls: none (torch.distributed has its own)."""
        return None

    def _global(self, rank: int) -> int:
        """The world rank of ``rank`` of the group: torch.distributed names roots and peers by world rank."""
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def check_dtype(self, dtype, reduces: bool, op: str) -> str | None:
        """Why this process group cannot run the dtype (None when it can), probed with a 1-element call."""
        if dtype.name == "bfloat16" and dtype.numpy is None:
            return "bfloat16 needs ml_dtypes for its host copy (pip install ml_dtypes)"
        if not reduces:
            return None
        t = self.torch.ones(1, dtype=torch_dtype(self.torch, dtype.name), device=self.device)
        try:
            self.dist.all_reduce(t, op=self.ops[op], group=self.group)
        except (RuntimeError, ValueError, TypeError) as exc:
            return f"this torch backend cannot reduce {dtype.name} with {op} ({str(exc).splitlines()[0]})"
        return None

    device = "cpu"

    # Collectives ---------------------------------------------------------------------------
    def allreduce(self, send, recv, op):
        if send is not None:
            raise ValueError("torch all_reduce is in place")
        f, g, o = self.dist.all_reduce, self.group, self.ops[op]
        return lambda: f(recv, op=o, group=g)

    def reduce(self, send, recv, op, root):
        if send is not None:
            raise ValueError("torch reduce is in place")
        f, g, o, dst = self.dist.reduce, self.group, self.ops[op], self._global(root)
        return lambda: f(recv, dst, op=o, group=g)

    def _own_block(self, tensor):
        """This rank's block of a tensor split n ways (in-place allgather input, reduce_scatter output)."""
        block = tensor.numel() // self.size
        return tensor[self.rank * block:(self.rank + 1) * block]

    def allgather(self, send, recv):
        f, g = self._all_gather, self.group
        send = self._own_block(recv) if send is None else send
        return lambda: f(recv, send, group=g)

    def reduce_scatter(self, send, recv, op):
        f, g, o = self._reduce_scatter, self.group, self.ops[op]
        if send is None:
            send, recv = recv, self._own_block(recv)
        return lambda: f(recv, send, op=o, group=g)

    def broadcast(self, buf, root):
        f, g, src = self.dist.broadcast, self.group, self._global(root)
        return lambda: f(buf, src, group=g)

    def alltoall(self, send, recv):
        f, g = self.dist.all_to_all_single, self.group
        return lambda: f(recv, send, group=g)

    def _split_views(self, send, recv, send_counts, recv_counts):
        """all_to_all_single's tensors and split sizes: the buffers cut to what this rank sends and receives
        (torch checks that the splits sum to each tensor's length)."""
        ins, outs = [int(x) for x in send_counts], [int(x) for x in recv_counts]
        return recv[:sum(outs)], send[:sum(ins)], outs, ins

    def alltoallv(self, send, recv, send_counts, recv_counts):
        f, g = self.dist.all_to_all_single, self.group
        out, inp, out_splits, in_splits = self._split_views(send, recv, send_counts, recv_counts)
        return lambda: f(out, inp, out_splits, in_splits, group=g)

    # Non-blocking collectives: async_op=True, then is_completed() / wait() ---------------------------
    def iallreduce(self, send, recv, op):
        if send is not None:
            raise ValueError("torch all_reduce is in place")
        return _async(self.dist.all_reduce, recv, op=self.ops[op], group=self.group)

    def ireduce(self, send, recv, op, root):
        if send is not None:
            raise ValueError("torch reduce is in place")
        return _async(self.dist.reduce, recv, self._global(root), op=self.ops[op], group=self.group)

    def iallgather(self, send, recv):
        send = self._own_block(recv) if send is None else send
        return _async(self._all_gather, recv, send, group=self.group)

    def ireduce_scatter(self, send, recv, op):
        if send is None:
            send, recv = recv, self._own_block(recv)
        return _async(self._reduce_scatter, recv, send, op=self.ops[op], group=self.group)

    def ibroadcast(self, buf, root):
        return _async(self.dist.broadcast, buf, self._global(root), group=self.group)

    def ialltoall(self, send, recv):
        return _async(self.dist.all_to_all_single, recv, send, group=self.group)

    def ialltoallv(self, send, recv, send_counts, recv_counts):
        out, inp, out_splits, in_splits = self._split_views(send, recv, send_counts, recv_counts)
        return _async(self.dist.all_to_all_single, out, inp, out_splits, in_splits, group=self.group)

    # Point to point ------------------------------------------------------------------------
    def connect(self, peer: int, initiator: bool, like) -> None:
        """Untimed exchanges the first time this rank is paired with ``peer``, so that no first call carries
        NCCL's connection setup: a send and a receive (NCCL builds a two-rank communicator for single send/recv
        at first use), and one batched pair (``batch_isend_irecv``, which bw and bibw use, runs on the group's
        communicator, whose connection to the peer is also made at first use)."""
        if peer in self._connected:
            return
        self._connected.add(peer)
        d, g = self.dist, self.group
        box, other = like.new_zeros(1), like.new_zeros(1)
        first, second = (d.send, d.recv) if initiator else (d.recv, d.send)
        first(box, peer, group=g, tag=_TAG_ACK)
        second(box, peer, group=g, tag=_TAG_ACK)
        _wait_all(d.batch_isend_irecv([d.P2POp(d.isend, box, peer, g, _TAG_ACK),
                                       d.P2POp(d.irecv, other, peer, g, _TAG_ACK)]))

    def pingpong(self, send, recv, peer, initiator):
        if peer is None:
            return _nothing
        peer = self._global(peer)
        self.connect(peer, initiator, send)
        s, r, g = self.dist.send, self.dist.recv, self.group
        if initiator:
            def call():
                s(send, peer, group=g, tag=_TAG_DATA)
                r(recv, peer, group=g, tag=_TAG_DATA)
        else:
            def call():
                r(recv, peer, group=g, tag=_TAG_DATA)
                s(send, peer, group=g, tag=_TAG_DATA)
        return call

    def stream(self, send, recv, ack, peer, sender, window, bidirectional):
        if peer is None:
            return _nothing
        peer = self._global(peer)
        self.connect(peer, sender, send)
        d, g = self.dist, self.group
        P2POp, batch = d.P2POp, d.batch_isend_irecv
        rng = range(window)
        if bidirectional:
            ops = [P2POp(d.irecv, recv, peer, g, _TAG_DATA) for _ in rng] + \
                  [P2POp(d.isend, send, peer, g, _TAG_DATA) for _ in rng]
            return lambda: _wait_all(batch(ops))
        if sender:
            ops = [P2POp(d.isend, send, peer, g, _TAG_DATA) for _ in rng]
            r = d.recv

            def call():
                _wait_all(batch(ops))
                r(ack, peer, group=g, tag=_TAG_ACK)
        else:
            ops = [P2POp(d.irecv, recv, peer, g, _TAG_DATA) for _ in rng]
            s = d.send

            def call():
                _wait_all(batch(ops))
                s(ack, peer, group=g, tag=_TAG_ACK)
        return call

    def shift(self, send, recv, dest, source):
        """One step of a shift along the group (the replay's pipeline send): send to ``dest`` and receive from
        ``source`` (group ranks) in one ``batch_isend_irecv``; None at either end: no partner there."""
        d, g = self.dist, self.group
        ops = [d.P2POp(op, tensor, self._global(peer), g, _TAG_DATA)
               for op, tensor, peer in ((d.isend, send, dest), (d.irecv, recv, source)) if peer is not None]
        if not ops:
            return _nothing
        batch = d.batch_isend_irecv
        return lambda: _wait_all(batch(ops))

    def barrier(self) -> Callable[[], None]:
        """A barrier on the benchmark's group; on CUDA the device is synchronised first."""
        d, g = self.dist, self.group
        if self.device != "cuda":
            return lambda: d.barrier(group=g)
        sync = self.torch.cuda.synchronize
        if barrier_takes_device_ids(d.get_backend(g)):
            ids = [self.torch.cuda.current_device()]
            return lambda: (sync(), d.barrier(group=g, device_ids=ids))
        return lambda: (sync(), d.barrier(group=g))


def barrier_takes_device_ids(backend_name: str) -> bool:
    """Only NCCL groups take ``barrier(device_ids=...)``; gloo, mpi and ucc raise on it up to torch 2.6."""
    return str(backend_name).lower() == "nccl"


class TorchCudaBackend(TorchBackend):
    """The same primitives on CUDA tensors of this rank's device."""

    device = "cuda"


def _async(f, *args, **kwargs) -> NonBlocking:
    """A torch.distributed collective posted with async_op=True: its Work is the handle."""
    return NonBlocking(functools.partial(f, *args, async_op=True, **kwargs), _completed, _wait)


def _completed(work) -> bool:
    return work.is_completed()


def _wait(work) -> None:
    work.wait()


def _wait_all(works) -> None:
    for w in works:
        w.wait()


def _nothing() -> None:
    return None





"""The replay on torch.distributed: the layout's groups as process groups, the measure layer's torch primitives on each.

Every rank creates every group of every kind, in the same order (``dist.new_group`` is collective on the default
group), on the chosen backend (gloo, or NCCL on CUDA), and a gloo twin of its own groups for the control traffic
(barriers, the slowest rank's figures), so that a control value never goes through NCCL.

Every call goes through ``dispatch.Dispatcher``: the benchmark table's entry built on ``TorchBackend`` over its
group (``all_reduce`` and ``reduce`` in place, ``all_gather_single``, ``reduce_scatter_single``,
``all_to_all_single``, ``broadcast``; ``async_op=True`` for an overlapped call, its Work waited at the end of its
segment; the pipeline shift as ``batch_isend_irecv``), from one uint8 tensor (``pool.TensorPool``, on the rank's GPU
with ``--device cuda``). On CUDA (NCCL) a collective returns once it is queued on the stream, so the device is
synchronized after every blocking call and after every wait: a call's time includes its completion.
"""

from __future__ import annotations

from microbench.errors import UsageError
from microbench.replay.dispatch import Dispatcher
from microbench.replay.layout import Layout
from microbench.replay.pool import TensorPool
from microbench.replay.schedule import Call


class TorchIssuer:
    """This rank's process groups of each kind and its calls on them (collective to build: every rank)."""

    def __init__(self, world, layout: Layout, rank: int, schedule: list[Call], torch_backend: str, device: str):
        from microbench.cluster import torch_runtime
        from microbench.measure.backends.torch_dist import TorchBackend, TorchCudaBackend

        self.name = torch_runtime.resolve_backend(torch_backend, device)
        torch, dist = torch_runtime.import_torch()
        self.torch, self.dist = torch, dist
        self.backend = f"torch-{self.name}"
        self.cuda = device == "cuda"
        index = self._select_gpu() if self.cuda else None
        if not dist.is_initialized():  # under mpiexec/srun: rank 0's TCPStore address travels over MPI
            torch_runtime.init_process_group("gloo", world.rank, world.nranks, world.launcher,
                                             bcast=lambda obj: world.reducer.bcast(obj, root=0))
        options = torch_runtime.group_options(self.name, index, dist.new_group)
        groups, self.control = {}, {}
        for kind in layout.kinds:
            for ranks in layout.groups(kind):
                group = dist.new_group(ranks=list(ranks), backend=self.name, **options)
                control = dist.new_group(ranks=list(ranks), backend="gloo")
                if rank in ranks:
                    groups[kind], self.control[kind] = group, control
        primitives = TorchCudaBackend if self.cuda else TorchBackend
        where = torch.device("cuda", index) if self.cuda else torch.device("cpu")
        #: the dispatcher: ``issued(call)`` is the call prepared on its group
        self.issued = Dispatcher({kind: primitives(group) for kind, group in groups.items()}, schedule,
                                 lambda size: TensorPool(size, torch, where),
                                 torch.cuda.synchronize if self.cuda else None)
        self._sync()

    def _select_gpu(self) -> int:
        from microbench.cluster import launch
        from microbench.measure.device import index_for_rank

        torch = self.torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        index = index_for_rank(launch.discover().local_rank, torch.cuda.device_count(), None)
        torch.cuda.set_device(index)
        return index

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def barrier(self) -> None:
        """A barrier over the whole job."""
        self.dist.barrier()

    def _max(self, value: float, group) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=group)
        return float(t.item())

    def group_max(self, kind: str, value: float) -> float:
        """The largest ``value`` over this rank's group of ``kind`` (collective on that group)."""
        return self._max(value, self.control[kind])

    def world_max(self, value: float) -> float:
        """The largest ``value`` over the whole job (collective on every rank)."""
        return self._max(value, None)

    def close(self) -> None:
        """Let the pool go (and the device's cache with it)."""
        self.issued.close()
        if self.cuda:
            self.torch.cuda.empty_cache()

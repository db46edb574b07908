"""The replay on torch.distributed: the layout's groups as process groups, the measure layer's torch primitives on each.

Every rank creates every group of every kind, in the same order (``dist.new_group`` is collective on the default
group), on the chosen backend (gloo, or NCCL on CUDA), and a gloo twin of its own groups for the control traffic
(barriers, the slowest rank's figures), so that a control value never goes through NCCL.

Every call goes through ``dispatch.Dispatcher``: the benchmark table's entry built on ``TorchBackend`` over its
group (``all_reduce`` and ``reduce`` in place, ``all_gather_single``, ``reduce_scatter_single``,
``all_to_all_single``, ``broadcast``; ``async_op=True`` for an overlapped call, its Work waited at the end of its
segment; the pipeline shift as ``batch_isend_irecv``), from one uint8 tensor (``pool.TensorPool``, on the rank's GPU
with ``--device cuda``). On CUDA (NCCL) a collective returns once it is queued on the stream, so the host waits
for the current stream after every blocking call and after every wait (``stream_settle``): a call's time includes
its own completion, and not that of another group's posted calls still running on their NCCL streams.
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
        index = self._gpu(world) if self.cuda else None
        if not dist.is_initialized():  # under mpiexec/srun: rank 0's TCPStore address travels over MPI
            torch_runtime.init_process_group("gloo", world.rank, world.nranks, world.launcher,
                                             bcast=lambda obj: world.reducer.bcast(obj, root=0))
        options = torch_runtime.group_options(self.name, index, dist.new_group)
        groups, self.control = {}, {}
        self._groups = groups
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
                                 lambda size: TensorPool(size, torch, where), self._settle())
        self._sync()

    def _settle(self):
        """What completes a call on CUDA: the host waits for the current stream, where a blocking call runs (or
        which waited for it) and where a posted call's ``wait`` puts its Work; never the whole device, which
        would charge another group's posted calls still in flight to this one. None on the CPU."""
        return stream_settle(self.torch) if self.cuda else None

    def _gpu(self, world) -> int:
        """Collective: this rank's GPU made current; under NCCL, ranks that share a GPU refused (every rank raises
        the same error) before any communicator exists, as ``run`` does (NCCL would fail the group's creation)."""
        from microbench.cluster import agree
        from microbench.errors import RunError

        index, error = None, None
        try:
            index = self._select_gpu()
        except (UsageError, RunError) as exc:
            error = exc
        agree.raise_if_any(world.reducer, error)
        if self.name == "nccl":
            import platform

            from microbench.cluster import launch
            from microbench.measure import device

            here = device.DeviceChoice("cuda", "torch", index, None, 0, None, device.device_uuid("torch", index),
                                       bus_id=device.device_bus_id("torch", index))
            mine = device.rank_gpu(platform.node(), launch.discover().local_rank, here)
            device.refuse_shared_gpus(world.reducer.bcast(world.reducer.gather(mine), root=0),
                                      "RCCL" if device.gpu_runtime("torch") == "rocm" else "NCCL")
        return index

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

    def ran_on(self, kind: str) -> tuple[int, ...]:
        """The world ranks of this rank's process group of ``kind``, in its rank order (asked of torch)."""
        return tuple(self.dist.get_process_group_ranks(self._groups[kind]))

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


def stream_settle(torch):
    """A function that waits for the current CUDA stream (``torch.cuda.current_stream().synchronize()``)."""
    current = torch.cuda.current_stream
    return lambda: current().synchronize()

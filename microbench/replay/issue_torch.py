"""The replay's torch.distributed issuer: the layout's groups as process groups, calls from one pooled tensor.

Every rank creates every group of every kind, in the same order (``dist.new_group`` is collective on the
default group), on the chosen backend (gloo, or NCCL on CUDA), and a gloo twin of its own groups for the
control traffic (barriers, the slowest rank's figures), so that a control value never goes through NCCL.

One tensor holds every call's buffers (uint8 storage, on the rank's GPU with ``--device cuda``): send data at
offset 0, receive data after the largest message (rounded up to 64 B), sized by the largest message times
(1 + the largest group), written in full before anything is timed. Reductions run on float32 elements
(bytes // 4, at least one) in place on the receive side (torch's ``all_reduce`` is in place); allgather
``all_gather_single``, reduce_scatter ``reduce_scatter_single`` (``all_gather_into_tensor`` and
``reduce_scatter_tensor`` before torch 2.13; each rank's input is the message),
alltoall ``all_to_all_single`` (one block of the message per peer), reduce and broadcast rooted at the
group's first rank, the pipeline ``send`` a shift along the pipeline group (``batch_isend_irecv``: to the
next stage and from the previous in forward, the other way in backward).

Completion: an overlapped call returns its Work, waited with the others at the end of its segment; a
blocking call returns when the backend says it completed. On CUDA (NCCL) a collective returns once it is
queued on the stream, so the issuer synchronizes the device after every blocking call and after every wait:
a call's time includes its completion.
"""

from __future__ import annotations

from microbench.errors import RunError, UsageError
from microbench.replay.layout import KINDS, Layout
from microbench.replay.schedule import Call, receive_offset


class TorchIssuer:
    """This rank's process groups of each kind and its pooled tensor (collective to build: every rank)."""

    def __init__(self, world, layout: Layout, rank: int, largest_bytes: int, torch_backend: str, device: str):
        from microbench.cluster import launch, torch_runtime

        self.name = torch_runtime.resolve_backend(torch_backend, device)
        torch, dist = torch_runtime.import_torch()
        self.torch, self.dist = torch, dist
        self.backend = f"torch-{self.name}"
        self.cuda = device == "cuda"
        index = None
        if self.cuda:
            if not torch.cuda.is_available():
                raise UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
            from microbench.measure.device import index_for_rank

            index = index_for_rank(launch.discover().local_rank, torch.cuda.device_count(), None)
            torch.cuda.set_device(index)
        if not dist.is_initialized():  # under mpiexec/srun: rank 0's TCPStore address travels over MPI
            torch_runtime.init_process_group("gloo", world.rank, world.nranks, world.launcher,
                                             bcast=lambda obj: world.reducer.bcast(obj, root=0))
        options = torch_runtime.group_options(self.name, index, dist.new_group)
        self.groups, self.control, self.members = {}, {}, {}
        for kind in KINDS:
            for ranks in layout.groups(kind):
                group = dist.new_group(ranks=list(ranks), backend=self.name, **options)
                control = dist.new_group(ranks=list(ranks), backend="gloo")
                if rank in ranks:
                    self.groups[kind], self.control[kind], self.members[kind] = group, control, ranks
        # the newest names the installed torch has (all_gather_single since 2.13), the older ones before
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        pp = self.members["pp"]
        stage = pp.index(rank)
        self.pipeline_next = pp[stage + 1] if stage + 1 < len(pp) else None
        self.pipeline_prev = pp[stage - 1] if stage > 0 else None
        widest = max(len(m) for m in self.members.values())
        self.largest = receive_offset(largest_bytes)
        where = torch.device("cuda", index) if self.cuda else torch.device("cpu")
        try:
            self.pool = torch.ones(self.largest * (1 + widest), dtype=torch.uint8, device=where)
        except RuntimeError as exc:  # out of memory on the device or the host
            raise RunError(f"cannot allocate the replay's buffer pool of {self.largest * (1 + widest)} B on "
                           f"{where}: {exc}") from None
        self._sync()

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _view(self, offset: int, nbytes: int, reduce: bool):
        torch = self.torch
        if reduce:
            n = max(nbytes // 4, 1)
            return self.pool[offset: offset + 4 * n].view(torch.float32)
        return self.pool[offset: offset + max(nbytes, 1)]

    def issue(self, call: Call):
        dist, group, members = self.dist, self.groups[call.group], self.members[call.group]
        n, b, nb = len(members), call.bytes, call.overlapped
        root = members[0]
        c = call.collective
        if c == "allreduce":
            work = dist.all_reduce(self._view(self.largest, b, True), group=group, async_op=nb)
        elif c == "allgather":
            send = self._view(0, b, False)
            work = self._all_gather(self._view(self.largest, send.numel() * n, False), send,
                                               group=group, async_op=nb)
        elif c == "reduce_scatter":
            block = max(b // n // 4, 1)
            work = self._reduce_scatter(self._view(self.largest, 4 * block, True),
                                              self._view(0, 4 * block * n, True), group=group, async_op=nb)
        elif c == "reduce":
            work = dist.reduce(self._view(self.largest, b, True), dst=root, group=group, async_op=nb)
        elif c == "broadcast":
            work = dist.broadcast(self._view(0, b, False), src=root, group=group, async_op=nb)
        elif c == "alltoall":
            work = dist.all_to_all_single(self._view(self.largest, b * n, False), self._view(0, b * n, False),
                                          group=group, async_op=nb)
        elif c == "send":
            forward = call.phase != "backward"
            dest, source = ((self.pipeline_next, self.pipeline_prev) if forward
                            else (self.pipeline_prev, self.pipeline_next))
            ops = []
            if dest is not None:
                ops.append(dist.P2POp(dist.isend, self._view(0, b, False), dest, group))
            if source is not None:
                ops.append(dist.P2POp(dist.irecv, self._view(self.largest, b, False), source, group))
            for w in dist.batch_isend_irecv(ops) if ops else ():
                w.wait()
            self._sync()
            return None
        elif c == "recv":
            return None
        else:
            raise ValueError(f"cannot replay {c!r}")
        if nb:
            return work
        self._sync()
        return None

    def wait(self, handles: list) -> None:
        for work in handles:
            work.wait()
        self._sync()

    def barrier(self) -> None:
        self.dist.barrier()

    def _max(self, value: float, group) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=group)
        return float(t.item())

    def group_max(self, kind: str, value: float) -> float:
        return self._max(value, self.control[kind])

    def world_max(self, value: float) -> float:
        return self._max(value, None)

    def close(self) -> None:
        self.pool = None
        if self.cuda:
            self.torch.cuda.empty_cache()

"""The replay's MPI issuer: the layout's communicators split from the world, calls from one pooled host buffer.

One ``HostRegion`` holds every call's buffers: send data at offset 0 and receive data after it, sized by
the largest message (rounded up to 64 B, so that the receive side is aligned) times (1 + the largest
group): an allgather receives n blocks. Reductions run on float32 elements (bytes // 4 of them, at least
one); the other calls move the exact bytes. In-flight calls share the pool (their contents are not checked).
A pipeline ``send`` is a shift along the pipeline group: each stage sends to the next in forward and to the
previous in backward and receives from the other side (``MPI_Sendrecv``); its ``recv`` twin is that same
shift's receive and issues nothing.
"""

from __future__ import annotations

import numpy as np

from microbench.measure.buffers import HostRegion
from microbench.replay.layout import KINDS, Layout
from microbench.replay.schedule import Call, receive_offset

ELEMENT = np.dtype(np.float32)  #: what reductions reduce
BYTE = np.dtype(np.uint8)  #: what the other calls move


class MpiIssuer:
    """This rank's TP, PP and DP communicators (collective to build: every rank) and its buffer pool."""

    backend = "mpi"

    def __init__(self, MPI, world_comm, layout: Layout, rank: int, largest_bytes: int):
        self.MPI, self.world = MPI, world_comm
        self.comms = {}
        for kind in KINDS:
            groups = layout.groups(kind)
            self.comms[kind] = world_comm.Split(next(i for i, g in enumerate(groups) if rank in g), rank)
        pp = self.comms["pp"]
        stage, stages = pp.Get_rank(), pp.Get_size()
        self.pipeline_next = stage + 1 if stage + 1 < stages else MPI.PROC_NULL
        self.pipeline_prev = stage - 1 if stage > 0 else MPI.PROC_NULL
        widest = max(c.Get_size() for c in self.comms.values())
        self.largest = receive_offset(largest_bytes)
        self.pool = HostRegion(self.largest * (1 + widest))
        self.pool.bytes[:] = 1  # written in full by its owner before anything is timed

    def _views(self, send_bytes: int, recv_bytes: int, dtype: np.dtype = ELEMENT):
        n_send = max(send_bytes // dtype.itemsize, 1)
        n_recv = max(recv_bytes // dtype.itemsize, 1)
        return self.pool.view(0, n_send, dtype), self.pool.view(self.largest, n_recv, dtype)

    def issue(self, call: Call):
        comm = self.comms[call.group]
        n, b, nb = comm.Get_size(), call.bytes, call.overlapped
        if call.collective == "allreduce":
            s, r = self._views(b, b)
            return comm.Iallreduce(s, r) if nb else comm.Allreduce(s, r)
        if call.collective == "allgather":
            s, r = self._views(b, b * n, BYTE)
            return comm.Iallgather(s, r) if nb else comm.Allgather(s, r)
        if call.collective == "reduce_scatter":
            block = max(b // n // ELEMENT.itemsize, 1)
            s, r = self._views(block * n * ELEMENT.itemsize, block * ELEMENT.itemsize)
            return comm.Ireduce_scatter_block(s, r) if nb else comm.Reduce_scatter_block(s, r)
        if call.collective == "reduce":
            s, r = self._views(b, b)
            return comm.Ireduce(s, r, root=0) if nb else comm.Reduce(s, r, root=0)
        if call.collective == "broadcast":
            s, _ = self._views(b, b, BYTE)
            return comm.Ibcast(s, root=0) if nb else comm.Bcast(s, root=0)
        if call.collective == "alltoall":
            s, r = self._views(b * n, b * n, BYTE)
            return comm.Ialltoall(s, r) if nb else comm.Alltoall(s, r)
        if call.collective == "send":
            s, r = self._views(b, b, BYTE)
            forward = call.phase != "backward"
            dest, source = ((self.pipeline_next, self.pipeline_prev) if forward
                            else (self.pipeline_prev, self.pipeline_next))
            comm.Sendrecv(s, dest, 0, r, source, 0)
            return None
        if call.collective == "recv":
            return None
        raise ValueError(f"cannot replay {call.collective!r}")

    def wait(self, handles: list) -> None:
        self.MPI.Request.Waitall(handles)

    def barrier(self) -> None:
        self.world.Barrier()

    def group_max(self, kind: str, value: float) -> float:
        return self.comms[kind].allreduce(value, op=self.MPI.MAX)

    def world_max(self, value: float) -> float:
        return self.world.allreduce(value, op=self.MPI.MAX)

    def close(self) -> None:
        self.pool.close()
        for comm in self.comms.values():
            comm.Free()

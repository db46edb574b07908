"""Issue a schedule's calls on MPI communicators, back to back, from one pooled host buffer, and time them.

One ``HostRegion`` holds every call's buffers: send data at offset 0 and receive data after it, sized by
the largest message times the largest group (an allgather receives n blocks). Calls a framework overlaps
are posted non-blocking and waited when the phase ends; in-flight calls share the pool (their contents are
not checked). Pipeline ``send`` is a shift along the pipeline group (each stage sends to the next in
forward, to the previous in backward, and receives from the other side, ``MPI_Sendrecv``); its ``recv``
twin is that same shift's receive and issues nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from microbench.measure.buffers import HostRegion
from microbench.replay.layout import KINDS, Layout
from microbench.replay.schedule import Call, largest_bytes

ELEMENT = np.dtype(np.float32)  # reductions run on float32 elements: bytes // 4 of them


@dataclass
class Communicators:
    """This rank's communicator of each group kind and its pipeline neighbours."""

    comms: dict
    pipeline_next: int
    pipeline_prev: int


def split(MPI, world_comm, layout: Layout, rank: int) -> Communicators:
    """Split the world into the layout's TP, PP and DP communicators (collective on every rank)."""
    comms = {}
    for kind in KINDS:
        groups = layout.groups(kind)
        color = next(i for i, g in enumerate(groups) if rank in g)
        comms[kind] = world_comm.Split(color, rank)
    pp = comms["pp"]
    stage, stages = pp.Get_rank(), pp.Get_size()
    nxt = stage + 1 if stage + 1 < stages else MPI.PROC_NULL
    prev = stage - 1 if stage > 0 else MPI.PROC_NULL
    return Communicators(comms, nxt, prev)


@dataclass
class IterationTimes:
    """One iteration on this rank: wall seconds, and seconds spent in calls per collective and per group."""

    wall_s: float
    per_collective_s: dict = field(default_factory=dict)
    per_group_s: dict = field(default_factory=dict)


class Executor:
    """Runs one rank's schedule on its communicators from one buffer pool."""

    def __init__(self, MPI, comms: Communicators, schedule: list[Call]):
        self.MPI, self.c, self.schedule = MPI, comms, schedule
        widest = max(comm.Get_size() for comm in comms.comms.values())
        self.largest = max(largest_bytes(schedule), ELEMENT.itemsize)
        self.pool = HostRegion(self.largest * (1 + widest))
        self.pool.bytes[:] = 1  # written in full by its owner before anything is timed

    def _views(self, send_bytes: int, recv_bytes: int):
        n_send = max(send_bytes // ELEMENT.itemsize, 1)
        n_recv = max(recv_bytes // ELEMENT.itemsize, 1)
        return (self.pool.view(0, n_send, ELEMENT), self.pool.view(self.largest, n_recv, ELEMENT))

    def _issue(self, call: Call):
        """Issue one call; returns a request when it is posted non-blocking, else None."""
        MPI, comm = self.MPI, self.c.comms[call.group]
        n, b = comm.Get_size(), call.bytes
        if call.collective == "allreduce":
            s, r = self._views(b, b)
            return comm.Iallreduce(s, r) if call.overlapped else comm.Allreduce(s, r)
        if call.collective == "allgather":
            s, r = self._views(b, b * n)
            r = r[: s.size * n]
            return comm.Iallgather(s, r) if call.overlapped else comm.Allgather(s, r)
        if call.collective == "reduce_scatter":
            block = max(b // n // ELEMENT.itemsize, 1)
            s, r = self._views(block * n * ELEMENT.itemsize, block * ELEMENT.itemsize)
            return comm.Ireduce_scatter_block(s, r) if call.overlapped else comm.Reduce_scatter_block(s, r)
        if call.collective == "reduce":
            s, r = self._views(b, b)
            return comm.Ireduce(s, r, root=0) if call.overlapped else comm.Reduce(s, r, root=0)
        if call.collective == "broadcast":
            s, _ = self._views(b, b)
            return comm.Ibcast(s, root=0) if call.overlapped else comm.Bcast(s, root=0)
        if call.collective == "alltoall":
            s, r = self._views(b * n, b * n)
            return comm.Ialltoall(s, r) if call.overlapped else comm.Alltoall(s, r)
        if call.collective == "send":
            s, r = self._views(b, b)
            forward = call.phase != "backward"
            dest, source = ((self.c.pipeline_next, self.c.pipeline_prev) if forward
                            else (self.c.pipeline_prev, self.c.pipeline_next))
            comm.Sendrecv(s, dest, 0, r, source, 0)
            return None
        if call.collective == "recv":
            return None
        raise ValueError(f"cannot replay {call.collective!r}")

    def iteration(self) -> IterationTimes:
        """One iteration: the calls back to back (no barrier between them); overlapped ones waited at phase end."""
        pending: list = []
        times = IterationTimes(0.0)
        phase = None
        start = time.perf_counter()
        for call in self.schedule:
            if call.phase != phase and pending:
                self._wait(pending, times)
            phase = call.phase
            t0 = time.perf_counter()
            request = self._issue(call)
            spent = time.perf_counter() - t0
            if request is not None:
                pending.append((call, request))
            self._charge(times, call, spent)
        self._wait(pending, times)
        times.wall_s = time.perf_counter() - start
        return times

    def _wait(self, pending: list, times: IterationTimes) -> None:
        t0 = time.perf_counter()
        self.MPI.Request.Waitall([r for _, r in pending])
        spent = time.perf_counter() - t0
        for call, _ in pending:  # the wait is shared among the calls it completes
            self._charge(times, call, spent / len(pending))
        pending.clear()

    @staticmethod
    def _charge(times: IterationTimes, call: Call, seconds: float) -> None:
        times.per_collective_s[call.collective] = times.per_collective_s.get(call.collective, 0.0) + seconds
        times.per_group_s[call.group] = times.per_group_s.get(call.group, 0.0) + seconds

    def close(self) -> None:
        self.pool.close()
        for comm in self.c.comms.values():
            comm.Free()

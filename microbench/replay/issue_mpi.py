"""The replay on MPI: the layout's communicators split from the world, the measure layer's MPI primitives on each.

Every call goes through ``dispatch.Dispatcher``: the benchmark table's entry built on ``MPIBackend`` over its group's
communicator (MPI's blocking call, or its ``MPI_I*`` twin for an overlapped call), from one pool in host memory
(``pool.HostPool``). The control traffic (barriers, the slowest rank's figures) runs on the world and the groups.
"""

from __future__ import annotations

from microbench.measure.backends.mpi import MPIBackend
from microbench.replay.dispatch import Dispatcher
from microbench.replay.layout import Layout
from microbench.replay.pool import HostPool
from microbench.replay.schedule import Call


class MpiIssuer:
    """This rank's communicators of every kind its layout uses (TP, PP, DP; CP with context parallelism, the expert
    groups with expert parallelism; collective to build: every rank) and its calls on them."""

    backend = "mpi"

    def __init__(self, MPI, world_comm, layout: Layout, rank: int, schedule: list[Call]):
        self.MPI, self.world = MPI, world_comm
        self.comms = {kind: world_comm.Split(layout.groups(kind).index(layout.group_of(rank, kind)), rank)
                      for kind in layout.kinds}
        #: the dispatcher: ``issued(call)`` is the call prepared on its group's communicator
        self.issued = Dispatcher({kind: MPIBackend(comm, MPI) for kind, comm in self.comms.items()}, schedule,
                                 HostPool)

    def ran_on(self, kind: str) -> tuple[int, ...]:
        """The world ranks of this rank's communicator of ``kind``, in its rank order (asked of MPI)."""
        comm = self.comms[kind]
        return tuple(comm.Get_group().Translate_ranks(list(range(comm.Get_size())), self.world.Get_group()))

    def barrier(self) -> None:
        """A barrier over the whole job."""
        self.world.Barrier()

    def group_max(self, kind: str, value: float) -> float:
        """The largest ``value`` over this rank's group of ``kind`` (collective on that group)."""
        return self.comms[kind].allreduce(value, op=self.MPI.MAX)

    def world_max(self, value: float) -> float:
        """The largest ``value`` over the whole job (collective on every rank)."""
        return self.world.allreduce(value, op=self.MPI.MAX)

    def close(self) -> None:
        """Free the pool and the communicators."""
        self.issued.close()
        for comm in self.comms.values():
            comm.Free()

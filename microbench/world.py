"""The job the run belongs to: MPI (under mpiexec or srun) or torch.distributed (under torchrun), and the
control plane every rank uses for agreement and statistics."""

from __future__ import annotations

from dataclasses import dataclass

@dataclass
class World:
    """MPI initialised, with a control-plane communicator of its own (every rank creates it first)."""

    MPI: object
    reducer: object
    rank: int
    nranks: int


def init_world() -> World:
    """Initialise MPI and the control plane; collective, the first thing every rank does."""
    from microbench.backends.mpi import MPIReducer, import_mpi

    MPI = import_mpi()
    reducer = MPIReducer(MPI.COMM_WORLD.Dup(), MPI)
    return World(MPI, reducer, reducer.rank, reducer.size)

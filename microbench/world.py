"""The job the run belongs to, and the control plane every rank uses for agreement and statistics.

Under mpiexec or srun the job is MPI's: MPI is initialised and a duplicate of MPI_COMM_WORLD carries the
control traffic (agreement, statistics, record metadata), apart from whatever the benchmark measures.
Under torchrun there is no MPI: the default torch.distributed process group (gloo, from torchrun's
environment) carries the control traffic, and only ``--backend torch`` can be measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from microbench import launch
from microbench.errors import UsageError


@dataclass
class World:
    """The initialised job: MPI (or None under torchrun), the control-plane reducer, this rank's place."""

    MPI: object | None
    reducer: object
    rank: int
    nranks: int
    launcher: str | None

    def abort(self, code: int) -> None:
        """End every rank of the job now."""
        if self.MPI is not None:
            self.MPI.COMM_WORLD.Abort(code)
        else:
            self.reducer.abort(code)

    @property
    def bcast(self) -> Callable:
        return self.reducer.bcast

    def close(self) -> None:
        """Collective, at the end of a run: leave torch.distributed cleanly when it was joined."""
        leave_torch_distributed(barrier=True)


def leave_torch_distributed(barrier: bool) -> None:
    """Destroy torch.distributed's process group if this process joined one (after a barrier if asked).

    A process group left for interpreter exit to tear down can abort the process from a C++ thread
    ("terminate called without an active exception", SIGABRT) after every result is written, and torchrun
    then reports a crash."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()


def init_world(timeout_s: float = 600.0) -> World:
    """Initialise the job and the control plane; collective, the first thing every rank does."""
    info = launch.discover()
    if info.launcher == "torchrun":
        from microbench.backends.torch_dist import TorchReducer, import_torch

        _, dist = import_torch()
        if not dist.is_initialized():
            import datetime as dt

            dist.init_process_group("gloo", rank=info.rank, world_size=info.size,
                                    timeout=dt.timedelta(seconds=timeout_s))
        reducer = TorchReducer()
        return World(None, reducer, reducer.rank, reducer.size, info.launcher)
    from microbench.backends.mpi import MPIReducer, import_mpi

    MPI = import_mpi()
    reducer = MPIReducer(MPI.COMM_WORLD.Dup(), MPI)
    return World(MPI, reducer, reducer.rank, reducer.size, info.launcher)


def require_mpi(world: World, what: str) -> None:
    if world.MPI is None:
        raise UsageError(f"{what} needs an MPI launcher (mpiexec, srun); torchrun starts torch.distributed "
                         f"ranks: use --backend torch there")

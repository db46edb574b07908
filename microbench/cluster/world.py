"""The job the run belongs to, and the control plane every rank uses for agreement and statistics.

Under mpiexec or srun the job is MPI's: MPI is initialised and a duplicate of MPI_COMM_WORLD carries the
control traffic (agreement, statistics, record metadata), apart from whatever the benchmark measures.
Under torchrun there is no MPI: the default torch.distributed process group (gloo, from torchrun's
environment) carries the control traffic, and only ``--backend torch`` can be measured.
"""

from __future__ import annotations

import platform
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from microbench.cluster import launch
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
        from microbench.cluster.torch_runtime import TorchReducer, import_torch

        _, dist = import_torch()
        if not dist.is_initialized():
            import datetime as dt

            dist.init_process_group("gloo", rank=info.rank, world_size=info.size,
                                    timeout=dt.timedelta(seconds=timeout_s))
        reducer = TorchReducer()
        return World(None, reducer, reducer.rank, reducer.size, info.launcher)
    from microbench.cluster.mpi_runtime import MPIReducer, import_mpi

    MPI = import_mpi()
    reducer = MPIReducer(MPI.COMM_WORLD.Dup(), MPI)
    return World(MPI, reducer, reducer.rank, reducer.size, info.launcher)


def require_mpi(world: World, what: str) -> None:
    if world.MPI is None:
        raise UsageError(f"{what} needs an MPI launcher (mpiexec, srun); torchrun starts torch.distributed "
                         f"ranks: use --backend torch there")


@dataclass(frozen=True)
class Layout:
    """Where the ranks run: each rank's host, ranks per host, and library versions that differ."""

    hosts_by_rank: list[str]
    ranks_per_host: dict[str, int]
    version_mismatch: list[str]  #: "name=version" of every library whose version differs from rank 0's

    @property
    def local_ranks(self) -> int:
        """Ranks on this rank's host."""
        return self.ranks_per_host[platform.node()]

    def pairs_inter_node(self, nranks: int) -> int:
        """Point-to-point pairs (rank i with i + n/2) whose two ranks sit on different hosts."""
        half = nranks // 2
        return sum(1 for i in range(half) if self.hosts_by_rank[i] != self.hosts_by_rank[i + half])


def gather_layout(reducer, versions: dict[str, str], mpi_library: str) -> Layout:
    """Collective: every rank's host and library versions, gathered and shared with every rank."""
    gathered = reducer.gather((platform.node(), versions, mpi_library))
    layout = None
    if reducer.rank == 0:
        hosts = [g[0] for g in gathered]
        ref_versions, ref_mpi = gathered[0][1], gathered[0][2]
        mismatched = sorted({f"{k}={v}" for _, vers, _ in gathered for k, v in vers.items() if v != ref_versions.get(k)}
                            | {f"mpi={mpi}" for _, _, mpi in gathered if mpi != ref_mpi})
        layout = Layout(hosts, dict(Counter(hosts)), mismatched)
    return reducer.bcast(layout, root=0)

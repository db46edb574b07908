"""What every step of a run shares once setup is done: options, ranks, hosts, transport, records."""

from __future__ import annotations

from dataclasses import dataclass

from microbench.cluster.nodes import NodePlane
from microbench.cluster.world import Layout, World
from microbench.measure.testhooks import FaultHooks
from microbench.measure.transport import Transport
from microbench.options import RunOptions
from microbench.records import Output
from microbench.run.machine_state import MachineWatch
from microbench.run.terminal import Progress
from microbench.run.watchdog import Watchdog


@dataclass
class RunContext:
    """The fixed facts of a run and the places its results go (``out`` and ``progress``: rank 0 only)."""

    opts: RunOptions
    world: World
    layout: Layout
    transport: Transport
    hooks: FaultHooks
    watchdog: Watchdog
    run_id: str
    out: Output | None = None
    progress: Progress | None = None
    nodes: NodePlane | None = None  #: per-node summaries on the control plane (microbench.cluster.nodes)
    peaks: object | None = None  #: rank 0: the hosts' links and path peaks (microbench.run.peaks.RunPeaks)
    tuning: object | None = None  #: this rank's NCCL debug file with --nccl-algo (cluster.nccl_tuning.TuningLog)
    cycle: dict | None = None  #: the soak cycle being run ({"number", "started_utc"}), None outside soak runs
    machine: "MachineWatch | None" = None  #: the hosts' state at the start and end (issue 39)
    machine_end: list[dict] | None = None  #: rank 0: every host's state over the run, gathered as it ended normally

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def nranks(self) -> int:
        return self.world.nranks

    @property
    def reducer(self):
        return self.world.reducer

    def begin(self, where: str, label: str) -> None:
        """A step starts: the watchdog watches ``where``; rank 0's progress bar shows ``label``."""
        self.watchdog.arm(where)
        if self.progress is not None:
            self.progress.next(label)

    def note(self, text: str) -> None:
        """A note under the table (rank 0)."""
        if self.out is not None:
            self.out.note(text)

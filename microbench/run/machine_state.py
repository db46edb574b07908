"""The machine state a run records (``cluster/machine.py``): at the start (the run record: each host's state over
the run's setup) and at the end (the end record: each host's state over the whole run).

One process per host reads it, the host's lowest rank (its *leader*): its first snapshot is taken as the
rank starts (before MPI's setup), the start state when the run record is written, and the end state as the
run ends. A run that ends normally gathers every leader's end state; one ended by a signal, the watchdog or
an error records rank 0's host alone (the other ranks may not answer).
"""

from __future__ import annotations

import os
import platform

from microbench.cluster import launch, machine


class MachineWatch:
    """This rank's part: its snapshots if it leads its host, the run's own processes on its host."""

    def __init__(self):
        info = launch.discover()
        # before the layout is known: the launcher's local rank 0 (every rank when the launcher does not say)
        self.first = machine.snapshot() if info.local_rank in (0, None) else None
        self.start: machine.Snapshot | None = None
        self.own: set[int] = set()
        self.leader = False
        self.gpus: set[str] | None = None
        self.with_gpus = False

    def start_states(self, reducer, hosts_by_rank: list[str], device_kind: str | None,
                     gpu_uuids: list[str] | None = None) -> list[dict] | None:
        """Collective: every host's state over the setup; the list on rank 0 (None elsewhere)."""
        pids = reducer.bcast(reducer.gather(os.getpid()), root=0)
        host = platform.node()
        self.leader = hosts_by_rank.index(hosts_by_rank[reducer.rank]) == reducer.rank
        self.with_gpus = device_kind == "cuda"
        self.gpus = set(gpu_uuids) if gpu_uuids else None
        mine = None
        if self.leader:
            now = machine.snapshot()
            self.own = machine.own_processes({p for p, h in zip(pids, hosts_by_rank) if h == host}, now)
            if now is not None:
                mine = machine.state(self.first, now, self.own, host, self._gpu())
            self.start = now
        gathered = reducer.gather(mine)
        return [s for s in gathered if s] if reducer.rank == 0 else None

    def end_states(self, reducer) -> list[dict] | None:
        """Collective: every host's state over the run; the list on rank 0 (None elsewhere)."""
        gathered = reducer.gather(self.local_end() if self.leader else None)
        return [s for s in gathered if s] if reducer.rank == 0 else None

    def local_end(self) -> dict | None:
        """This host's state over the run (a leader's; None where /proc cannot be read)."""
        now = machine.snapshot()
        if now is None:
            return None
        return machine.state(self.start, now, self.own, platform.node(), self._gpu())

    def _gpu(self) -> list[dict] | None:
        return machine.gpu_processes(self.own, self.gpus) if self.with_gpus else None

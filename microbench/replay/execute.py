"""Run one rank's replay steps on any backend's issuer, back to back, and time them.

The loop is the same on every backend: calls are issued in order with no barrier between them; a call
the framework overlaps is posted non-blocking and waited when its compute segment ends; compute slices run
the calibrated kernel between calls. Per iteration it keeps wall seconds and the seconds spent inside each
call (for an overlapped call: its post plus its share of the wait that completes it; a shared wait is
split evenly among the calls it completes), summed per collective kind, per group kind and per call
(collective, group, bytes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from microbench.replay.schedule import Call, Compute, Step, segment_of


class Issuer(Protocol):
    """What a backend provides the replay: calls on the layout's groups from one buffer pool."""

    backend: str

    def issue(self, call: Call) -> Any | None:
        """Issue ``call``; a handle when ``call.overlapped`` (posted non-blocking), else None (completed)."""

    def wait(self, handles: list) -> None:
        """Complete every handle (non-blocking calls posted by ``issue``)."""

    def barrier(self) -> None:
        """A barrier over the whole job."""

    def group_max(self, kind: str, value: float) -> float:
        """The largest ``value`` over this rank's group of ``kind`` (collective on that group)."""

    def world_max(self, value: float) -> float:
        """The largest ``value`` over the whole job (collective on every rank)."""

    def close(self) -> None:
        """Free the groups and the pool."""


@dataclass
class IterationTimes:
    """One iteration on this rank (seconds): wall, and inside calls per collective, group and call."""

    wall_s: float
    per_collective_s: dict = field(default_factory=dict)
    per_group_s: dict = field(default_factory=dict)
    per_call_s: dict = field(default_factory=dict)  #: (collective, group, bytes) -> seconds, all such calls


class Executor:
    """Runs one rank's steps through an issuer; ``compute(seconds)`` runs a compute slice."""

    def __init__(self, issuer: Issuer, steps: list[Step], compute: Callable[[float], None] | None = None):
        self.issuer, self.steps, self.compute = issuer, steps, compute
        if compute is None and any(isinstance(s, Compute) for s in steps):
            raise ValueError("steps hold compute slices but no compute kernel was given")

    def iteration(self, *, compute_only: bool = False) -> IterationTimes:
        """One iteration; ``compute_only``: the same compute slices with every call left out."""
        issue, compute, clock = self.issuer.issue, self.compute, time.perf_counter
        pending: list = []
        times = IterationTimes(0.0)
        segment = None
        start = clock()
        for step in self.steps:
            if isinstance(step, Compute):
                compute(step.seconds)
                continue
            if compute_only:
                continue
            here = segment_of(step.phase)
            if here != segment and pending:
                self._wait(pending, times)
            segment = here
            t0 = clock()
            handle = issue(step)
            spent = clock() - t0
            if handle is not None:
                pending.append((step, handle))
            self._charge(times, step, spent)
        if pending:
            self._wait(pending, times)
        times.wall_s = clock() - start
        return times

    def _wait(self, pending: list, times: IterationTimes) -> None:
        t0 = time.perf_counter()
        self.issuer.wait([h for _, h in pending])
        share = (time.perf_counter() - t0) / len(pending)
        for call, _ in pending:
            self._charge(times, call, share)
        pending.clear()

    @staticmethod
    def _charge(times: IterationTimes, call: Call, seconds: float) -> None:
        times.per_collective_s[call.collective] = times.per_collective_s.get(call.collective, 0.0) + seconds
        times.per_group_s[call.group] = times.per_group_s.get(call.group, 0.0) + seconds
        key = (call.collective, call.group, call.bytes)
        times.per_call_s[key] = times.per_call_s.get(key, 0.0) + seconds

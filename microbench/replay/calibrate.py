"""The same launch's per-call latencies of every distinct call of the schedule, for the prediction.

For each distinct (collective, group kind, bytes) of the schedule, on the layout's own communicators,
blocking (the curve of the blocking benchmark, also for calls the replay posts non-blocking), one warm-up call
and then ``reps`` timed calls back to back in the measure layer's lean loop (``reps`` so that they last about
``target_s``, between 3 and 50, agreed within the group). The readings per call:

- isolated: one group of the kind at a time (the others wait at a barrier), the curve a sweep measures;
- concurrent: every group of the kind at once, as the replay runs them;
- non-blocking, for calls the schedule overlaps: posted non-blocking and waited at once, every group of the
  kind at once (a library may run another algorithm for the non-blocking call).

Each is the slowest rank of the group's mean seconds per call; a rank keeps its own group's values.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from microbench.measure.clock import seconds
from microbench.measure.loops import PythonLoop
from microbench.replay.layout import Layout
from microbench.replay.schedule import Call

CallKey = tuple  #: ``schedule.Call.key``: (collective, group kind, bytes, split pattern or "")
MIN_REPS, MAX_REPS = 3, 50


@dataclass(frozen=True)
class CallLatency:
    """Seconds per call on this rank's group: alone, and with every group of its kind at once."""

    isolated_s: float
    concurrent_s: float
    nonblocking_s: float | None = None  #: posted non-blocking and waited at once (calls the schedule overlaps)

    @property
    def contention(self) -> float:
        """concurrent / isolated (1.0: the groups do not slow each other)."""
        return self.concurrent_s / self.isolated_s if self.isolated_s > 0 else 1.0


def overlapped_keys(schedule: list[Call]) -> set[CallKey]:
    """The (collective, group, bytes) the schedule posts non-blocking somewhere."""
    return {c.key for c in schedule if c.overlapped}


def distinct_calls(schedule: list[Call]) -> list[Call]:
    """One blocking call per (collective, group, bytes) of the schedule (``recv`` twins left out): the curve
    a sweep of the blocking benchmark measures, whether or not the schedule overlaps the call."""
    seen: dict[CallKey, Call] = {}
    for c in schedule:
        if not c.is_twin:
            seen.setdefault(c.key, dataclasses.replace(c, overlapped=False))
    return list(seen.values())


def _timed(issuer, call: Call, target_s: float) -> float:
    """Mean seconds per call on this rank's group (slowest rank), after one warm-up call: the measure layer's
    lean loop (``PythonLoop``) over the call as the replay issues it (a posted call: post, then wait)."""
    complete, loop = issuer.issued(call).call, PythonLoop()
    warm = issuer.group_max(call.group, seconds(int(loop.run([complete], 1)[0])))
    reps = int(min(MAX_REPS, max(MIN_REPS, math.ceil(target_s / max(warm, 1e-7)))))
    return issuer.group_max(call.group, seconds(int(loop.run([complete], reps).sum())) / reps)


def measure(issuer, layout: Layout, rank: int, schedule: list[Call], target_s: float = 0.005) -> dict[CallKey, CallLatency]:
    """Isolated and concurrent seconds per call of each distinct call (collective on every rank)."""
    out: dict[CallKey, CallLatency] = {}
    posted = overlapped_keys(schedule)
    for call in distinct_calls(schedule):
        groups = layout.groups(call.group)
        mine = groups.index(layout.group_of(rank, call.group))
        isolated = 0.0
        for index in range(len(groups)):
            issuer.barrier()
            if index == mine:
                isolated = _timed(issuer, call, target_s)
        issuer.barrier()
        concurrent = _timed(issuer, call, target_s)
        key = call.key
        nonblocking = None
        if key in posted:
            issuer.barrier()
            nonblocking = _timed(issuer, dataclasses.replace(call, overlapped=True), target_s)
        out[key] = CallLatency(isolated, concurrent, nonblocking)
    issuer.barrier()
    return out

"""Run one rank's replay steps back to back, on any backend, and time each call on the measure layer's clock.

The loop is the same on every backend: calls are issued in order with no barrier between them; a call the
framework overlaps is posted non-blocking and waited when its compute segment ends; compute slices run the
calibrated kernel between calls. Per iteration it keeps wall seconds and the seconds spent inside each call (for
an overlapped call: its post plus its share of the wait that completes it; a shared wait is split evenly among the
calls it completes), summed per collective kind, per group kind and per call (collective, group, bytes).

Lean: the steps are prepared once (``dispatch``: pre-bound calls) and turned into a flat list of operations; an
iteration only calls them and reads the clock (``measure.clock``) around each, storing the duration in a list;
the durations are charged to calls, kinds and groups after the iteration's wall time is taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from microbench.measure.clock import now_ns, seconds
from microbench.replay.dispatch import Issued
from microbench.replay.schedule import Call, Compute, Step, segment_of

CallKey = tuple  #: ``schedule.Call.key``: (collective, group kind, bytes, split pattern or "")

_COMPUTE, _CALL, _POST, _WAIT = range(4)  #: the operations of an iteration


class Issuer(Protocol):
    """What a backend provides the replay: calls on the layout's groups, and the control traffic."""

    backend: str

    def issued(self, call: Call) -> Issued | None:
        """``call`` prepared on its group (None: a recv twin, which issues nothing)."""

    def barrier(self) -> None:
        """A barrier over the whole job."""

    def group_max(self, kind: str, value: float) -> float:
        """The largest ``value`` over this rank's group of ``kind`` (collective on that group)."""

    def world_max(self, value: float) -> float:
        """The largest ``value`` over the whole job (collective on every rank)."""

    def ran_on(self, kind: str) -> tuple[int, ...]:
        """The world ranks of this rank's communicator of ``kind`` (``replay --check``)."""

    def close(self) -> None:
        """Free the groups and the pool."""


@dataclass
class IterationTimes:
    """One iteration on this rank (seconds): wall, and inside calls per collective, group and call."""

    wall_s: float
    per_collective_s: dict = field(default_factory=dict)
    per_group_s: dict = field(default_factory=dict)
    per_call_s: dict = field(default_factory=dict)  #: (collective, group, bytes) -> seconds, all such calls


@dataclass
class IssuedCalls:
    """What one iteration issues per (collective, group, bytes): how many calls, through which table entries, on
    how many ranks, sending and receiving how much per rank (bytes), in place or not."""

    calls: int
    entries: set
    group_ranks: int
    send_bytes: int
    recv_bytes: int
    in_place: bool


class Executor:
    """Runs one rank's steps, prepared by ``issued``; ``compute(seconds)`` runs a compute slice."""

    def __init__(self, issued: Callable[[Call], Issued | None], steps: list[Step],
                 compute: Callable[[float], None] | None = None):
        if compute is None and any(isinstance(s, Compute) for s in steps):
            raise ValueError("steps hold compute slices but no compute kernel was given")
        self.compute, self._issued = compute, issued
        #: the calls issued, in order (recv twins issue nothing); call i's duration is slot i of the durations
        self.slots: list[Call] = [s for s in steps if not isinstance(s, Compute) and issued(s) is not None]
        self._handles: list = [None] * len(self.slots)
        self._share_of: dict[int, tuple[int, int]] = {}  #: posted call's slot -> (its wait's slot, calls it waits)
        self._ops = self._operations(issued, steps)
        self._spent = [0] * (len(self.slots) + sum(op[0] == _WAIT for op in self._ops))

    def _operations(self, issued, steps: list[Step]) -> list[tuple]:
        """The flat list an iteration runs: (_COMPUTE, seconds, None); (_CALL or _POST, slot, the call or its
        post); (_WAIT, slot, a function that completes the pending posted calls), a wait's slot after the calls'."""
        ops: list[tuple] = []
        pending: list[tuple[int, Callable]] = []
        slot, wait_slot, segment = 0, len(self.slots), None

        def wait() -> None:
            nonlocal wait_slot
            ops.append((_WAIT, wait_slot, _wait_for(tuple(pending), self._handles)))
            self._share_of.update({s: (wait_slot, len(pending)) for s, _ in pending})
            pending.clear()
            wait_slot += 1

        for step in steps:
            if isinstance(step, Compute):
                ops.append((_COMPUTE, step.seconds, None))
                continue
            here = segment_of(step.phase)
            if here != segment and pending:
                wait()
            segment = here
            prepared = issued(step)
            if prepared is None:
                continue
            if prepared.posted:
                ops.append((_POST, slot, prepared.call.post))
                pending.append((slot, prepared.call.wait))
            else:
                ops.append((_CALL, slot, prepared.call))
            slot += 1
        if pending:
            wait()
        return ops

    def iteration(self, *, compute_only: bool = False) -> IterationTimes:
        """One iteration; ``compute_only``: the same compute slices with every call left out."""
        clock, compute, spent, handles = now_ns, self.compute, self._spent, self._handles
        start = clock()
        for kind, arg, run in self._ops:
            if kind == _COMPUTE:
                compute(arg)
            elif not compute_only:
                t0 = clock()
                if kind == _POST:
                    handles[arg] = run()
                else:
                    run()
                spent[arg] = clock() - t0
        wall = clock() - start
        return IterationTimes(seconds(wall)) if compute_only else self._charged(wall)

    def _charged(self, wall_ns: int) -> IterationTimes:
        """The iteration's durations charged to its calls (a posted call: its post and its share of its wait)."""
        times = IterationTimes(seconds(wall_ns))
        spent, share_of = self._spent, self._share_of
        for slot, call in enumerate(self.slots):
            ns = spent[slot]
            if slot in share_of:
                wait_slot, sharing = share_of[slot]
                ns += spent[wait_slot] / sharing
            s = seconds(ns)
            for table, key in ((times.per_collective_s, call.collective), (times.per_group_s, call.group),
                               (times.per_call_s, call.key)):
                table[key] = table.get(key, 0.0) + s
        return times

    def issued_in_order(self) -> list[Call]:
        """The calls an iteration's operations issue, in the order they are posted or called (``replay --check``
        walks these)."""
        return [self.slots[arg] for kind, arg, _ in self._ops if kind in (_CALL, _POST)]

    def issued_calls(self) -> dict[CallKey, IssuedCalls]:
        """Per (collective, group, bytes): what an iteration issues (the calls its operations run)."""
        out: dict[CallKey, IssuedCalls] = {}
        for call in self.slots:
            key, prepared = call.key, self._issued(call)
            if key not in out:
                out[key] = IssuedCalls(0, set(), prepared.group_ranks, prepared.send_bytes, prepared.recv_bytes,
                                       prepared.in_place)
            out[key].calls += 1
            out[key].entries.add(prepared.entry)
        return out


def _wait_for(pending: tuple[tuple[int, Callable], ...], handles: list) -> Callable[[], None]:
    """A function that completes the handles of ``pending`` (slot, wait) in order."""
    def wait_all() -> None:
        for slot, wait in pending:
            wait(handles[slot])
    return wait_all

"""The measurement of one (benchmark, size) on one rank: first call, warmup, timed iterations, check.

Slots are used in rotation without ever restarting: the first call (slot 0), then warmup, then the
timed iterations each take the next slot. As OMB's loops, warmup and timed iterations run back to back
in one loop after one barrier (the warmup's durations are dropped): a barrier between them would put its
exit skew across ranks, and the call into the loop, into the first timed iteration (several times an 8-byte
latency). They run apart, with a barrier before the timed iterations, only where work must happen between
them: ``--check`` (each iteration filled and verified), ``--time-budget`` (the count is agreed from the
warmup) and loops that capture the timed iterations (CUDA graphs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from microbench.benchmarks.table import Collective, Context
from microbench.measure.loops import TimedLoop
from microbench.measure.testhooks import NO_HOOKS, SizeHooks

MAX_BUDGET_ITERATIONS = 10_000_000  #: most iterations --time-budget chooses for one size


@dataclass
class Measurement:
    """What one rank measured at one size."""

    samples_us: np.ndarray | None  #: per-iteration latency (None on ranks that do not time)
    first_call_us: float | None  #: the first call on never-used buffers (None when not measured here)
    iterations: int
    warmup: int
    check_errors: int | None  #: mismatched elements over all checked iterations (None: not checked)
    #: --time-budget: the slowest rank's per-iteration time (s) the iteration count was chosen from
    budget_estimate_s: float | None = None
    overlap: object | None = None  #: non-blocking benchmarks: the overlapped iterations (overlap.OverlapMeasurement)


@dataclass
class LoopSettings:
    """How to time: counts, sync, check, time budget, cache flushing."""

    iterations: int
    warmup: int
    check: bool = False
    sync_barrier: bool = False
    time_budget_s: float | None = None
    first_call: bool = True  #: time the first call on slot 0 before warmup
    flush_before: Callable[[], None] | None = None  #: run once before warmup (cold cache)
    flush_each: Callable[[int], None] | None = None  #: run before every timed iteration (--flush)
    #: use every slot once, untimed, after the first call and before the cold flush (CUDA-aware MPI registers a
    #: device buffer at its first use: no timed iteration of a cold pool may be a slot's first)
    touch_slots_first: bool = False


@dataclass
class _Phase:
    """The state measure() threads through its phases."""

    coll: Collective
    ctx: Context
    slots: Sequence
    prepared: object
    loop: TimedLoop
    settings: LoopSettings
    sync: Callable[[], None] | None
    push: Callable[[int], None]
    pull: Callable[[int], None]
    position: int = 0

    def run(self, iters: int) -> np.ndarray:
        """``iters`` iterations from the current slot on, with the size's barrier and flush."""
        out = self.loop.run(self.prepared, iters, start=self.position % len(self.slots), barrier=self.sync,
                            flush=self.settings.flush_each)
        self.position += iters
        return out


def _no_copy(k: int) -> None:
    return None


def measure(coll: Collective, ctx: Context, slots, calls: Sequence, loop: TimedLoop, settings: LoopSettings,
            barrier: Callable[[], None], agree_max: Callable[[float], float], timing: bool,
            push: Callable[[int], None] | None = None, pull: Callable[[int], None] | None = None,
            hooks: SizeHooks = NO_HOOKS) -> Measurement:
    """Measure one size on this rank. ``calls[i]`` runs one iteration on ``slots[i]``.

    ``agree_max`` returns the maximum of a value over all ranks (to agree on an iteration count under a
    time budget); ``timing`` says whether this rank's samples count. ``slots`` are host buffers (filled and
    verified here); with device buffers, ``push(k)`` copies slot k to the device and ``pull(k)`` back,
    outside the timing.
    """
    push, pull = push or _no_copy, pull or _no_copy
    for k, slot in enumerate(slots):
        coll.fill(slot, ctx, 0)
        push(k)
    # A flush before an iteration is followed by a barrier: otherwise a rank whose flush takes longer
    # makes its peers wait inside their timed call, and the "untimed" flush is timed after all.
    sync = barrier if (settings.sync_barrier or settings.flush_each is not None) else None
    phase = _Phase(coll, ctx, slots, loop.prepare(calls), loop, settings, sync, push, pull)
    per_iteration = coll.per_iteration(ctx.window)

    first_us = None
    if settings.first_call:
        barrier()
        first_us = float(loop.run(phase.prepared, 1, start=0)[0]) / 1e3 / per_iteration
        phase.position = 1
    if settings.touch_slots_first:
        barrier()
        loop.run(phase.prepared, len(slots), start=phase.position % len(slots))  # untimed; the rotation is unchanged
    if settings.flush_before is not None:
        settings.flush_before()

    barrier()
    if settings.time_budget_s is None and not settings.check and not loop.separate_warmup:
        hooks.before_timed_loop()
        durations = phase.run(settings.warmup + settings.iterations)[settings.warmup:]
        iterations, warmup, errors, estimate = settings.iterations, settings.warmup, None, None
    else:
        durations, iterations, warmup, errors, estimate = _measure_apart(phase, barrier, agree_max, hooks)

    samples = durations.astype(np.float64) / 1e3 / per_iteration if timing else None
    return Measurement(samples, first_us if timing else None, iterations, warmup, errors, estimate)


def _measure_apart(phase: _Phase, barrier, agree_max, hooks: SizeHooks):
    """Warmup, then (after a barrier) the timed iterations: (durations ns, iterations, warmup, errors, the
    time-budget estimate in s or None)."""
    settings = phase.settings
    warm = phase.run(settings.warmup)
    warmup, iterations, estimate = settings.warmup, settings.iterations, None
    if settings.time_budget_s is not None:
        extra = max(0, 3 - len(warm))  # the estimate needs a few iterations
        if extra:
            warm = np.concatenate([warm, phase.run(extra)])
            warmup += extra
        iterations, estimate = _budget_iterations(phase, warm, agree_max)
    each = settings.check or phase.sync is not None  # the timed iterations run one at a time
    phase.loop.begin_timed(phase.prepared, iterations, phase.position % len(phase.slots), each)
    if settings.flush_before is not None and phase.loop.runs_timed_slots_before:
        settings.flush_before()  # cold: begin_timed ran the timed iterations' own slots (a graph's untimed replay)
    barrier()
    hooks.before_timed_loop()
    if settings.check:
        durations, errors = _checked(phase, iterations, hooks.corrupt)
    else:
        durations, errors = phase.run(iterations), None
    return durations, iterations, warmup, errors, estimate


def budget_iterations(budget_s: float, per_iteration_s: float) -> int:
    """Iterations that fill ``budget_s`` at ``per_iteration_s`` each: at least 1, at most MAX_BUDGET_ITERATIONS."""
    return int(min(max(budget_s / max(per_iteration_s, 1e-9), 1), MAX_BUDGET_ITERATIONS))


def _budget_iterations(phase: _Phase, warm: np.ndarray, agree_max) -> tuple[int, float]:
    """(iterations that fill ``--time-budget``, the estimate they come from): the slowest rank's
    per-iteration time, its warmup's mean plus, under --check, a checked iteration's untimed work."""
    per_iteration_s = float(np.mean(warm)) / 1e9
    if phase.settings.check:  # a checked iteration also fills, copies and verifies its slot (untimed work)
        k = phase.position % len(phase.slots)
        t0 = time.perf_counter()
        phase.coll.fill(phase.slots[k], phase.ctx, 0)
        phase.push(k)
        phase.pull(k)
        phase.coll.verify(phase.slots[k], phase.ctx, 0)
        per_iteration_s += time.perf_counter() - t0
    estimate_s = agree_max(per_iteration_s)
    return budget_iterations(phase.settings.time_budget_s, estimate_s), estimate_s


def _checked(phase: _Phase, iterations: int, corrupt: bool) -> tuple[np.ndarray, int]:
    """Iterations each filled before and verified after its timed call: (durations ns, mismatches)."""
    coll, ctx, slots = phase.coll, phase.ctx, phase.slots
    errors = 0
    durations = np.empty(iterations, dtype=np.int64)
    for i in range(iterations):
        k = phase.position % len(slots)
        coll.fill(slots[k], ctx, i)
        phase.push(k)
        durations[i] = phase.run(1)[0]
        phase.pull(k)
        if corrupt:
            _result_array(slots[k]).reshape(-1).view(np.uint8)[-1] ^= 0xFF
        errors += coll.verify(slots[k], ctx, i)
    return durations, errors


def _result_array(b):
    return b.recv if b.recv is not None else b.send


def time_fresh_calls(count: int, make_fresh, loop: TimedLoop, barrier: Callable[[], None],
                     per_iteration: float) -> list[float]:
    """First-call latency (us) on ``count`` further fresh buffer sets.

    ``make_fresh()`` returns (calls, release): one call bound to buffers that were just allocated, written
    and never passed to the library, and a function that frees them.
    """
    out = []
    for _ in range(count):
        calls, release = make_fresh()
        try:
            prepared = loop.prepare(calls)
            barrier()
            out.append(float(loop.run(prepared, 1, start=0)[0]) / 1e3 / per_iteration)
        finally:
            release()
    return out

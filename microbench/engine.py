"""The measurement of one (benchmark, size): first call, warmup, timed iterations, check.

Timing: ``time.perf_counter_ns`` (CLOCK_MONOTONIC). In the default lean loop one clock read separates
consecutive iterations, so iteration i's time is t[i+1] - t[i] and nothing else runs between calls. With
``--sync barrier`` (OMB's pattern) or ``--check``, untimed work runs between iterations and each
iteration is timed by a read before and after the call. Warmup and timed iterations run back to back in
one loop after one barrier (as OMB's loops), unless --check, --time-budget or a CUDA graph needs work
between them.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from microbench.collectives import Collective, Context

_STAMP_PREFILL = 1 << 40  #: stand-in stamps of the same int size as perf_counter_ns values
LARGE_MESSAGE_BYTES = 8192  #: above this size the smaller "large" iteration counts apply (as OMB)

#: (iterations, warmup) for small and large messages, OMB's defaults per benchmark family.
DEFAULT_COUNTS = {
    "latency": ((10000, 100), (1000, 10)),
    "stream": ((100, 10), (20, 2)),
    "collective": ((1000, 100), (100, 10)),
}


def default_counts(coll: Collective, size_bytes: int) -> tuple[int, int]:
    """OMB's default (iterations, warmup) for this benchmark at this size."""
    family = "collective"
    if coll.point_to_point:
        family = "latency" if coll.name == "latency" else "stream"
    small, large = DEFAULT_COUNTS[family]
    return large if size_bytes > LARGE_MESSAGE_BYTES else small


def call_sequence(calls: Sequence, iters: int, start: int):
    """(the one call, None) when iterations ``start..start+iters-1`` all use the same call, else (None, an
    iterator over their calls) rotated here, before any clock read, so the timed loop skips nothing."""
    ncalls = len(calls)
    first = start % ncalls
    if ncalls == 1 or iters == 1:
        return calls[first], None
    return None, itertools.islice(itertools.cycle(calls[first:] + calls[:first]), iters)


class PythonLoop:
    """The timed loop in Python: calls pre-bound callables, one clock read per iteration.

    Interface shared with ``microbench.native.NativeLoop``: ``prepare(calls)`` once per size, then
    ``run(prepared, iters, start, barrier, flush)`` returning each iteration's duration in ns.
    """

    kind = "python"

    def prepare(self, calls: Sequence[Callable[[], None]]) -> list:
        return list(calls)

    def run(self, calls: list, iters: int, start: int = 0, barrier: Callable[[], None] | None = None,
            flush=None) -> np.ndarray:
        """Run ``iters`` iterations (iteration i uses ``calls[(start + i) % len(calls)]``); durations in ns.

        ``barrier`` (a callable) runs before each iteration and ``flush(i)`` writes the cache-flush
        buffer before each iteration, both outside the timed region.
        """
        if iters <= 0:
            return np.empty(0, dtype=np.int64)
        clock = time.perf_counter_ns
        ncalls = len(calls)
        if barrier is None and flush is None:
            # One int object per stamp, allocated here: each stamp the loop stores then frees one of these
            # and the next clock read reuses its memory, so the timed loop touches no fresh page (a list of
            # zeros would grow the allocator's arenas inside the loop: about 80 page faults per 10000).
            stamps = list(range(_STAMP_PREFILL, _STAMP_PREFILL + iters + 1))
            single, sequence = call_sequence(calls, iters, start)
            stamps[0] = clock()
            if single is not None:
                for i in range(1, iters + 1):
                    single()
                    stamps[i] = clock()
            else:
                for i, call in enumerate(sequence, 1):
                    call()
                    stamps[i] = clock()
            return np.diff(np.asarray(stamps, dtype=np.int64))
        out = np.empty(iters, dtype=np.int64)
        out.fill(0)  # touch every page before timing
        for i in range(iters):
            call = calls[(start + i) % ncalls]
            if flush is not None:
                flush(i)
            if barrier is not None:
                barrier()
            t0 = clock()
            call()
            out[i] = clock() - t0
        return out


@dataclass
class Measurement:
    """What one rank measured at one size."""

    samples_us: np.ndarray | None  #: per-iteration latency (None on ranks that do not time)
    first_call_us: float | None  #: the first call on never-used buffers (None when not measured here)
    iterations: int
    warmup: int
    check_errors: int | None  #: mismatched elements over all checked iterations (None: not checked)


@dataclass
class LoopSettings:
    """How to time: counts, sync, check, time budget, cache flushing."""

    iterations: int
    warmup: int
    check: bool = False
    sync_barrier: bool = False
    time_budget_s: float | None = None
    first_call: bool = True  #: time the first call on slot 0 before warmup
    flush_before: object | None = None  #: a CacheFlush run once before warmup (cold cache)
    flush_each: object | None = None  #: a CacheFlush run before every timed iteration (--flush)


def _corrupt_hook(coll_name: str, size_bytes: int, rank: int) -> bool:
    """Test-only: MICROBENCH_TEST_CORRUPT=rank:benchmark:size corrupts received data on that rank."""
    spec = os.environ.get("MICROBENCH_TEST_CORRUPT")
    if not spec:
        return False
    want_rank, want_coll, want_size = spec.split(":")
    return int(want_rank) == rank and want_coll == coll_name and int(want_size) == size_bytes


def _result_array(b):
    return b.recv if b.recv is not None else b.send


def measure(coll: Collective, ctx: Context, slots, calls: Sequence, loop, settings: LoopSettings,
            barrier: Callable[[], None], agree_max: Callable[[float], float], size_bytes: int,
            timing: bool, push: Callable[[int], None] | None = None,
            pull: Callable[[int], None] | None = None) -> Measurement:
    """Measure one size on this rank. ``calls[i]`` runs one iteration on ``slots[i]``.

    Slots are used in rotation without ever restarting: the first call (slot 0), then warmup, then the
    timed iterations each take the next slot. ``agree_max`` returns the maximum of a value over all
    ranks (to agree on an iteration count under a time budget); ``timing`` says whether this rank's
    samples count. ``slots`` are host buffers (filled and verified here); with device buffers,
    ``push(k)`` copies slot k to the device and ``pull(k)`` back, outside the timing.
    """
    push = push or (lambda k: None)
    pull = pull or (lambda k: None)
    for k, slot in enumerate(slots):
        coll.fill(slot, ctx, 0)
        push(k)
    per_iteration = coll.per_iteration(ctx.window)
    calls = loop.prepare(calls)
    nslots = len(slots)
    flush_each = settings.flush_each
    # A flush before an iteration is followed by a barrier: otherwise a rank whose flush takes longer
    # makes its peers wait inside their timed call, and the "untimed" flush is timed after all.
    sync = barrier if (settings.sync_barrier or flush_each is not None) else None

    first_us = None
    position = 0
    if settings.first_call:
        barrier()
        first_us = float(loop.run(calls, 1, start=0)[0]) / 1e3 / per_iteration
        position = 1
    if settings.flush_before is not None:
        settings.flush_before()

    warmup = settings.warmup
    iterations = settings.iterations
    begin_timed = getattr(loop, "begin_timed", None)  # CUDA graphs: capture only from here on
    errors = None
    barrier()
    if settings.time_budget_s is None and begin_timed is None and not settings.check:
        # As OMB and a C loop do: one barrier, then warmup and timed iterations back to back in one loop
        # (the warmup's durations are dropped). A barrier between them would put its exit skew across
        # ranks, and the call into the loop, into the first timed iteration (about 15 us at 8 B here).
        durations = loop.run(calls, warmup + iterations, start=position, barrier=sync, flush=flush_each)[warmup:]
    else:
        warm = loop.run(calls, warmup, start=position, barrier=sync, flush=flush_each)
        position += warmup
        if settings.time_budget_s is not None:
            extra = max(0, 3 - len(warm))
            if extra:
                warm = np.concatenate([warm, loop.run(calls, extra, start=position, barrier=sync, flush=flush_each)])
                warmup += extra
                position += extra
            per_iteration_s = float(np.mean(warm)) / 1e9
            if settings.check:  # a checked iteration also fills, copies and verifies its slot (untimed, but it takes time)
                k = position % nslots
                t0 = time.perf_counter()
                coll.fill(slots[k], ctx, 0)
                push(k)
                pull(k)
                coll.verify(slots[k], ctx, 0)
                per_iteration_s += time.perf_counter() - t0
            estimate_s = agree_max(per_iteration_s)
            iterations = int(min(max(settings.time_budget_s / max(estimate_s, 1e-9), 1), 10_000_000))

        if begin_timed is not None:
            begin_timed(calls)
        barrier()
        if settings.check:
            errors = 0
            durations = np.empty(iterations, dtype=np.int64)
            corrupt = _corrupt_hook(coll.name, size_bytes, ctx.rank)
            for i in range(iterations):
                k = (position + i) % nslots
                coll.fill(slots[k], ctx, i)
                push(k)
                durations[i] = loop.run(calls, 1, start=k, barrier=sync, flush=flush_each)[0]
                pull(k)
                if corrupt:
                    _result_array(slots[k]).reshape(-1).view(np.uint8)[-1] ^= 0xFF
                errors += coll.verify(slots[k], ctx, i)
        else:
            durations = loop.run(calls, iterations, start=position % nslots, barrier=sync, flush=flush_each)

    if len(durations) == 0:
        durations = np.zeros(0, dtype=np.int64)
    samples = durations.astype(np.float64) / 1e3 / per_iteration if timing else None
    return Measurement(samples, first_us if timing else None, iterations, warmup, errors)


def time_fresh_calls(count: int, make_fresh, loop, barrier: Callable[[], None], per_iteration: float) -> list[float]:
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

"""The engine's arithmetic and order on a stub loop of known durations, exactly: the unit of every sample and
first call (ns from the loop, us in the record), which slot each phase starts on, how many iterations a time
budget buys, and the first calls on fresh buffers. Mutation testing (docs/mutation-testing.md) found each of
these unguarded: a sample floored to whole microseconds, a rotation that always restarts at slot 0, a budget
off by its floor or cap all passed every test before.
"""

from __future__ import annotations

import numpy as np
from test_sample_meaning import StubLoop, _measure

from microbench.benchmarks.table import ALLREDUCE, Context
from microbench.measure import engine
from microbench.measure.buffers import BufferPool

CTX = Context(rank=0, nranks=2, window=1)


def test_samples_and_the_first_call_are_the_loop_s_nanoseconds_in_microseconds():
    m = _measure(ALLREDUCE, [1500, 2500, 3700, 4100], warmup=1, iterations=2)
    assert m.first_call_us == 1.5 and m.samples_us.tolist() == [3.7, 4.1]
    assert (m.iterations, m.warmup, m.check_errors) == (2, 1, None)


class StartsLoop(StubLoop):
    """A stub loop that also records the slot each run starts on."""

    def __init__(self, durations_ns, separate_warmup=False):
        super().__init__(durations_ns, separate_warmup)
        self.starts, self.barriers = [], []

    def run(self, prepared, iters, start=0, barrier=None, flush=None):
        self.starts.append((start, iters))
        self.barriers.append(barrier is not None)
        return super().run(prepared, iters, start, barrier, flush)


def _measure_on(loop, warmup, iterations, nslots=2, contents=None, **settings):
    """engine.measure of ALLREDUCE (4 B) on NSLOTS slots with LOOP; CONTENTS (a list): each slot's send buffer
    after the measurement is appended to it."""
    pool = BufferPool(4, 4, np.dtype(np.uint8), nslots=nslots)
    try:
        m = engine.measure(ALLREDUCE, CTX, pool.slots, [None] * nslots, loop,
                           engine.LoopSettings(iterations=iterations, warmup=warmup, **settings),
                           barrier=lambda: None, agree_max=lambda v: v, timing=True)
        if contents is not None:
            contents += [np.asarray(slot.send).tolist() for slot in pool.slots]
        return m
    finally:
        pool.close()


def test_each_phase_starts_on_the_slot_after_the_last_one_used():
    """The first call uses slot 0; warmup and timed iterations go on round the slots from there."""
    fast = StartsLoop([10] * 8)
    _measure_on(fast, warmup=2, iterations=3, nslots=3)
    assert fast.starts == [(0, 1), (1, 5)]  # first call; warmup + timed in one run from slot 1
    apart = StartsLoop([10] * 8, separate_warmup=True)
    _measure_on(apart, warmup=2, iterations=3, nslots=3)
    assert apart.starts == [(0, 1), (1, 2), (0, 3)]  # warmup from slot 1, timed from slot (1 + 2) % 3


def test_a_time_budget_buys_what_the_warmup_s_mean_says():
    """Fewer than 3 warmup iterations are topped up to 3 for the estimate; the budget divided by their mean."""
    loop = StartsLoop([5000] + [1_000_000] * 3 + [7] * 10)  # first call; 3 warmups of 1 ms; 10 timed
    m = _measure_on(loop, warmup=1, iterations=99, time_budget_s=0.01)
    assert (m.warmup, m.iterations, m.budget_estimate_s) == (3, 10, 1e-3)
    assert m.samples_us.tolist() == [0.007] * 10
    assert loop.starts == [(0, 1), (1, 1), (0, 2), (0, 10)]


def test_without_a_first_call_the_rotation_starts_on_slot_0():
    loop = StartsLoop([10] * 5)
    _measure_on(loop, warmup=2, iterations=3, nslots=3, first_call=False)
    assert loop.starts == [(0, 5)]  # warmup + timed in one run from the first slot


def test_a_time_budget_under_check_adds_a_checked_iteration_s_untimed_work():
    """Under --check the estimate is the warmup's mean plus one checked iteration's fill, copy and verify (timed
    with perf_counter: a few microseconds for a 4-byte slot, so the bound below is a guard, not a threshold)."""
    loop = StartsLoop([5000] + [1_000_000] * 3 + [7] * 10)
    m = _measure_on(loop, warmup=1, iterations=99, time_budget_s=0.01, check=True)
    assert 1e-3 < m.budget_estimate_s < 1e-3 + 1.0, m.budget_estimate_s
    assert m.iterations == engine.budget_iterations(0.01, m.budget_estimate_s) and m.warmup == 3


def test_a_time_budget_tops_up_no_warmup_of_3_or_more():
    loop = StartsLoop([5000] + [1_000_000] * 5 + [7] * 10)
    m = _measure_on(loop, warmup=5, iterations=99, time_budget_s=0.01)
    assert (m.warmup, m.iterations) == (5, 10) and loop.starts == [(0, 1), (1, 5), (0, 10)]


def test_checked_iterations_run_one_call_each_on_the_next_slot():
    loop = StartsLoop([5000, 10, 20, 30, 40])
    m = _measure_on(loop, warmup=1, iterations=3, check=True)
    assert loop.starts == [(0, 1), (1, 1), (0, 1), (1, 1), (0, 1)]  # first call, warmup, 3 checked iterations
    assert m.samples_us.tolist() == [0.02, 0.03, 0.04] and isinstance(m.check_errors, int)


def test_a_flush_before_each_iteration_comes_with_a_barrier():
    """A rank whose flush takes longer would make its peers wait inside their timed call."""
    flushed = StartsLoop([10] * 4)
    _measure_on(flushed, warmup=1, iterations=2, flush_each=lambda k: None)
    plain = StartsLoop([10] * 4)
    _measure_on(plain, warmup=1, iterations=2)
    assert flushed.barriers[1:] == [True] and plain.barriers[1:] == [False]


def test_every_slot_holds_the_first_iteration_s_data_before_the_first_call():
    contents = []
    _measure_on(StartsLoop([10] * 4), warmup=1, iterations=2, nslots=3, contents=contents)
    reference = BufferPool(4, 4, np.dtype(np.uint8), nslots=1)
    try:
        ALLREDUCE.fill(reference.slots[0], CTX, 0)
        assert contents == [np.asarray(reference.slots[0].send).tolist()] * 3
    finally:
        reference.close()


def test_budget_iterations_fill_the_budget_at_least_once_and_at_most_the_cap():
    assert engine.budget_iterations(1.0, 0.001) == 1000
    assert engine.budget_iterations(1e-6, 1.0) == 1
    assert engine.budget_iterations(1e9, 1e-9) == engine.MAX_BUDGET_ITERATIONS == 10_000_000
    assert engine.budget_iterations(1.0, 0.0) == engine.MAX_BUDGET_ITERATIONS  # a 0 s estimate: the cap


def test_first_calls_on_fresh_buffers_each_in_microseconds_per_iteration():
    released = []

    def fresh():
        return [None], lambda: released.append(1)

    loop = StartsLoop([3000, 5500, 7000])
    out = engine.time_fresh_calls(3, fresh, loop, lambda: None, per_iteration=2)
    assert out == [1.5, 2.75, 3.5] and len(released) == 3 and loop.starts == [(0, 1)] * 3

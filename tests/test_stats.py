"""The mergeable histogram summary against exact numpy statistics."""

import math

import numpy as np
import pytest

from microbench.measure import stats


def summarize_ranks(per_rank):
    """Evaluate stats.summarize with one thread per simulated rank and an exact in-memory reduction."""
    import threading

    n = len(per_rank)
    barrier = threading.Barrier(n)
    slots: dict = {}
    results = [None] * n

    class R:
        def __init__(self, rank):
            self.rank, self.size, self.calls = rank, n, 0

        def _exchange(self, values, op):
            key = self.calls
            self.calls += 1
            slots.setdefault(key, [None] * n)[self.rank] = values
            barrier.wait()
            stacked = np.stack(slots[key])
            out = {"sum": stacked.sum(axis=0), "min": stacked.min(axis=0), "max": stacked.max(axis=0)}[op]
            barrier.wait()
            return out

        def allreduce(self, values, op):
            return self._exchange(values, op)

        def reduce_to_root(self, values, op):
            out = self._exchange(values, op)
            return out if self.rank == 0 else None

    def work(rank):
        results[rank] = stats.summarize(per_rank[rank], R(rank))

    threads = [threading.Thread(target=work, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_percentiles_within_stated_error_and_means_exact():
    rng = np.random.default_rng(1)
    per_rank = [rng.lognormal(mean=1.0 + 0.1 * r, sigma=0.4, size=1000 + 17 * r) for r in range(4)]
    res = summarize_ranks(per_rank)
    s = res[0]
    assert all(r is None for r in res[1:])
    means = [x.mean() for x in per_rank]
    assert s["avg"] == pytest.approx(np.mean(means), rel=1e-12)
    assert s["min"] == pytest.approx(min(means), rel=1e-12)
    assert s["max"] == pytest.approx(max(means), rel=1e-12)
    pooled = np.concatenate(per_rank)
    assert s["samples"] == pooled.size and s["timing_ranks"] == 4
    assert s["fastest"] == pooled.min() and s["slowest"] == pooled.max()
    for q in stats.PERCENTILES:
        exact = np.percentile(pooled, q, method="inverted_cdf")
        assert abs(s[f"p{q}"] / exact - 1) <= stats.PERCENTILE_REL_ERROR + 1e-12, q


def test_ranks_without_samples_do_not_count():
    res = summarize_ranks([np.array([2.0, 4.0]), None, np.array([6.0]), None])
    s = res[0]
    assert s["timing_ranks"] == 2 and s["samples"] == 3
    assert s["avg"] == pytest.approx((3.0 + 6.0) / 2)
    assert s["min"] == 3.0 and s["max"] == 6.0


def test_identical_samples_give_that_value():
    s = summarize_ranks([np.full(50, 1.234), np.full(50, 1.234)])[0]
    assert s["p50"] == pytest.approx(1.234) and s["p99"] == pytest.approx(1.234)


def test_error_bound_is_what_docs_say():
    assert stats.PERCENTILE_REL_ERROR == pytest.approx(math.sqrt(1.01) - 1)
    assert stats.PERCENTILE_REL_ERROR < 0.005


def test_bandwidth_units():
    assert stats.bandwidth_gbps(1e9, 1e6) == pytest.approx(1.0)  # 1 GB in 1 s
    assert stats.bandwidth_gbps(8, 1.0) == pytest.approx(0.008)


# ------------------------------------------------------------------------------------------------------------
# The edges mutation testing found unguarded (docs/mutation-testing.md): each test below kills named mutants.

def test_bandwidth_is_bytes_over_seconds_exactly_and_zero_for_a_zero_latency():
    """The expression itself, to the last bit (results.metrics recomputes it): no floor division, GB = 1e9 B."""
    assert stats.bandwidth_gbps(3, 2.0) == 3 / (2.0 * 1e-6) / 1e9
    assert stats.bandwidth_gbps(1e9, 1e6) == 1.0
    assert stats.bandwidth_gbps(1e9 + 7, 3e6) == (1e9 + 7) / 3.0 / 1e9
    assert stats.bandwidth_gbps(64, 0.0) == 0.0  # a latency of 0 (a coarse timer) gives 0, not a division by 0


def test_a_rank_with_an_empty_sample_array_does_not_time():
    s = summarize_ranks([np.array([]), np.array([2.0, 4.0])])[0]
    assert s["timing_ranks"] == 1 and s["samples"] == 2 and s["avg"] == 3.0


def test_no_timing_rank_gives_rank_0_an_empty_summary_and_the_others_none():
    assert summarize_ranks([None, None, None]) == [{}, None, None]


def test_the_lowest_and_sub_microsecond_bins_hold_their_samples():
    """Samples in the first bin are counted there (not one bin up), and samples below 1 us keep their bins
    (the log floor is 1 ps): each percentile within the stated error of the exact nearest rank."""
    for samples in (np.array([1.0] * 9 + [10.0]), np.array([0.2] * 9 + [0.5]), np.array([0.0, 0.3, 0.3, 0.9])):
        s = summarize_ranks([samples])[0]
        for q in stats.PERCENTILES:
            exact = np.percentile(samples, q, method="inverted_cdf")
            if exact == 0:  # a 0 us sample (a coarse timer) sits in the floor's bin, 1 ps
                assert 0 <= s[f"p{q}"] <= 1e-6 * (1 + stats.BIN_GROWTH), (samples, q)
            else:
                assert abs(s[f"p{q}"] / exact - 1) <= stats.PERCENTILE_REL_ERROR, (samples, q)


class _Gatherer:
    """A control plane of N ranks for first_call_summary: rank R's gather returns every rank's values."""

    def __init__(self, rank, everyone):
        self.rank, self.everyone = rank, everyone

    def gather(self, values):
        return list(self.everyone)


def first_calls(everyone):
    assert all(stats.first_call_summary(v, _Gatherer(r, everyone)) is None for r, v in enumerate(everyone) if r)
    return stats.first_call_summary(everyone[0], _Gatherer(0, everyone))


def test_first_call_figures_are_over_each_rank_s_first_call():
    out = first_calls([[5.0, 1.0], None, [2.0, 9.0], [3.5, 4.0]])
    assert out["max"] == 5.0 and out["min"] == 2.0 and out["avg"] == (5.0 + 2.0 + 3.5) / 3
    assert out["per_rank"] == {"0": 5.0, "2": 2.0, "3": 3.5} and out["samples"] == 2
    assert out["max_across_ranks"] == {"values": [5.0, 9.0], "min": 5.0, "p50": 7.0, "max": 9.0}
    one = first_calls([[1.5], [2.5]])
    assert one == {"max": 2.5, "min": 1.5, "avg": 2.0, "per_rank": {"0": 1.5, "1": 2.5}, "samples": 1}
    assert first_calls([None, None]) is None


def test_first_call_lists_ranks_up_to_256():
    assert len(first_calls([[1.0]] * 256)["per_rank"]) == 256
    assert "per_rank" not in first_calls([[1.0]] * 257)

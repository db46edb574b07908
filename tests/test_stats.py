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

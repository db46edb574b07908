"""A distribution-free confidence interval for the ratio new / baseline, with runs as the samples.

Model: the new runs' values are the baseline runs' values scaled by an unknown ratio r (a shift of
log values). The interval is the Hodges-Lehmann/Moses one: sort the m x n pairwise log ratios
log(new_i / base_j); the interval runs from the k-th smallest to the k-th largest, with k taken from
the exact null distribution of the Mann-Whitney count U (normal approximation when m x n > 10000).
It holds at least the requested confidence for any distribution of run values, and it excludes 1
exactly when a two-sided Mann-Whitney test rejects "no change" at 1 - confidence.

Why not a bootstrap: with the handful of runs a nightly job has, a percentile bootstrap interval is
far narrower than its nominal level (with 2 runs a side drawn from one distribution, the two sides
separate completely one time in three, and the bootstrap then calls the difference significant).

The price of exactness: too few runs cannot give the confidence at all. At 95 % a side needs
at least 4 and 4 runs, or 3 and 5, 2 and 8, 1 and 39 (``min_runs``); then ``interval`` returns None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Sequence

import numpy as np

EXACT_LIMIT = 10_000  #: largest m x n for the exact distribution of U


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float  #: the coverage actually achieved (>= the requested one; discrete)

    def excludes_one(self) -> bool:
        return self.low > 1 or self.high < 1


@lru_cache(maxsize=512)
def _u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..mn under no difference (exact; U = pairs where new > baseline)."""
    # f(i, j)[u]: orderings of i baseline and j new values with U = u. The largest value is either a
    # baseline one (U unchanged) or a new one (it beats all i baseline values: U + i).
    prev = [np.ones(1) for _ in range(n + 1)]
    for i in range(1, m + 1):
        cur = [np.ones(1)]
        for j in range(1, n + 1):
            out = np.zeros(i * j + 1)
            a, b = prev[j], cur[j - 1]
            out[:len(a)] += a
            out[i:i + len(b)] += b
            cur.append(out)
        prev = cur
    counts = prev[n]
    return np.cumsum(counts) / math.comb(m + n, n)


def critical_rank(m: int, n: int, confidence: float) -> tuple[int, float]:
    """(k, achieved confidence): the largest k with P(U <= k - 1) <= (1 - confidence) / 2; k = 0: none."""
    alpha_half = (1 - confidence) / 2
    if m * n <= EXACT_LIMIT:
        cdf = _u_cdf(m, n)
        k = int(np.searchsorted(cdf, alpha_half * (1 + 1e-12), side="right"))
        achieved = 1 - 2 * float(cdf[k - 1]) if k > 0 else 0.0
        return k, achieved
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    k = max(0, math.floor(mean - NormalDist().inv_cdf(1 - alpha_half) * sd + 0.5))
    return k, confidence


def min_runs(confidence: float, other_side: int | None = None) -> int:
    """Fewest runs one side needs for an interval at ``confidence``: given the other side's count, or,
    with ``other_side`` None, the fewest runs per side when both sides have as many."""
    for runs in range(1, 10_000):
        if critical_rank(runs, runs if other_side is None else other_side, confidence)[0] > 0:
            return runs
    raise ValueError(f"no run count reaches confidence {confidence}")  # pragma: no cover


def interval(baseline: Sequence[float], new: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """Interval for the ratio new / baseline from per-run values (all > 0); None when too few runs."""
    base = np.log(np.asarray(baseline, dtype=float))
    fresh = np.log(np.asarray(new, dtype=float))
    k, achieved = critical_rank(len(base), len(fresh), confidence)
    if k == 0:
        return None
    diffs = np.sort((fresh[:, None] - base[None, :]).ravel())
    return Interval(float(np.exp(diffs[k - 1])), float(np.exp(diffs[len(diffs) - k])), achieved)

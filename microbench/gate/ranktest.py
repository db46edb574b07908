"""The Mann-Whitney rank test of two samples: its exact null distribution and its two-sided p-value.

``history``'s step detection (``steps``) scores every split of a series by the count U of the later runs
against the earlier ones (pairs where the later run is larger, ties half). Under no change every ordering
of the ranks is equally likely; ``u_cdf`` counts them exactly (for up to ``EXACT_LIMIT`` pairs), and above
that ``mann_whitney_p`` uses the normal approximation with the tie correction.

Ties: real run values tie often (a p50 is read from a histogram whose bins are 0.5 % wide, so runs a few ns
apart share a value; on the real-launch corpus every series of 24 runs had ties). With ties the normal
approximation is far too weak at a small level (complete separation of 16 runs from 8 gives p 1e-4 where the
exact value is 3e-6), so ``tied_p`` counts the orderings exactly as well, conditional on the ties (the
permutation distribution of the later runs' midrank sum, by dynamic programming over the tied groups), and
``smallest_tied_p`` says what the most extreme ordering can reach.

The smallest two-sided p-value m and n runs can give is 2 / C(m + n, m) (``smallest_p``: the two samples
separated completely): 0.1 for 3 and 3 runs, 0.029 for 4 and 4, 0.0079 for 5 and 5. No data can do better,
which is what makes a short series untestable by ranks at a small level.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

EXACT_LIMIT = 10_000  #: largest m x n for the exact distribution of U


@lru_cache(maxsize=512)
def u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..mn under no difference (exact; U = pairs where a run of the n is larger)."""
    # f(i, j)[u]: orderings of i first and j second values with U = u. The largest value is either a
    # first one (U unchanged) or a second one (it beats all i first values: U + i).
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


def mann_whitney_p(u: float, m: int, n: int, ties: float = 0.0) -> float:
    """Two-sided p-value of U (pairs where the second sample is larger, ties half) for samples of m and n;
    ``ties`` is the sum of t^3 - t over the groups of tied values."""
    if m * n <= EXACT_LIMIT and ties == 0:
        cdf = u_cdf(m, n)
        low = math.floor(min(u, m * n - u) + 1e-9)
        return min(1.0, 2.0 * float(cdf[low]))
    mean = m * n / 2
    var = m * n / 12 * ((m + n + 1) - ties / ((m + n) * (m + n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(var)
    return min(1.0, 2.0 * (1.0 - NormalDist().cdf(max(z, 0.0))))


MAX_TIED_CELLS = 4_000_000  #: largest (later + 1) x (sum range) table ``tied_p`` builds; above it: normal


def tied_p(ranks: np.ndarray, later: int, rank_sum: float) -> float | None:
    """Two-sided p of the later ``later`` values' midrank sum ``rank_sum`` among all of ``ranks`` (midranks, ties
    sharing their mean rank), exact over every choice of which values are the later ones (conditional on the
    ties); None where the table would be too large (``MAX_TIED_CELLS``)."""
    doubled = np.rint(2 * np.asarray(ranks, dtype=float)).astype(np.int64)
    total = len(doubled)
    top = int(np.sort(doubled)[total - later:].sum())
    if (later + 1) * (top + 1) > MAX_TIED_CELLS:
        return None
    table = np.zeros((later + 1, top + 1))
    table[0, 0] = 1.0
    values, sizes = np.unique(doubled, return_counts=True)
    for value, size in zip(values.tolist(), sizes.tolist()):
        grown = table.copy()  # none of this group among the later values
        for k in range(1, min(size, later) + 1):
            shift = k * value
            if shift > top:
                break
            grown[k:, shift:] += math.comb(size, k) * table[:later + 1 - k, :top + 1 - shift]
        table = grown
    dist = table[later] / math.comb(total, later)
    observed = int(round(2 * rank_sum))
    lower, upper = float(dist[:observed + 1].sum()), float(dist[observed:].sum())
    return min(1.0, 2.0 * min(lower, upper))


def smallest_tied_p(ranks: np.ndarray, later: int) -> float:
    """The smallest two-sided p any ordering of these values (midranks, ties included) gives ``later`` later
    values: the later ones all above (or all below) the rest, each tie group at the boundary split as it must."""
    ordered = np.sort(np.asarray(ranks, dtype=float))
    total = len(ordered)
    orderings = math.comb(total, later)
    if orderings >= 1e300:
        return 0.0  # beyond a float: as good as 0
    top, bottom = ordered[total - later:], ordered[:later]  # the later ones above the rest, or below
    best = 1.0
    for chosen, boundary in ((top, top[0]), (bottom, bottom[-1])):
        ways = math.comb(int(np.sum(ordered == boundary)), int(np.sum(chosen == boundary)))
        best = min(best, 2.0 * ways / orderings)
    return min(1.0, best)


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p-value any m and n distinct values can give (complete separation)."""
    orderings = math.comb(m + n, m)
    return min(1.0, 2.0 / orderings) if orderings < 1e300 else 0.0  # beyond a float: as good as 0

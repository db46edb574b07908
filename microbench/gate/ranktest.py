"""The Mann-Whitney rank test of two samples: its exact null distribution and its two-sided p-value.

``history``'s step detection (``steps``) scores every split of a series by the count U of the later runs
against the earlier ones (pairs where the later run is larger, ties half). Under no change every ordering
of the ranks is equally likely; ``u_cdf`` counts them exactly (for up to ``EXACT_LIMIT`` pairs), and above
that, or with ties, ``mann_whitney_p`` uses the normal approximation with the tie correction.

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


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p-value any m and n distinct values can give (complete separation)."""
    orderings = math.comb(m + n, m)
    return min(1.0, 2.0 / orderings) if orderings < 1e300 else 0.0  # beyond a float: as good as 0

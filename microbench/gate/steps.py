"""Change points in a series of runs: where a level shifts and stays, found with few noisy points.

Each run is one point (its value of a configuration, in start-time order). Binary segmentation: in a
segment, every split leaving at least ``min_segment`` runs on each side is tested, the later runs against
the earlier ones; the most significant split is placed among its neighbours (3 each side) where the two
medians fit the points best (least absolute deviation); the first such split whose medians differ by at
least ``min_step`` (relative) is kept when its p-value, multiplied by the number of split points of the
whole series and by the number of series judged in the same call (``series``), is at most ``alpha``; then
both halves are searched again.

Why that multiplier: under no step, a series' first segment is all of it, and its split points are the
series' split points, so Bonferroni over them and over the series bounds the chance of a false step
anywhere in the call by ``alpha`` (``family``). Once a real step is found, the segments searched next are
disjoint and their split points are among the series', so the same multiplier still covers every split
tested where there is no step: the bound holds with real steps present too.

Which test judges a split: the Mann-Whitney rank test (``ranktest``: one wild run moves nothing much; the
p-value exact up to 10,000 pairs, normal with a tie correction above) wherever it can reach the level at
all, that is wherever complete separation of the split's two sides (``ranktest.smallest_p``) would pass;
elsewhere Student's t on the log values (pooled variance: under no step both sides have the same
spread), which can reach any level once the noise is small enough. The choice depends on the two sides'
run counts and the level only, never on the values. Ranks alone cannot judge 4 runs against 4 even for
one series (2/70 x 3 split points = 0.086 > 0.05): eight nightlies whose last four are 3x slower would
read "no step"; with the t test they are found nine times in ten up to a log standard deviation of the
noise of about 0.2 (one series judged) or 0.1 (301 series) (docs/regressions.md).

What a step reports: the run where it starts (the first run after the split), the medians before and
after (each up to the neighbouring step), their ratio, the adjusted p-value and the test that judged it.
A series needs 2 x ``min_segment`` runs (6 by default) for any split (``runs_needed``); with values that
are not all positive (no logs) only ranks judge, and the runs needed grow with the series judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from microbench.gate import tdist
from microbench.gate.family import bonferroni
from microbench.gate.ranktest import EXACT_LIMIT, mann_whitney_p, smallest_p, smallest_tied_p, tied_p

_TRIES = 25  #: splits examined per segment, most significant first, for one that passes the minimum step
RANK, T_LOG = "rank", "t on logs"  #: the tests that judge a split


@dataclass(frozen=True)
class Step:
    index: int  #: position of the first run at the new level
    before: float  #: median of the runs since the previous step (or the start)
    after: float  #: median of the runs up to the next step (or the end)
    p: float  #: the split's p-value x the series' split points x the series judged (capped at 1)
    test: str = RANK  #: RANK or T_LOG

    @property
    def ratio(self) -> float:
        return self.after / self.before


def split_points(runs: int, min_segment: int = 3) -> int:
    """Splits of a series of ``runs`` that leave ``min_segment`` runs on each side."""
    return max(0, runs - 2 * min_segment + 1)


def can_reach(runs: int, alpha: float, series: int = 1, min_segment: int = 3, logs: bool = True) -> bool:
    """Whether some split of a series of ``runs`` can be significant at all (one of ``series``)."""
    splits = split_points(runs, min_segment)
    if splits == 0:
        return False
    if logs:
        return True  # the t test reaches any level when the noise is small enough
    limit = alpha / (splits * series)
    return any(smallest_p(k, runs - k) <= limit for k in range(min_segment, runs - min_segment + 1))


def runs_needed(alpha: float, series: int = 1, min_segment: int = 3, logs: bool = True) -> int:
    """Fewest runs a series needs for a step to be found at all (values all positive: ``logs``)."""
    runs = 2 * min_segment
    while not can_reach(runs, alpha, series, min_segment, logs):
        runs += 1
    return runs


def findable_ratio(values: Sequence[float], alpha: float = 0.05, series: int = 1, min_segment: int = 3,
                   min_step: float = 0.05) -> float | None:
    """What a series could see: the smallest step (a ratio above 1) at its middle that would be found with 90 %
    probability, by the t test on log values at this series' level (alpha / (split points x series)), with the
    spread of its (winsorized) log values and the medians at least ``min_step`` apart; None for a series with
    values that are not all positive, or too short for a split. A model figure, as ``compare_power``'s: the rank
    test judges most middle splits of long series and is about as sensitive on log-normal noise."""
    from microbench.gate import compare_power
    from microbench.gate.ratiotest import robust_logs

    data = np.asarray(values, dtype=float)
    splits = split_points(len(data), min_segment)
    if splits == 0 or not np.all(data > 0):
        return None
    logs = robust_logs(data)
    a = len(data) // 2
    b = len(data) - a
    se = float(logs.std(ddof=1)) * math.sqrt(1 / a + 1 / b)
    d = compare_power.detectable_log(se, len(data) - 2, splits * max(series, 1), alpha, math.log1p(min_step))
    try:
        return math.exp(d)
    except OverflowError:
        return math.inf


def detect(values: Sequence[float], min_step: float = 0.05, alpha: float = 0.05, min_segment: int = 3,
           series: int = 1) -> list[Step]:
    """The steps of a series, in order; ``min_step`` is relative (0.05 = medians 5 % apart); ``alpha``
    bounds the chance of a false step in this series and the ``series`` - 1 others judged with it."""
    data = np.asarray(values, dtype=float)
    tests = split_points(len(data), min_segment) * series
    cuts: list[tuple[int, float, str]] = []
    if tests:
        _search(data, 0, len(data), min_step, alpha, min_segment, tests, cuts)
    cuts.sort()
    bounds = [0, *[c for c, _, _ in cuts], len(data)]
    return [Step(c, _median(data[bounds[i]:c]), _median(data[c:bounds[i + 2]]), p, test)
            for i, (c, p, test) in enumerate(cuts)]


def _search(data: np.ndarray, lo: int, hi: int, min_step: float, alpha: float, min_segment: int, tests: int,
            cuts: list[tuple[int, float, str]]) -> None:
    found = best_split(data[lo:hi], min_step, alpha, min_segment, tests)
    if found is None:
        return
    split, p, test = found
    cuts.append((lo + split, p, test))
    _search(data, lo, lo + split, min_step, alpha, min_segment, tests, cuts)
    _search(data, lo + split, hi, min_step, alpha, min_segment, tests, cuts)


def best_split(seg: np.ndarray, min_step: float, alpha: float, min_segment: int,
               tests: int = 0) -> tuple[int, float, str] | None:
    """(split, adjusted p, test) of the most significant split of ``seg`` that passes the minimum step;
    ``tests``: the multiplier of every p-value (0: the splits of ``seg``, as for a series judged alone)."""
    n = len(seg)
    candidates = np.arange(min_segment, n - min_segment + 1)
    if len(candidates) == 0:
        return None
    tests = tests or len(candidates)
    limit = alpha / tests  # the level of one split
    order = np.argsort(seg, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(1, n + 1)
    _, inverse, counts = np.unique(seg, return_inverse=True, return_counts=True)
    ranks = _midranks(seg, ranks, inverse, counts)
    ties = float(np.sum(counts ** 3 - counts))
    later = n - candidates
    rank_sum_later = ranks.sum() - np.cumsum(ranks)[candidates - 1]
    u = rank_sum_later - later * (later + 1) / 2  # pairs (earlier, later) with the later run larger
    mean, sd = candidates * later / 2, np.sqrt(candidates * later * (n + 1) / 12)
    score = np.abs(u - mean) / sd
    use_t = np.zeros(len(candidates), dtype=bool)
    tied = ties > 0
    # the splits nearest the ends have the fewest orderings: when even they can reach the level, all can
    # (this keeps the exact binomials of long series, thousands of digits each, out of the search); with ties
    # (histogram bins make them common in real runs) the most extreme ordering is counted with them
    reach = (lambda k: smallest_tied_p(ranks, n - k)) if tied else (lambda k: smallest_p(k, n - k))
    if np.all(seg > 0) and reach(min_segment) > limit:
        use_t = np.array([reach(int(k)) > limit for k in candidates])
    if use_t.any():
        approx = np.array([math.erfc(z / math.sqrt(2)) for z in score])  # normal p, for the order only
        logs = np.log(seg)
        for i in np.flatnonzero(use_t):
            approx[i] = _t_log_p(logs, int(candidates[i]))
        ranked = np.lexsort((-score, approx))
    else:  # the normal p falls as the score rises: the same order
        ranked = np.argsort(-score, kind="stable")
    halves = _Halves(seg)
    for i in ranked[:_TRIES]:
        i = _place(halves, candidates, int(i))
        split = int(candidates[i])
        before, after, _ = halves(split)
        if before <= 0 or abs(after / before - 1) < min_step:
            continue
        if use_t[i]:
            p, test = _t_log_p(np.log(seg), split), T_LOG
        else:
            exact = tied_p(ranks, n - split, float(u[i]) + (n - split) * (n - split + 1) / 2) \
                if tied and split * (n - split) <= EXACT_LIMIT else None
            p, test = (exact if exact is not None else mann_whitney_p(float(u[i]), split, n - split, ties)), RANK
        p = bonferroni(p, tests)
        return (split, p, test) if p <= alpha else None
    return None


def _t_log_p(logs: np.ndarray, split: int) -> float:
    """Two-sided p of Student's t (pooled variance) for the log values after ``split`` against those before."""
    left, right = logs[:split], logs[split:]
    df = len(logs) - 2
    pooled = (float(np.sum((left - left.mean()) ** 2)) + float(np.sum((right - right.mean()) ** 2))) / df
    diff = float(right.mean() - left.mean())
    scale = math.sqrt(pooled * (1 / len(left) + 1 / len(right)))
    if scale <= 1e-12 * max(1.0, float(np.abs(logs).max())):
        return 0.0 if abs(diff) > 1e-12 else 1.0  # two flat levels: certain, or no difference at all
    return tdist.two_sided_p(diff / scale, df)


class _Halves:
    """(median before, median after, least absolute deviation about them) of a segment split at a run, each
    split computed once: the tries of one segment place their splits among overlapping neighbours."""

    def __init__(self, seg: np.ndarray):
        self.seg, self.known = seg, {}

    def __call__(self, split: int) -> tuple[float, float, float]:
        got = self.known.get(split)
        if got is None:
            left, right = self.seg[:split], self.seg[split:]
            before, after = _median(left), _median(right)
            cost = float(np.abs(left - before).sum() + np.abs(right - after).sum())
            got = self.known[split] = (before, after, cost)
        return got


def _median(values: np.ndarray) -> float:
    """``np.median`` of a non-empty 1-d array (the mean of the middle two of an even count), without its
    overhead (a series of 3,650 runs is split thousands of times) and without overflowing near 1e308."""
    n = len(values)
    k = n // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    part = np.partition(values, (k - 1, k))
    a, b = float(part[k - 1]), float(part[k])
    mid = (a + b) / 2
    return mid if mid != math.inf or a == math.inf or b == math.inf else a / 2 + b / 2


def _place(halves: _Halves, candidates: np.ndarray, best: int, reach: int = 3) -> int:
    """The candidate within ``reach`` of ``best`` whose two medians fit the segment best (least absolute
    deviation): ranks find a step, magnitudes place it (a high last point before a step rises with it)."""
    lo, hi = max(0, best - reach), min(len(candidates), best + reach + 1)
    return min(range(lo, hi), key=lambda i: (halves(int(candidates[i]))[2], abs(i - best)))


def _midranks(seg: np.ndarray, ranks: np.ndarray, inverse: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Ranks with ties given the mean of the ranks they share."""
    if counts.max(initial=1) == 1:
        return ranks
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]

"""Change points in a series of runs: where a level shifts and stays, found with few noisy points.

Each run is one point (its value of a configuration, in start-time order). Binary segmentation with a
rank test: in a segment, every split leaving at least ``min_segment`` runs on each side is scored by the
Mann-Whitney count U of the later part against the earlier one (ranks, so one wild run moves nothing
much); the best-scoring split is placed among its neighbours (3 each side) where the two medians fit
the points best (least absolute deviation); the first such split whose medians differ by at least
``min_step`` (relative) is kept when its p-value,
multiplied by the number of splits tried in the segment (Bonferroni over the split points), is at most
``alpha``; then both halves are searched again. The p-value is exact (``ranktest`` gives Mann-Whitney's
null distribution) up to 10,000 pairs, normal with a tie correction above.

What a step reports: the run where it starts (the first run after the split), the medians before and
after (each up to the neighbouring step), their ratio, and the p-value. Works from 2 x ``min_segment``
points (6 by default): 3 and 3 runs separated completely give p = 0.1 before the split correction, so a
step on that few runs is found only if it is the only candidate; with 5 and 5, p = 0.008.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from microbench.gate.ranktest import mann_whitney_p

_TRIES = 25  #: splits examined per segment, best scores first, for one that passes the minimum step


@dataclass(frozen=True)
class Step:
    index: int  #: position of the first run at the new level
    before: float  #: median of the runs since the previous step (or the start)
    after: float  #: median of the runs up to the next step (or the end)
    p: float  #: the split's p-value times the splits tried in its segment (capped at 1)

    @property
    def ratio(self) -> float:
        return self.after / self.before


def detect(values: Sequence[float], min_step: float = 0.05, alpha: float = 0.05, min_segment: int = 3) -> list[Step]:
    """The steps of a series, in order; ``min_step`` is relative (0.05 = medians 5 % apart)."""
    data = np.asarray(values, dtype=float)
    cuts: list[tuple[int, float]] = []
    _search(data, 0, len(data), min_step, alpha, min_segment, cuts)
    cuts.sort()
    bounds = [0, *[c for c, _ in cuts], len(data)]
    return [Step(c, float(np.median(data[bounds[i]:c])), float(np.median(data[c:bounds[i + 2]])), p)
            for i, (c, p) in enumerate(cuts)]


def _search(data: np.ndarray, lo: int, hi: int, min_step: float, alpha: float, min_segment: int,
            cuts: list[tuple[int, float]]) -> None:
    found = best_split(data[lo:hi], min_step, alpha, min_segment)
    if found is None:
        return
    split, p = found
    cuts.append((lo + split, p))
    _search(data, lo, lo + split, min_step, alpha, min_segment, cuts)
    _search(data, lo + split, hi, min_step, alpha, min_segment, cuts)


def best_split(seg: np.ndarray, min_step: float, alpha: float, min_segment: int) -> tuple[int, float] | None:
    """(split, corrected p) of the most significant split of ``seg`` that passes the minimum step."""
    n = len(seg)
    candidates = np.arange(min_segment, n - min_segment + 1)
    if len(candidates) == 0:
        return None
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
    for i in np.argsort(-score, kind="stable")[:_TRIES]:
        i = _place(seg, candidates, int(i))
        split = int(candidates[i])
        before, after = np.median(seg[:split]), np.median(seg[split:])
        if before <= 0 or abs(after / before - 1) < min_step:
            continue
        p = min(1.0, mann_whitney_p(float(u[i]), split, n - split, ties) * len(candidates))
        return (split, p) if p <= alpha else None
    return None


def _place(seg: np.ndarray, candidates: np.ndarray, best: int, reach: int = 3) -> int:
    """The candidate within ``reach`` of ``best`` whose two medians fit the segment best (least absolute
    deviation): ranks find a step, magnitudes place it (a high last point before a step rises with it)."""
    lo, hi = max(0, best - reach), min(len(candidates), best + reach + 1)

    def cost(i: int) -> float:
        split = int(candidates[i])
        left, right = seg[:split], seg[split:]
        return float(np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum())
    return min(range(lo, hi), key=lambda i: (cost(i), abs(i - best)))


def _midranks(seg: np.ndarray, ranks: np.ndarray, inverse: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Ranks with ties given the mean of the ranks they share."""
    if counts.max(initial=1) == 1:
        return ranks
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]

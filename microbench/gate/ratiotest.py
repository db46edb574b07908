"""Is new / baseline different from 1? A test on log run values that allows for back-to-back runs' correlation.

Model: a run's log value is the configuration's level plus noise; runs taken one after another share the
machine's spells (launches move together for seconds at a time), so within a batch the noise has a
lag-1 correlation rho (measured: ``run_correlation``). The mean of n such runs then varies f_n times
more than n independent runs would, f_n = 1 + 2 sum_{k<n} (1 - k/n) rho^k (the AR(1) factor), so the
test is Welch's t on the log values with each side's variance term multiplied by its f and its run
count divided by it (the effective sample size). rho = 0 is the ordinary Welch test.

With days of history (``block_test``): the baseline is k blocks (days), each one value (its median), and
the new batch is judged against the spread between those days, as a prediction: t = (mean new -
mean of day values) / sqrt(s_days^2 / k + max(s_days^2, f s_new^2 / n)), k - 1 degrees of freedom. A
new batch is one more day: it carries a day's spread even when its own runs agree closely.

Runs taken in alternating pairs (baseline, new, baseline, new ... in start-time order): ``paired_test``,
a t-test on the log ratio within each pair, where a spell that moves both runs of a pair cancels.

One run against several (``prediction_test``: one side has a single run, the other 3 or more): the single run
is judged as one more draw of the other side's runs, t = (log single - mean log others) / (s_others sqrt(1 + f /
n)), n - 1 degrees of freedom: tonight's run against the last n nights.

Where the two batches hold enough runs for it to reach the level at all (``permutation_reaches``), the run test's
p-value is also computed by permutation (``permutation_p``: every split of the pooled runs into two batches of
these sizes, or 20,000 random ones past 50,000 splits), and the larger of the two is kept. The permutation test is
exact whatever the runs' distribution, where the t test assumes log-normal runs: real launches are bimodal at some
sizes and cluster by machine state, and on the real-launch corpus the t test alone failed 7 of 100 same-code
comparisons at 8 runs a side (5 % promised). The t test with its AR(1) factor keeps covering back-to-back runs,
which permutation takes as exchangeable.

Log values are winsorized (``robust_logs``) before any test, from 8 values on: one starved launch must not
decide a variance.

A batch-long spell on both sides looks exactly like a change; no test on those runs alone can tell
them apart. Interleaving baseline and new runs, or judging against days of history, can.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

import numpy as np

from microbench.gate import tdist

MAX_RHO = 0.9


@dataclass(frozen=True)
class RatioTest:
    log_diff: float  #: mean log new - mean log baseline (or the day values' mean)
    se: float  #: its standard error, inflated for correlation
    df: float  #: degrees of freedom of the t statistic
    p: float  #: two-sided p-value of "no change"
    method: str  #: "runs" or "days"

    def with_p(self, p: float) -> "RatioTest":
        """The same test with another p-value (the permutation's, where larger)."""
        return replace(self, p=p)

    def interval(self, confidence: float) -> tuple[float, float]:
        """(low, high) of the ratio of geometric means at ``confidence`` (two-sided)."""
        if self.se == 0:
            return _exp(self.log_diff), _exp(self.log_diff)
        half = tdist.quantile(0.5 + confidence / 2, self.df) * self.se
        return _exp(self.log_diff - half), _exp(self.log_diff + half)


def _exp(x: float) -> float:
    """e ** x, inf past the largest float (an interval on values near 1e308 has no finite end)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def ar1_factor(n: int, rho: float) -> float:
    """How much more the mean of n AR(1)-correlated values varies than the mean of n independent ones."""
    return 1.0 + 2.0 * sum((1 - k / n) * rho ** k for k in range(1, n))


def run_correlation(series: Sequence[Sequence[float]]) -> float:
    """Pooled lag-1 correlation of log values within batches, each series in time order (one per side
    and configuration), corrected for the -1/n bias of residuals about a batch's own mean; clipped to
    [0, 0.9]. Series shorter than 3 runs say nothing and are skipped."""
    num = den = bias = 0.0
    weight = 0
    for values in series:
        if len(values) < 3:
            continue
        res = np.log(np.asarray(values, dtype=float))
        res -= res.mean()
        num += float(np.dot(res[:-1], res[1:]))
        den += float(np.dot(res, res)) * (len(res) - 1) / len(res)
        bias += (len(res) - 1) / len(res)
        weight += len(res) - 1
    if den <= 0 or weight == 0:
        return 0.0
    return min(MAX_RHO, max(0.0, num / den + bias / weight))


#: fewest values that are winsorized: the MAD of fewer is too unstable to clip by (clipping 4-run sides
#: raised same-code false alarms from 1 in 13 comparisons to 3 in 13 in bench_gate_errors)
WINSORIZE_FROM = 8


def robust_logs(values: Sequence[float]) -> np.ndarray:
    """Log values with the wild ones pulled in to median +- 3 x 1.4826 x MAD (winsorized) from 8 values on:
    a starved launch (a p50 of 1,434 us among runs of 0.6 us, seen on a loaded machine) must not decide a
    variance."""
    logs = np.log(np.asarray(values, dtype=float))
    if len(logs) < WINSORIZE_FROM:
        return logs
    mid = np.median(logs)
    spread = 3 * 1.4826 * np.median(np.abs(logs - mid))
    return np.clip(logs, mid - spread, mid + spread) if spread > 0 else logs


def alternate(base_order: Sequence[float], new_order: Sequence[float]) -> bool:
    """Whether baseline and new runs alternate in time (A B A B ... or B A B A ...), as many of each."""
    if len(base_order) != len(new_order) or len(base_order) < 2 or \
            len(set(base_order) | set(new_order)) < 2 * len(base_order):  # two runs cannot start together
        return False
    sides = [side for _, side in sorted([(t, 0) for t in base_order] + [(t, 1) for t in new_order])]
    return all(a != b for a, b in zip(sides, sides[1:]))


def paired_test(baseline: Sequence[float], new: Sequence[float]) -> RatioTest | None:
    """Runs taken in alternating pairs: t on the (winsorized) log ratios of each new run to its partner,
    k - 1 degrees of freedom. A spell that moves both runs of a pair cancels in their ratio."""
    d = robust_logs(np.asarray(new, dtype=float) / np.asarray(baseline, dtype=float))
    k = len(d)
    if k < 2:
        return None
    diff, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(k)
    if se == 0:
        return RatioTest(diff, 0.0, float(k - 1), 0.0 if diff else 1.0, "pairs")
    return RatioTest(diff, se, float(k - 1), tdist.two_sided_p(diff / se, k - 1), "pairs")


def run_test(baseline: Sequence[float], new: Sequence[float], rho: float = 0.0) -> RatioTest | None:
    """Welch's t on (winsorized) log values with correlation-inflated variances; None when a side has < 2 runs."""
    b, n = robust_logs(baseline), robust_logs(new)
    if len(b) < 2 or len(n) < 2:
        return None
    fb, fn = ar1_factor(len(b), rho), ar1_factor(len(n), rho)
    vb, vn = fb * b.var(ddof=1) / len(b), fn * n.var(ddof=1) / len(n)
    eb, en = len(b) / fb, len(n) / fn  # effective run counts
    diff = float(n.mean() - b.mean())
    se = math.sqrt(vb + vn)
    if se == 0:
        return RatioTest(diff, 0.0, float(len(b) + len(n) - 2), 0.0 if diff else 1.0, "runs")
    df = (vb + vn) ** 2 / ((vb ** 2 / max(eb - 1, 1e-9)) + (vn ** 2 / max(en - 1, 1e-9)))
    df = max(1.0, min(df, eb + en - 2))
    return RatioTest(diff, se, df, tdist.two_sided_p(diff / se, df), "runs")


MAX_EXACT_SPLITS = 50_000  #: more splits than this: ``PERMUTATIONS`` random ones
PERMUTATIONS = 20_000


def permutation_reaches(n_base: int, n_new: int, level: float) -> bool:
    """Whether a permutation test of batches this size can give a two-sided p at or below ``level``."""
    splits = math.comb(n_base + n_new, n_base)
    return min(2.0 / splits if splits < MAX_EXACT_SPLITS else 1.0 / (PERMUTATIONS + 1), 1.0) <= level


@lru_cache(maxsize=64)
def _splits(total: int, first: int) -> np.ndarray:
    """Every choice of ``first`` of ``total`` positions, one row each (int8 indices)."""
    return np.array(list(itertools.combinations(range(total), first)), dtype=np.int16)


@lru_cache(maxsize=16)
def _random_splits(total: int, first: int) -> np.ndarray:
    """``PERMUTATIONS`` random choices of ``first`` of ``total`` positions (a fixed seed: the same every call)."""
    rng = np.random.default_rng(20260)
    return np.argsort(rng.random((PERMUTATIONS, total)), axis=1)[:, :first].astype(np.int16)


def permutation_p(baseline: Sequence[float], new: Sequence[float]) -> float:
    """Two-sided p of the difference of mean (winsorized) log values over every split of the pooled runs into
    batches of these sizes (exact up to ``MAX_EXACT_SPLITS`` splits, else ``PERMUTATIONS`` random ones from a
    fixed seed: p = (1 + as extreme) / (1 + permutations))."""
    b, n = robust_logs(baseline), robust_logs(new)
    pooled = np.concatenate([b, n])
    total, first = len(pooled), len(b)
    observed = abs(float(n.mean() - b.mean()))
    whole = float(pooled.sum())
    if math.comb(total, first) <= MAX_EXACT_SPLITS:
        sums = pooled[_splits(total, first)].sum(axis=1)
        count, draws = None, None
    else:
        sums = pooled[_random_splits(total, first)].sum(axis=1)
        count, draws = 1, PERMUTATIONS
    diffs = np.abs((whole - sums) / (total - first) - sums / first)
    extreme = int(np.count_nonzero(diffs >= observed * (1 - 1e-12)))
    if count is None:
        return min(1.0, extreme / len(sums))
    return min(1.0, (count + extreme) / (draws + 1))


def prediction_test(baseline: Sequence[float], new: Sequence[float], rho: float = 0.0) -> RatioTest | None:
    """One run on one side against 3 or more on the other, judged against the many runs' spread (a prediction
    test: the single run is taken as one more draw of the others' distribution); None otherwise."""
    b, n = robust_logs(baseline), robust_logs(new)
    if len(n) == 1 and len(b) >= 3:
        many, one, sign = b, float(n[0]), 1.0
    elif len(b) == 1 and len(n) >= 3:
        many, one, sign = n, float(b[0]), -1.0
    else:
        return None
    k = len(many)
    diff = sign * (one - float(many.mean()))
    se = math.sqrt(float(many.var(ddof=1)) * (1 + ar1_factor(k, rho) / k))
    if se == 0:
        return RatioTest(diff, 0.0, float(k - 1), 0.0 if diff else 1.0, "prediction")
    return RatioTest(diff, se, float(k - 1), tdist.two_sided_p(diff / se, k - 1), "prediction")


def block_test(day_values: Sequence[float], new: Sequence[float], rho: float = 0.0) -> RatioTest | None:
    """The new runs against k days of history (one value per day); None with fewer than 3 days."""
    days = robust_logs(day_values)
    fresh = robust_logs(new)
    k = len(days)
    if k < 3 or len(fresh) < 1:
        return None
    s2_days = float(days.var(ddof=1))
    s2_new = ar1_factor(len(fresh), rho) * float(fresh.var(ddof=1)) / len(fresh) if len(fresh) > 1 else 0.0
    diff = float(fresh.mean() - days.mean())
    se = math.sqrt(s2_days / k + max(s2_days, s2_new))
    if se == 0:
        return RatioTest(diff, 0.0, float(k - 1), 0.0 if diff else 1.0, "days")
    return RatioTest(diff, se, float(k - 1), tdist.two_sided_p(diff / se, k - 1), "days")

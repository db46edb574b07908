"""What a comparison could have seen: the smallest change each configuration would have flagged with 90 %
probability, and how many runs a side a given change needs (``compare --plan``).

A configuration is flagged REGRESSION when its ratio is beyond the threshold and its Holm-adjusted p is at most
alpha. For a change that is the only one among m tested configurations, Holm needs its own p at most alpha / m:
|t| above c = t(1 - alpha / 2m, df). With a true change D (log, bad direction) t follows a noncentral t with
noncentrality D / se, so P(t > c) = E[Phi(D / se - c sqrt(V / df))] over V ~ chi-square(df) (integrated
numerically: the normal approximation to it is too kind at the 3 or 4 runs a side and the small alpha / m
of a gate). The ratio must also pass the threshold, log(1 + threshold) (latency)
or -log(1 - threshold) (bandwidth): the estimate passes it with probability P(T_df > (threshold - D) / se).
A change is flagged with 90 % probability from

    D90 = max(the D with P(t > c) = 0.9, log threshold + t(0.9, df) se)

(the larger of the two conditions' 90 % points; the chance of both is taken as the smaller of the two).
se and df are the row's own test's (the runs' spreads, the AR(1) factor for back-to-back runs, or the days'
spread with --lookback). The planned run count uses the same Welch model on the pooled log spread of the
configuration's runs, n runs on each side. Shown as fractions of the baseline in the bad direction: a
latency rise exp(D) - 1, a bandwidth fall 1 - exp(-D). tests/test_gate_compare.py checks D90 against
compare's own test on simulated log-normal runs (4 to 16 a side); docs/regressions.md against real launches.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from microbench.gate import tdist
from microbench.gate.ratiotest import ar1_factor, robust_logs

POWER = 0.9  #: the detection probability the figures are for
MAX_PLAN_RUNS = 1000  #: plans needing more runs a side say "more than" this


def log_threshold(threshold: float, higher_better: bool) -> float:
    """The threshold as a log change in the bad direction."""
    return -math.log(1 - threshold) if higher_better else math.log1p(threshold)


def as_fraction(log_change: float, higher_better: bool) -> float:
    """A log change in the bad direction as a fraction of the baseline (a rise of latency, a fall of bandwidth)."""
    return 1 - math.exp(-log_change) if higher_better else math.expm1(log_change)


def from_fraction(change: float, higher_better: bool) -> float:
    """A fraction of the baseline in the bad direction as a log change (the inverse of ``as_fraction``)."""
    return -math.log(1 - change) if higher_better else math.log1p(change)


def _critical(tested: int, alpha: float, df: float) -> float:
    return tdist.quantile(1 - alpha / (2 * max(tested, 1)), df)


def _normal_cdf(y: np.ndarray) -> np.ndarray:
    """Phi(y) elementwise, by Abramowitz and Stegun's 7.1.26 for erf (absolute error below 1.5e-7): ample for a
    probability of detection, and a hundred times faster than math.erfc element by element."""
    x = np.abs(y) / math.sqrt(2)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    half_tail = 0.5 * poly * np.exp(-x * x)  # P(Z > |y|)
    return np.where(y >= 0, 1.0 - half_tail, half_tail)


@lru_cache(maxsize=256)
def _chi_grid(df: float) -> tuple[np.ndarray, np.ndarray]:
    """sqrt(V / df) at the 400 midpoints of u = sqrt(V) in [max(0, sqrt(df) - 10), sqrt(df) + 10] (the chi
    distribution's sd is below 0.8 at every df) and the chi(df) density's weights there, u^(df - 1) exp(-u^2 / 2),
    normalised by their sum. On u the density is bounded at 0 for every df >= 1; on V it is unbounded below 2 df,
    where a midpoint rule on V missed a tenth of P(T > c) at 1 df."""
    lo = max(0.0, math.sqrt(df) - 10)
    u = lo + (np.arange(400) + 0.5) * ((math.sqrt(df) + 10 - lo) / 400)
    log_density = (df - 1) * np.log(u) - u * u / 2
    weights = np.exp(log_density - log_density.max())  # relative to the peak: no underflow at large df
    return u / math.sqrt(df), weights / weights.sum()


def noncentral_power(shift: float, c: float, df: float) -> float:
    """P(T > c) for a noncentral t with ``df`` degrees of freedom and noncentrality ``shift``: the mean over
    V ~ chi-square(df) of Phi(shift - c sqrt(V / df)), by the midpoint rule on 400 points of sqrt(V), normalised
    by the density's mass there."""
    scale, weights = _chi_grid(float(df))
    return min(1.0, float(np.dot(weights, _normal_cdf(shift - c * scale))))


def detectable_log(se: float, df: float, tested: int, alpha: float, log_thr: float) -> float:
    """D90: the log change flagged with probability ``POWER`` (see the module's text)."""
    if se == 0:
        return log_thr
    c = _critical(tested, alpha, df)
    lo, hi = c, c + 10.0
    while noncentral_power(hi, c, df) < POWER and hi < 1e6:
        hi *= 2
    for _ in range(30):  # bisection on the noncentrality
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if noncentral_power(mid, c, df) < POWER else (lo, mid)
    return max(hi * se, log_thr + tdist.quantile(POWER, df) * se)


def detection_probability(log_change: float, se: float, df: float, tested: int, alpha: float,
                          log_thr: float) -> float:
    """The chance that a true log change (bad direction) is flagged, by the same model as ``detectable_log``."""
    if se == 0:
        return 1.0 if log_change > log_thr else 0.0
    significant = noncentral_power(log_change / se, _critical(tested, alpha, df), df)
    t = (log_change - log_thr) / se
    tail = tdist.two_sided_p(abs(t), df) / 2  # P(T > |t|)
    return min(significant, 1 - tail if t > 0 else tail)


def pooled_log_sd(baseline: list[float], new: list[float]) -> float | None:
    """The pooled SD of both sides' (winsorized) log run values; None with fewer than 3 runs in all."""
    b, n = robust_logs(baseline), robust_logs(new)
    dof = (len(b) - 1 if len(b) > 1 else 0) + (len(n) - 1 if len(n) > 1 else 0)
    if dof < 1:
        return None
    ss = (float(((b - b.mean()) ** 2).sum()) if len(b) > 1 else 0.0) + \
        (float(((n - n.mean()) ** 2).sum()) if len(n) > 1 else 0.0)
    return math.sqrt(ss / dof)


def runs_needed(sd: float, rho: float, tested: int, alpha: float, log_thr: float, log_change: float) -> int | None:
    """The fewest runs a side (2 or more) with which a true ``log_change`` is flagged with 90 % probability, by
    Welch's t on two sides of n runs with log spread ``sd`` and back-to-back correlation ``rho``; None when the
    change is not beyond the threshold (never flagged) or needs more than ``MAX_PLAN_RUNS``."""
    if log_change <= log_thr:
        return None

    def enough(n: int) -> bool:
        f = ar1_factor(n, rho)
        se = math.sqrt(2 * f * sd * sd / n)
        df = max(1.0, 2 * (n / f - 1))  # Welch with equal sides: eb + en - 2 effective runs
        return detectable_log(se, df, tested, alpha, log_thr) <= log_change

    if not enough(MAX_PLAN_RUNS):
        return None
    lo, hi = 1, MAX_PLAN_RUNS  # enough(hi); D90 falls as n grows, so bisect on n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return max(hi, 2)


@dataclass
class BenchmarkPower:
    """One benchmark's (size sweep's) detectable changes and, with a plan, its run counts."""

    benchmark: str
    sweep: dict  #: the sweep's configuration without size
    sizes: int
    detectable: list[float | None]  #: per size, fraction (None: a side too short to test)
    runs_needed: list[int | None] | None = None  #: per size, with --plan (None: cannot within MAX_PLAN_RUNS)

    @property
    def tested(self) -> list[float]:
        return sorted(d for d in self.detectable if d is not None)

    def as_dict(self) -> dict:
        t = self.tested
        out = {"benchmark": self.benchmark, "config": self.sweep, "sizes": self.sizes,
               "detectable_median": statistics.median(t) if t else None, "detectable_max": t[-1] if t else None,
               "untestable_sizes": self.sizes - len(t)}
        if self.runs_needed is not None:
            known = sorted(n for n in self.runs_needed if n is not None)
            out["plan_runs_median"] = median_runs(known) if known else None
            out["plan_runs_max"] = known[-1] if known and len(known) == self.sizes else None
            out["plan_sizes_beyond_reach"] = self.sizes - len(known)
        return out


def per_benchmark(rows: list, detectable: list[float | None], needed: list[int | None] | None) -> list[BenchmarkPower]:
    """Group the rows' figures by size sweep (benchmark and options), in the rows' order."""
    groups: dict = {}
    for k, row in enumerate(rows):
        key = row.key.without_size()
        g = groups.get(key)
        if g is None:
            g = groups[key] = BenchmarkPower(row.key.benchmark, key.as_dict(), 0, [], [] if needed is not None else None)
        g.sizes += 1
        g.detectable.append(detectable[k])
        if needed is not None:
            g.runs_needed.append(needed[k])
    return list(groups.values())


MAX_SHOWN_PERCENT = 1000  #: larger changes print as ">1000 %": beyond it the figure says only "blind"


def percent(fraction: float | None) -> str:
    """A change as a whole per cent (``38 %``); ``>1000 %`` past 1000 % (a spread so wide the figure means only
    that the comparison was blind); ``-`` when unknown."""
    if fraction is None:
        return "-"
    if not fraction * 100 <= MAX_SHOWN_PERCENT:
        return f">{MAX_SHOWN_PERCENT} %"
    return f"{fraction * 100:.0f} %"


def median_runs(counts: list[int]) -> int:
    """The median of run counts, rounded up to a whole run (a site cannot run half a run)."""
    return math.ceil(statistics.median(counts))


def spread_of(rows: list) -> list[float | None]:
    """Each row's pooled log SD (``pooled_log_sd``)."""
    return [pooled_log_sd(r.baseline, r.new) for r in rows]


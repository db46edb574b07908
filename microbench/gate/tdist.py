"""Student's t distribution (two-sided p-value and quantile) for the gate's tests, without scipy.

scipy.special has both, but importing it costs more than a whole `microbench compare` may take
(docs/results-at-scale.md). The p-value is the regularized incomplete beta function
I_x(df/2, 1/2) with x = df / (df + t^2), evaluated by its continued fraction (modified Lentz), accurate
to about 1e-12 here; the quantile inverts it by Newton's method kept inside a bracket (bisection where a
step would leave it), and is cached. Both accept non-integer degrees of freedom
(Welch's).
"""

from __future__ import annotations

import math
from functools import lru_cache

_EPS = 1e-15
_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (converges for x < (a + 1) / (a + b + 2))."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def _density(t: float, df: float) -> float:
    """Student's t density at ``t``."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def quantile(prob: float, df: float) -> float:
    """The t with P(T <= t) = ``prob`` (0.5 < prob < 1): Newton on ``two_sided_p`` inside a bracket."""
    target = 2.0 * (1.0 - prob)  # two-sided tail mass at that t
    lo, hi = 0.0, 1.0
    while two_sided_p(hi, df) > target:
        lo, hi = hi, hi * 2.0
    t = (lo + hi) / 2.0
    for _ in range(200):
        g = two_sided_p(t, df) - target  # falls as t grows
        if g > 0:
            lo = t
        else:
            hi = t
        slope = 2.0 * _density(t, df)
        step = t + g / slope if slope > 0 else (lo + hi) / 2.0
        if not lo < step < hi:
            step = (lo + hi) / 2.0
        if abs(step - t) < 1e-12 * max(1.0, step) or hi - lo < 1e-12 * max(1.0, hi):
            return step
        t = step
    return t

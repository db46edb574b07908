"""Error control over a whole comparison (Holm's step-down adjustment) and a whole history call (Bonferroni).

Testing each of m configurations at level alpha on its own gives a false alarm somewhere with
probability up to 1 - (1 - alpha)^m (64 % for 20 configurations at 5 %). Holm's method keeps the
family-wise error rate, the probability of at least one false REGRESSION in the whole comparison, at
most alpha for any dependence between the tests, and rejects at least what Bonferroni's does: sort the
p-values, p_(1) <= ... <= p_(m); the adjusted value of p_(i) is max over j <= i of min(1, (m - j + 1) p_(j)).
A configuration is significant when its adjusted p-value is at most alpha. ``history`` adjusts by
Bonferroni instead (``bonferroni``: why there).
"""

from __future__ import annotations

from typing import Sequence


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the order given; None (no test possible) stays None and is not counted."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[index] = running
    return out


def bonferroni(p: float, tests: int) -> float:
    """A p-value adjusted for ``tests`` tests (Bonferroni: p x tests, capped at 1).

    ``history`` judges each split point of each series it reads as one test: a false step anywhere in the
    call then has probability at most alpha. Holm's step-down would let the other series use the level of
    a series that holds a step, but ``history`` spends it on that series' own segments instead (the
    searches for a second step), so every test keeps the Bonferroni level.
    """
    return min(1.0, p * tests)

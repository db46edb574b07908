"""A value at any message size from values measured at some sizes: linear in log(size) between them."""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Callable, Sequence


def at_size(sizes: Sequence[int], values: Sequence[float], size: int, *, log_values: bool,
            above: Callable[[int, float], float]) -> tuple[float, str]:
    """The value at ``size`` bytes and how it was obtained: "measured", "interpolated", "below" or "above".

    ``sizes`` ascend. Between two measured sizes the value is linear in log(size), and in log(value) too when
    ``log_values`` (a power law between the points); below the first size it is the first value; above the last
    it is ``above(last size, last value)``."""
    i = bisect_left(sizes, size)
    if i < len(sizes) and sizes[i] == size:
        return values[i], "measured"
    if i == 0:
        return values[0], "below"
    if i == len(sizes):
        return above(sizes[-1], values[-1]), "above"
    x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
    y0, y1 = values[i - 1], values[i]
    if log_values:
        y0, y1 = math.log(y0), math.log(y1)
    y = y0 + (math.log(size) - x0) * (y1 - y0) / (x1 - x0)
    return (math.exp(y) if log_values else y), "interpolated"

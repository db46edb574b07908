"""An all-to-all-v's per-peer sizes as a trace records them, summarised as a split pattern (issue 42).

A trace holds one rank's view of each call: what it sends each peer (PyTorch's "In split size", the execution
trace's ``in_split_size``, PARAM's ``in_split``, an NCCL log's grouped sends). Keeping every list would grow with the
trace, so each call is tallied under the pattern of the same peak: ``uniform`` when no peer gets more than another
(within one unit), else ``hot:K`` with the busiest peer's share of the call: on n peers hot:K sends K/(K + n - 1) of
the call to one peer, so a measured peak-to-mean ratio r (the busiest peer over the mean, 1 <= r <= n) is hot:K with
K = r (n-1) / (n - r), r rounded to two significant digits (r = n, everything to one peer, is hot:1e9). That pattern
is one ``run alltoallv --splits`` measures: the replay issues it and the pricing looks up its curve.
"""

from __future__ import annotations

import math
import re

#: the most peers a list may name (larger groups: the pattern is not recorded)
MAX_PEERS = 1 << 20
_NUMBER = re.compile(r"-?\d+")


def parse_sizes(value) -> list[int] | None:
    """Per-peer sizes from a trace: a list of whole numbers, or PyTorch's text "[4, 4, 8]"; None for "[]", a list
    the profiler cut short ("..."), or anything else."""
    if isinstance(value, str):
        if "..." in value or not value.strip().startswith("["):
            return None
        parts = [p.strip() for p in value.strip()[1:-1].split(",") if p.strip()]
        if not parts or not all(_NUMBER.fullmatch(p) for p in parts):
            return None
        value = [int(p) for p in parts]
    if not isinstance(value, list) or not value or len(value) > MAX_PEERS:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        return None
    return value


def pattern_of(sizes: list[int]) -> str:
    """The split pattern of the same peak-to-mean as ``sizes`` (see the module); ``uniform`` for one peer."""
    n, total = len(sizes), sum(sizes)
    if n < 2 or total == 0 or max(sizes) - min(sizes) <= 1:
        return "uniform"
    ratio = float(f"{max(sizes) * n / total:.2g}")
    if ratio <= 1:
        return "uniform"
    if ratio >= n:
        return "hot:1e+09"
    k = ratio * (n - 1) / (n - ratio)
    return f"hot:{min(k, 1e9):g}" if not math.isclose(k, 1) else "uniform"

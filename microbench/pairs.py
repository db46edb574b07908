"""The pairwise link test: ping-pong latency and windowed bandwidth between every pair of participants.

Participants are the hosts (one rank per host, the lowest) when the job spans several hosts, else every
rank. Pairs are scheduled as a round-robin tournament (the circle method): N - 1 rounds of N/2 disjoint
pairs measured at the same time (a bye for odd N), so N participants cost O(N) rounds; ``--serial``
measures one pair at a time (N(N-1)/2 rounds) for interference-free figures.

Each cell is the p50 of that pair's per-iteration samples: latency (half the round trip) at the smallest
size of ``-m``, bandwidth (osu_bw's window, size / per-message time) at the largest. Outliers are cells
whose modified z-score, 0.6745 (x - median) / MAD over all cells, exceeds ``OUTLIER_Z`` in the bad direction
(slower latency, lower bandwidth); MAD is floored at 5 % of the median, so a uniform matrix (or noise of a few per cent) flags
nothing. A bad node (not one link) spoils a whole row, which with few nodes can move the median of all cells
itself; ``node_outliers`` applies the same rule to each participant's row median instead.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

PAIRS = "pairs"  #: the benchmark name of the pairwise link test (commands and records)
OUTLIER_Z = 3.5
_MAD_FLOOR = 0.05


def round_robin(participants: list[int]) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair once (circle method); N-1 rounds (N for odd N).

    Fewer than 2 participants have no pair: no rounds."""
    if len(participants) < 2:
        return []
    items: list[int | None] = list(participants)
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = items[i], items[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]  # rotate all but the first
    return rounds


def serial(participants: list[int]) -> list[list[tuple[int, int]]]:
    """One pair per round, every pair once."""
    return [[(a, b)] for i, a in enumerate(participants) for b in participants[i + 1:]]


def choose_participants(hosts_by_rank: list[str]) -> tuple[list[int], list[str], str]:
    """(ranks that take part, their labels, 'host' or 'rank'): one rank per host across hosts, else all ranks."""
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts_by_rank):
        first.setdefault(host, rank)
    if len(first) > 1:
        return list(first.values()), list(first.keys()), "host"
    return list(range(len(hosts_by_rank))), [f"rank {r}" for r in range(len(hosts_by_rank))], "rank"


@dataclass(frozen=True)
class Outlier:
    i: int
    j: int
    value: float
    z: float


def outliers(matrix: list[list[float | None]], higher_is_worse: bool, z_limit: float = OUTLIER_Z) -> tuple[list[Outlier], dict]:
    """Cells of the upper triangle beyond the modified z-score limit in the bad direction, and the rule's numbers."""
    cells = [(i, j, v) for i, row in enumerate(matrix) for j, v in enumerate(row) if j > i and v is not None]
    if len(cells) < 3:
        return [], {"median": None, "mad": None, "z_limit": z_limit, "cells": len(cells)}
    flagged, rule = _flag([v for _, _, v in cells], higher_is_worse, z_limit)
    found = [Outlier(cells[k][0], cells[k][1], cells[k][2], z) for k, z in flagged]
    return found, {**rule, "cells": len(cells)}


def _flag(values: list[float], higher_is_worse: bool, z_limit: float) -> tuple[list[tuple[int, float]], dict]:
    """Indices of ``values`` beyond the modified z-score limit in the bad direction (with their z), and the rule."""
    med = statistics.median(values)
    mad = max(statistics.median(abs(v - med) for v in values), _MAD_FLOOR * abs(med))
    found = []
    for k, v in enumerate(values):
        z = 0.6745 * (v - med) / mad if mad > 0 else 0.0
        if (z > z_limit) if higher_is_worse else (z < -z_limit):
            found.append((k, z))
    bound = med + (1 if higher_is_worse else -1) * z_limit * mad / 0.6745
    return found, {"median": med, "mad": mad, "z_limit": z_limit, "threshold": bound}


def node_outliers(matrix: list[list[float | None]], higher_is_worse: bool,
                  z_limit: float = OUTLIER_Z) -> tuple[list[tuple[int, float, float]], dict]:
    """Participants whose row median (their links to everyone else) is an outlier among all row medians.

    Returns [(participant index, row median, z)] and the rule's numbers; needs at least 4 participants."""
    rows = [[v for j, v in enumerate(row) if j != i and v is not None] for i, row in enumerate(matrix)]
    medians = [statistics.median(r) if r else None for r in rows]
    known = [(i, m) for i, m in enumerate(medians) if m is not None]
    if len(known) < 4:
        return [], {"median": None, "mad": None, "z_limit": z_limit, "nodes": len(known)}
    found, rule = _flag([m for _, m in known], higher_is_worse, z_limit)
    return [(known[k][0], known[k][1], z) for k, z in found], {**rule, "nodes": len(known)}


"""The outlier rule of the diagnostics: a modified z-score over the median and MAD, in the bad direction only.

Used by the pairwise link test (cells and node rows), straggler attribution and bisection, and by every reader of
a pairs record, which recomputes what the record flags from its matrix rather than trusting its lists.

A pairs record measured in repeated passes (``run pairs --pair-repeats R``) holds each pass's matrix
(``repeats``) and their cellwise median (``matrix``). A link or node is then flagged only where it stands out in
the median matrix and in a strict majority of the passes (2 of 2, 2 of 3, 3 of 4): one noisy pass on a loaded
machine does not name a node (on an unthrottled emulated cluster one of two single-pass runs named node0).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

OUTLIER_Z = 3.5


_MAD_FLOOR = 0.05


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
    flagged, rule = _flag_cells([v for _, _, v in cells], higher_is_worse, z_limit)
    found = [Outlier(cells[k][0], cells[k][1], cells[k][2], z) for k, z in flagged]
    return found, {**rule, "cells": len(cells)}


def flag_outliers(values: list[float], higher_is_worse: bool,
                  z_limit: float = OUTLIER_Z) -> tuple[list[tuple[int, float]], dict]:
    """Indices of ``values`` beyond the modified z-score limit in the bad direction (with their z), and the rule
    (the pairwise test's, also used by straggler attribution and bisection)."""
    med = statistics.median(values)
    mad = max(statistics.median(abs(v - med) for v in values), _MAD_FLOOR * abs(med))
    found = []
    for k, v in enumerate(values):
        z = 0.6745 * (v - med) / mad if mad > 0 else 0.0
        if (z > z_limit) if higher_is_worse else (z < -z_limit):
            found.append((k, z))
    bound = med + (1 if higher_is_worse else -1) * z_limit * mad / 0.6745
    return found, {"median": med, "mad": mad, "z_limit": z_limit, "threshold": bound}


def _flag_cells(values: list[float], higher_is_worse: bool, z_limit: float) -> tuple[list[tuple[int, float]], dict]:
    """``flag_outliers`` for matrix cells. Where lower is worse (bandwidth) the rule is applied to the
    reciprocals, the time per byte each cell is measured from: bandwidth is bounded below by 0, so with links
    that spread by more than 19 % of their median a threshold in GB/s falls below zero and no link, not even a
    dead one, could be flagged. z is then negative for slow cells, and the median and threshold are given back
    in the cells' unit."""
    if higher_is_worse:
        return flag_outliers(values, True, z_limit)
    found, rule = flag_outliers([1.0 / v if v > 0 else float("inf") for v in values], True, z_limit)
    return ([(k, -z) for k, z in found],
            {"median": 1.0 / rule["median"] if rule["median"] else float("inf"), "mad": rule["mad"],
             "mad_of": "the reciprocals of the cells", "z_limit": z_limit, "threshold": 1.0 / rule["threshold"]})


def node_outliers(matrix: list[list[float | None]], higher_is_worse: bool,
                  z_limit: float = OUTLIER_Z) -> tuple[list[tuple[int, float, float]], dict]:
    """Participants whose row median (their links to everyone else) is an outlier among all row medians.

    Returns [(participant index, row median, z)] and the rule's numbers; needs at least 4 participants."""
    rows = [[v for j, v in enumerate(row) if j != i and v is not None] for i, row in enumerate(matrix)]
    medians = [statistics.median(r) if r else None for r in rows]
    known = [(i, m) for i, m in enumerate(medians) if m is not None]
    if len(known) < 4:
        return [], {"median": None, "mad": None, "z_limit": z_limit, "nodes": len(known)}
    found, rule = _flag_cells([m for _, m in known], higher_is_worse, z_limit)
    return [(known[k][0], known[k][1], z) for k, z in found], {**rule, "nodes": len(known)}


def majority(passes: int) -> int:
    """Passes a link or node must stand out in: a strict majority of ``passes``."""
    return passes // 2 + 1


def median_matrix(repeats: list[list[list[float | None]]]) -> list[list[float | None]]:
    """The cellwise median of the passes' matrices (a cell no pass measured stays None)."""
    n = len(repeats[0])
    out: list[list[float | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            cells = [m[i][j] for m in repeats if m[i][j] is not None]
            out[i][j] = statistics.median(cells) if cells else None
    return out


def flag_matrix(matrix: list[list[float | None]], labels: list[str], higher_is_worse: bool,
                z_limit: float = OUTLIER_Z, repeats: list[list[list[float | None]]] | None = None) -> dict:
    """What a pairs record says its matrix flags: ``outliers`` (links) and ``node_outliers`` (participants), each
    with its rule, as the record holds them. The pairwise test writes this; every reader computes it again from
    the record's matrix (and ``repeats``: each pass's matrix) and judges that, never the lists the record
    carries. With two or more passes, only what stands out in the median matrix and in a strict majority of
    the passes is flagged."""
    found, rule = outliers(matrix, higher_is_worse=higher_is_worse, z_limit=z_limit)
    bad_nodes, node_rule = node_outliers(matrix, higher_is_worse=higher_is_worse, z_limit=z_limit)
    if repeats and len(repeats) >= 2:
        need = majority(len(repeats))
        link_votes: dict[tuple[int, int], int] = {}
        node_votes: dict[int, int] = {}
        for one in repeats:
            for o in outliers(one, higher_is_worse=higher_is_worse, z_limit=z_limit)[0]:
                link_votes[(o.i, o.j)] = link_votes.get((o.i, o.j), 0) + 1
            for i, _, _ in node_outliers(one, higher_is_worse=higher_is_worse, z_limit=z_limit)[0]:
                node_votes[i] = node_votes.get(i, 0) + 1
        found = [o for o in found if link_votes.get((o.i, o.j), 0) >= need]
        bad_nodes = [b for b in bad_nodes if node_votes.get(b[0], 0) >= need]
        rule = {**rule, "passes": len(repeats), "passes_needed": need}
        node_rule = {**node_rule, "passes": len(repeats), "passes_needed": need}
    direction = "above" if higher_is_worse else "below"
    return {
        "outliers": [{"pair": [o.i, o.j], "labels": [labels[o.i], labels[o.j]], "value": o.value,
                      "z": round(o.z, 2)} for o in found],
        "outlier_rule": {"statistic": "modified z-score 0.6745 (x - median) / MAD over all pairs"
                         + (", in the median of the passes and in a majority of them" if "passes" in rule else ""),
                         "direction": direction, **rule},
        "node_outliers": [{"index": i, "label": labels[i], "row_median": m, "z": round(z, 2)}
                          for i, m, z in bad_nodes],
        "node_outlier_rule": {"statistic": "the same rule over each participant's row median",
                              "direction": direction, **node_rule},
    }

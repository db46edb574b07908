"""Layer 7, bandwidth: one short round per node pair at one size, naming pairs and nodes far below the rest.

The pairs test at its cheapest (``microbench run pairs`` measures every pair properly): one rank per node, the
tournament's rounds (``pairs.py``), in each a warm-up exchange then up to ``ITERATIONS`` timed ones of ``--size``
bytes both ways at once (fewer once ``PAIR_BUDGET_S`` has passed: a slow pair is measured again alone); a pair's
figure is its best exchange (noise on a shared node only slows one down), as bytes one way over the exchange's
time, in GB/s. Both ends time the exchange and the better of the two is kept.

The judge: a pair is far below the rest under 1/``FAR_BELOW`` of the median pair, a node when its best pair is
under 1/``FAR_BELOW`` of the median node's best (with 3 nodes and one slow, the median pair is a slow one; a
node's best is what its own link allows). A pair that did not finish within the pair deadline is named as not
answering.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from microbench.doctor import pairs
from microbench.doctor.job import Job
from microbench.doctor.layers import BY_NAME, FAR_BELOW, Finding, LayerResult, verdict

LAYER = BY_NAME["bandwidth"]
ITERATIONS = 5  #: timed exchanges per pair in the rounds (after one warm-up)
RECHECK_ITERATIONS = 5  #: per pair that looked far below the rest, measured again with no other pair beside it
TAG, RECHECK_TAG = 11, 16000
HEARTBEAT_S = 1.0
#: in the rounds, a pair's timed exchanges stop once this many seconds have passed (at least one is timed): the
#: lower end decides and says so in its message, so both ends stop after the same exchange
PAIR_BUDGET_S = 0.3


def collect(ctx: dict, comm, step) -> dict:
    """This node's row: partner node -> best GB/s (None: it did not answer in time). With ``recheck`` (pairs of
    node indices, in one order every node follows), only those pairs, one after another, more iterations each."""
    if ctx.get("index") is None or comm is None:
        return {}
    me, leaders = ctx["index"], ctx["leaders"]
    n, size = len(leaders), int(ctx["bytes"])
    send = np.full(size, 1, dtype=np.uint8)  # written by its owner (first touch here), as the benchmark's buffers
    recv = [np.zeros(size, dtype=np.uint8)]
    row: dict[str, float | None] = {}
    if "recheck" in ctx:
        plan = [(k, b if a == me else a, RECHECK_TAG + k % 15000, RECHECK_ITERATIONS, "recheck")
                for k, (a, b) in enumerate(ctx["recheck"]) if me in (a, b)]
    else:
        plan = [(r, pairs.partner(me, r, n), TAG + r % 15000, ITERATIONS, f"round {r + 1}")
                for r in range(pairs.rounds(n))]
    last = time.monotonic()
    for k, other, tag, iterations, stage in plan:
        if time.monotonic() - last > HEARTBEAT_S:
            step(f"{stage} of {pairs.rounds(n)}" if stage.startswith("round") else stage, heartbeat=True)
            last = time.monotonic()
        if other is None:
            continue
        best = None
        began = time.monotonic()
        decides = me < other  # the lower end says in its message's first byte whether this exchange is the last
        for i in range(iterations + 1):
            last = i == iterations or (decides and i >= 1 and stage != "recheck"
                                       and time.monotonic() - began > PAIR_BUDGET_S)
            send[0] = 1 if decides and last else 0
            missing, seconds = pairs.exchange(comm, [leaders[other]], size, tag, ctx["pair_timeout"], send, recv)
            if missing:
                step(f"no answer from node {other} at {size} bytes", failed_pair=[me, other], stage=stage)
                best = None
                break
            if i and seconds > 0:
                best = max(best or 0.0, size / seconds / 1e9)
            if last or (not decides and recv[0][0] == 1):
                break  # a slow pair stops early in the rounds: the recheck measures it alone, every iteration
        row[str(other)] = best
    return {"row": row, "size": size}


def suspects(reports: dict[int, dict], job: Job) -> list[list[int]]:
    """Node pairs (indices) the rounds found far below the rest, or touching a node that was: measured again."""
    nodes = job.nodes()
    m = matrix_of(reports, len(nodes.labels), {rank: k for k, rank in enumerate(nodes.leaders)})
    slow_nodes, slow_pairs, _ = far_below(m, nodes.labels)
    slow = {i for i, _ in slow_nodes}
    n = len(m)
    found = {(i, j) for i in slow for j in range(n) if j != i and m[i][j] is not None}
    found |= {(i, j) for i, j, _ in slow_pairs}
    return sorted([min(p), max(p)] for p in {(min(a, b), max(a, b)) for a, b in found})


def merged(first: dict[int, dict], second: dict[int, dict]) -> dict[int, dict]:
    """Each node's row with the recheck's figures where they are better."""
    out = {}
    for rank, rep in first.items():
        row = dict(rep.get("row", {}))
        for j, v in (second.get(rank) or {}).get("row", {}).items():
            if v is not None and (row.get(j) is None or v > row[j]):
                row[j] = v
        out[rank] = {**rep, "row": row}
    return out


def matrix_of(reports: dict[int, dict], n: int, index_of_rank: dict[int, int]) -> list[list[float | None]]:
    """The symmetric n x n matrix (GB/s) from every node's row, the better of the two ends' figures."""
    m: list[list[float | None]] = [[None] * n for _ in range(n)]
    for rank, rep in reports.items():
        i = index_of_rank.get(rank)
        if i is None:
            continue
        for j, v in rep.get("row", {}).items():
            j = int(j)
            if v is not None:
                m[i][j] = v if m[i][j] is None else max(m[i][j], v)
                m[j][i] = m[i][j]
    return m


def far_below(matrix: list[list[float | None]], labels: list[str]) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]], dict]:
    """(slow nodes [(index, best GB/s)], slow pairs [(i, j, GB/s)] not explained by a slow node, the references)."""
    n = len(matrix)
    cells = [(i, j, matrix[i][j]) for i in range(n) for j in range(i + 1, n) if matrix[i][j] is not None]
    if len(cells) < 2:
        return [], [], {"median_pair": None, "median_best": None}
    median_pair = statistics.median(v for _, _, v in cells)
    bests = [max((v for v in row if v is not None), default=None) for row in matrix]
    known = [b for b in bests if b is not None]
    median_best = statistics.median(known) if known else None
    slow_nodes = [(i, b) for i, b in enumerate(bests) if b is not None and median_best and b * FAR_BELOW < median_best]
    slow = {i for i, _ in slow_nodes}
    slow_pairs = [(i, j, v) for i, j, v in cells if v * FAR_BELOW < median_pair and i not in slow and j not in slow]
    return slow_nodes, slow_pairs, {"median_pair": median_pair, "median_best": median_best}


def judge(reports: dict[int, dict], job: Job, failed_steps: list[dict], size: int) -> LayerResult:
    nodes = job.nodes()
    labels = nodes.labels
    index_of_rank = {rank: k for k, rank in enumerate(nodes.leaders)}
    m = matrix_of(reports, len(labels), index_of_rank)
    slow_nodes, slow_pairs, ref = far_below(m, labels)
    findings: list[Finding] = []
    for i, best in slow_nodes:
        findings.append(Finding(f"{labels[i]}: its best pair moves {best:.3g} GB/s, under 1/{FAR_BELOW:g} of the "
                                f"median node's best ({ref['median_best']:.3g} GB/s) at {_size(size)}",
                                host=labels[i], ranks=[nodes.leaders[i]]))
    for i, j, v in slow_pairs:
        findings.append(Finding(f"{labels[i]} - {labels[j]}: {v:.3g} GB/s, under 1/{FAR_BELOW:g} of the median pair "
                                f"({ref['median_pair']:.3g} GB/s) at {_size(size)}"))
    for pair in {tuple(sorted(s["pair"])) for s in failed_steps}:
        a, b = pair
        findings.append(Finding(f"{labels[a]} - {labels[b]}: {_size(size)} did not arrive within the pair deadline"))
    values = [v for i, row in enumerate(m) for j, v in enumerate(row) if j > i and v is not None]
    if findings:
        summary = findings[0].what + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else "")
    elif values:
        summary = (f"{len(values)} node pair(s) at {_size(size)}: {min(values):.3g} to {max(values):.3g} GB/s, median "
                   f"{statistics.median(values):.3g}; none far below the rest")
    else:
        summary = "one node: no pair to measure"
    return verdict(summary, findings, LAYER, details={
        "size_bytes": size, "labels": labels, "matrix_gbps": [[None if v is None else round(v, 6) for v in row]
                                                              for row in m] if len(labels) <= 256 else None,
        "median_pair_gbps": ref["median_pair"], "median_best_gbps": ref["median_best"], "far_below": FAR_BELOW})


def _size(n: int) -> str:
    from microbench.units import format_bytes

    return format_bytes(n)

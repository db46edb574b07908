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

Above ``FULL_ROWS`` nodes a node sends, instead of its whole row (the coordinator would receive n squared figures:
268 million at 16,384 nodes), its row's best, median and count, and the pairs far below its own row's median or
without an answer; the median pair is then the median of the rows' medians, and the record holds no matrix.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

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
FULL_ROWS = 256  #: up to this many nodes every node sends its whole row (and the record holds the matrix)
RECHECK_PARTNERS = 3  #: a node far below the rest is measured again with this many partners
RECHECK_PAIRS = 64  #: at most this many pairs far below the rest are measured again


def collect(ctx: dict, comm, step) -> dict:
    """This node's row: partner node -> best GB/s (None: it did not answer in time); above ``FULL_ROWS`` nodes the
    row's summary and only its pairs far below the row's own median (``summarised``). With ``recheck`` (pairs of
    node indices, in one order every node follows), only those pairs, one after another, more iterations each."""
    if ctx.get("index") is None or comm is None:
        return {}
    me, leaders = ctx["index"], pairs.unpack_ranks(ctx["leaders"])
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
    beat = time.monotonic()
    for k, other, tag, iterations, stage in plan:
        if time.monotonic() - beat > HEARTBEAT_S:
            step(f"{stage} of {pairs.rounds(n)}" if stage.startswith("round") else stage, heartbeat=True)
            beat = time.monotonic()
        if other is None:
            continue
        best = None
        began = time.monotonic()
        decides = me < other  # the lower end says in its message's first byte whether this exchange is the last
        for i in range(iterations + 1):
            final = i == iterations or (decides and i >= 1 and stage != "recheck"
                                        and time.monotonic() - began > PAIR_BUDGET_S)
            send[0] = 1 if decides and final else 0
            missing, seconds = pairs.exchange(comm, [leaders[other]], size, tag, ctx["pair_timeout"], send, recv)
            if missing:
                step(f"no answer from node {other} at {size} bytes", failed_pair=[me, other], stage=stage)
                best = None
                break
            if i and seconds > 0:
                best = max(best or 0.0, size / seconds / 1e9)
            if final or (not decides and recv[0][0] == 1):
                break  # a slow pair stops early in the rounds: the recheck measures it alone, every iteration
        row[str(other)] = best
    if n > FULL_ROWS and "recheck" not in ctx:
        return {**summarised(row), "size": size}
    return {"row": row, "size": size}


def summarised(row: dict[str, float | None]) -> dict:
    """A row too long to send whole: its best and median figures and count, and only the pairs that did not answer
    or are far below the row's own median (a pair far below the job's median is far below at one end at least,
    unless both ends are slow nodes, which their own best names)."""
    values = [v for v in row.values() if v is not None]
    median = statistics.median(values) if values else None
    kept = {j: v for j, v in row.items() if v is None or (median and v * FAR_BELOW < median)}
    return {"row": kept, "summary": {"best": max(values, default=None), "median": median, "pairs": len(row)}}


@dataclass
class Figures:
    """What the coordinator knows of the pairs: the pairs' figures it holds (every pair up to ``FULL_ROWS`` nodes,
    else the rows' outliers), each node's best, and the median pair (exact, else the median of the rows' medians)."""

    n: int
    cells: dict[tuple[int, int], float]  #: (i < j) -> GB/s, the better of the two ends
    bests: list[float | None]
    median_pair: float | None
    whole: bool  #: every pair's figure is in ``cells``

    def matrix(self) -> list[list[float | None]] | None:
        if not self.whole:
            return None
        m: list[list[float | None]] = [[None] * self.n for _ in range(self.n)]
        for (i, j), v in self.cells.items():
            m[i][j] = m[j][i] = v
        return m


def figures(reports: dict[int, dict], n: int, index_of_rank: dict[int, int]) -> Figures:
    """The pairs' figures from every node's report (rows, or summaries and outliers)."""
    cells: dict[tuple[int, int], float] = {}
    bests: list[float | None] = [None] * n
    medians, whole = [], True
    for rank, rep in reports.items():
        i = index_of_rank.get(rank)
        if i is None:
            continue
        summary = rep.get("summary")
        if summary:
            whole = False
            if summary.get("median") is not None:
                medians.append(summary["median"])
            bests[i] = _larger(bests[i], summary.get("best"))
        for j, v in rep.get("row", {}).items():
            j = int(j)
            if v is not None and 0 <= j < n and j != i:
                key = (min(i, j), max(i, j))
                cells[key] = _larger(cells.get(key), v)
    for (i, j), v in cells.items():
        bests[i], bests[j] = _larger(bests[i], v), _larger(bests[j], v)
    if whole:
        median_pair = statistics.median(cells.values()) if len(cells) >= 2 else None
    else:
        median_pair = statistics.median(medians) if medians else None
    return Figures(n, cells, bests, median_pair, whole)


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def suspects(reports: dict[int, dict], job: Job) -> list[list[int]]:
    """Node pairs (indices) the rounds found far below the rest, and up to ``RECHECK_PARTNERS`` pairs of each node
    that was (with the partners whose own best is highest): measured again, one after another."""
    nodes = job.nodes()
    f = figures(reports, len(nodes.labels), {rank: k for k, rank in enumerate(nodes.leaders)})
    slow_nodes, slow_pairs, _ = far_below_figures(f)
    slow = {i for i, _ in slow_nodes}
    strong = sorted((j for j in range(f.n) if j not in slow and f.bests[j] is not None), key=lambda j: -f.bests[j])
    found = {(min(i, j), max(i, j)) for i in slow for j in strong[:RECHECK_PARTNERS]}
    found |= {(i, j) for i, j, _ in slow_pairs[:RECHECK_PAIRS]}
    return sorted([a, b] for a, b in found)


def merged(first: dict[int, dict], second: dict[int, dict]) -> dict[int, dict]:
    """Each node's report with the recheck's figures where they are better."""
    out = {}
    for rank, rep in first.items():
        row = dict(rep.get("row", {}))
        again = (second.get(rank) or {}).get("row", {})
        for j, v in again.items():
            if v is not None and (row.get(j) is None or v > row[j]):
                row[j] = v
        out[rank] = {**rep, "row": row}
        if rep.get("summary"):  # a slow pair that is not slow after all: no longer an outlier of its row
            summary = dict(rep["summary"])
            summary["best"] = _larger(summary.get("best"), max((v for v in again.values() if v is not None),
                                                                default=None))
            median = summary.get("median")
            out[rank]["row"] = {j: v for j, v in row.items() if v is None or (median and v * FAR_BELOW < median)}
            out[rank]["summary"] = summary
    return out


def matrix_of(reports: dict[int, dict], n: int, index_of_rank: dict[int, int]) -> list[list[float | None]]:
    """The symmetric n x n matrix (GB/s) from every node's whole row, the better of the two ends' figures."""
    f = figures(reports, n, index_of_rank)
    return f.matrix() or [[None] * n for _ in range(n)]


def far_below(matrix: list[list[float | None]], labels: list[str]) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]], dict]:
    """(slow nodes [(index, best GB/s)], slow pairs [(i, j, GB/s)] not explained by a slow node, the references)
    of a whole matrix."""
    n = len(matrix)
    reports = {i: {"row": {str(j): v for j, v in enumerate(row) if j != i}} for i, row in enumerate(matrix)}
    return far_below_figures(figures(reports, n, {i: i for i in range(n)}))


def far_below_figures(f: Figures) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]], dict]:
    """A node is far below when its best is under 1/FAR_BELOW of the median node's best; a pair when it is under
    1/FAR_BELOW of the median pair and neither end is a slow node."""
    known = [b for b in f.bests if b is not None]
    if len(known) < 2 or f.median_pair is None:
        return [], [], {"median_pair": f.median_pair, "median_best": None}
    median_best = statistics.median(known)
    slow_nodes = [(i, b) for i, b in enumerate(f.bests) if b is not None and b * FAR_BELOW < median_best]
    slow = {i for i, _ in slow_nodes}
    slow_pairs = sorted((i, j, v) for (i, j), v in f.cells.items()
                        if v * FAR_BELOW < f.median_pair and i not in slow and j not in slow)
    return slow_nodes, slow_pairs, {"median_pair": f.median_pair, "median_best": median_best}


def judge(reports: dict[int, dict], job: Job, failed_steps: list[dict], size: int) -> LayerResult:
    nodes = job.nodes()
    labels = nodes.labels
    f = figures(reports, len(labels), {rank: k for k, rank in enumerate(nodes.leaders)})
    slow_nodes, slow_pairs, ref = far_below_figures(f)
    findings: list[Finding] = []
    for i, best in slow_nodes:
        findings.append(Finding(f"{labels[i]}: its best pair moves {best:.3g} GB/s, under 1/{FAR_BELOW:g} of the "
                                f"median node's best ({ref['median_best']:.3g} GB/s) at {_size(size)}",
                                host=labels[i], ranks=[nodes.leaders[i]]))
    for i, j, v in slow_pairs:
        findings.append(Finding(f"{labels[i]} - {labels[j]}: {v:.3g} GB/s, under 1/{FAR_BELOW:g} of the median pair "
                                f"({ref['median_pair']:.3g} GB/s) at {_size(size)}"))
    for pair in sorted({tuple(sorted(s["pair"])) for s in failed_steps}):
        a, b = pair
        findings.append(Finding(f"{labels[a]} - {labels[b]}: {_size(size)} did not arrive within the pair deadline"))
    values = list(f.cells.values())
    if findings:
        summary = findings[0].what + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else "")
    elif f.whole and values:
        summary = (f"{len(values)} node pair(s) at {_size(size)}: {min(values):.3g} to {max(values):.3g} GB/s, median "
                   f"{statistics.median(values):.3g}; none far below the rest")
    elif f.median_pair is not None:
        pairs_ = len(labels) * (len(labels) - 1) // 2
        summary = (f"{pairs_} node pair(s) at {_size(size)}: median about {f.median_pair:.3g} GB/s (the rows' "
                   f"medians); none far below the rest")
    else:
        summary = "one node: no pair to measure"
    matrix = f.matrix() if len(labels) <= FULL_ROWS else None
    return verdict(summary, findings, LAYER, details={
        "size_bytes": size, "labels": labels if len(labels) <= FULL_ROWS else None,
        "matrix_gbps": [[None if v is None else round(v, 6) for v in row] for row in matrix] if matrix else None,
        "median_pair_gbps": ref["median_pair"], "median_best_gbps": ref["median_best"], "far_below": FAR_BELOW})


def _size(n: int) -> str:
    from microbench.units import format_bytes

    return format_bytes(n)

"""The pairwise link test: ping-pong latency and windowed bandwidth between every pair of participants.

Participants are the hosts (one rank per host, the lowest) when the job spans several hosts, else every
rank. Pairs are scheduled as a round-robin tournament (the circle method): N - 1 rounds of N/2 disjoint
pairs measured at the same time (a bye for odd N), so N participants cost O(N) rounds; ``--serial``
measures one pair at a time (N(N-1)/2 rounds) for interference-free figures.

Each cell is the p50 of that pair's per-iteration samples: latency (half the round trip) at the smallest
size of ``-m``, bandwidth (osu_bw's window, size / per-message time) at the largest. Outliers are cells
whose modified z-score, 0.6745 (x - median) / MAD over all cells, exceeds ``OUTLIER_Z`` in the bad direction
(slower latency, lower bandwidth; bandwidth is judged on the reciprocal of each cell, the time per byte, since
GB/s cannot fall below 0); MAD is floored at 5 % of the median, so a uniform matrix (or noise of a few per
cent) flags nothing. A bad node (not one link) spoils a whole row, which with few nodes can move the median of all cells
itself; ``node_outliers`` applies the same rule to each participant's row median instead.

The schedule is measured ``--pair-repeats`` times (2 by default): the record's matrix is the cellwise median of
the passes, ``repeats`` holds each pass's, and a link or node is flagged only where it stands out in the median
matrix and in a majority of the passes (``outliers.flag_matrix``): one noisy pass does not name a node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from microbench.benchmarks.table import Context, pair_metric_benchmark
from microbench.cluster import agree
from microbench.cluster.nodes import choose_participants
from microbench.measure import engine, stats
from microbench.options import counts_for, dtype_for, plan_size
from microbench.records import build
from microbench.measure.outliers import flag_matrix, median_matrix
from microbench.run.measure_pool import measure_on_pool

if TYPE_CHECKING:  # pragma: no cover
    from microbench.run.context import RunContext


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


# ------------------------------------------------------------------------------ running the test
@dataclass(frozen=True)
class Metric:
    """One matrix of the test: which benchmark measures it, its unit, and which direction is bad."""

    name: str  #: "latency" or "bandwidth" (the ``pair_metric`` of a collectives entry)
    matrix_unit: str
    higher_is_worse: bool

    def cell(self, size_bytes: int, p50_us: float) -> float:
        """A pair's cell from the p50 of its per-iteration latency: us, or GB/s."""
        return p50_us if self.higher_is_worse else stats.bandwidth_gbps(size_bytes, p50_us)

    def latency_us(self, size_bytes: int, cell: float) -> float:
        """The per-iteration latency a cell stands for (us)."""
        return cell if self.higher_is_worse else size_bytes / (cell * 1e9) * 1e6


METRICS = (Metric("latency", "us", True), Metric("bandwidth", "GB/s", False))


@dataclass(frozen=True)
class Plan:
    """Who takes part and in which rounds."""

    members: list[int]  #: participant ranks
    labels: list[str]
    unit: str  #: "host" or "rank"
    schedule: list[list[tuple[int, int]]]
    serial: bool


def plan(hosts_by_rank: list[str], serial_schedule: bool) -> Plan:
    """Participants (one rank per host across hosts, else every rank) and their rounds of pairs."""
    members, labels, unit = choose_participants(hosts_by_rank)
    return Plan(members, labels, unit, serial(members) if serial_schedule else round_robin(members),
                serial_schedule)


def run_pairs(rc: RunContext, test: Plan) -> list[str]:
    """The pairwise link test (collective): one matrix per metric; returns the metrics whose --check failed."""
    failed = []
    for metric, size in zip(METRICS, rc.opts.pair_sizes):
        record, check = _measure_matrix(rc, test, metric, size)
        if check == "fail":
            failed.append(f"pairs {metric.name}")
        if rc.out is not None:
            rc.out.result(record)
    return failed


def _measure_matrix(rc: RunContext, test: Plan, metric: Metric, size: int) -> tuple[dict | None, str | None]:
    """Every round of one metric; (the record on rank 0, the check verdict)."""
    o = rc.opts
    coll = pair_metric_benchmark(metric.name)
    dtype = dtype_for(o, coll)
    size_plan = plan_size(coll, size, rc.nranks, dtype, False)
    iterations, warmup = counts_for(o, coll, size_plan.size_bytes)
    settings = engine.LoopSettings(iterations=iterations, warmup=warmup, check=o.check, first_call=False)
    index = {rank: i for i, rank in enumerate(test.members)}
    passes = max(1, o.pair_repeats)
    repeats: list[list[list[float | None]]] = [[[None] * len(test.members) for _ in test.members]
                                               for _ in range(passes)]
    check_errors, loop = 0, None
    started = time.perf_counter()
    for number, (repeat, round_pairs) in enumerate(((r, p) for r in range(passes) for p in test.schedule), 1):
        matrix = repeats[repeat]
        partner = {a: (b, True) for a, b in round_pairs} | {b: (a, False) for a, b in round_pairs}
        peer, initiator = partner.get(rc.rank, (None, False))
        ctx = Context(rank=rc.rank, nranks=rc.nranks, window=o.window, peer=peer, initiator=initiator)
        where = f"pairs {metric.name} round {number}/{len(test.schedule) * passes}"
        rc.begin(f"{where} at {size_plan.size_bytes} B", where)
        pool = rc.transport.pool(size_plan, dtype, 1, True, o.huge_pages)
        try:
            measured = measure_on_pool(rc, coll, ctx, pool, size_plan.size_bytes, settings, agree_max=lambda v: v,
                                       timing=initiator)
            m, loop = measured.measurement, measured.loop
        finally:
            pool.close()
        check_errors += m.check_errors or 0
        cells = rc.reducer.gather((peer, float(np.median(m.samples_us))) if initiator else None)
        for rank, cell in enumerate(cells or ()):
            if cell is not None:
                i, j = index[rank], index[cell[0]]
                matrix[i][j] = matrix[j][i] = metric.cell(size_plan.size_bytes, cell[1])
    check = ("pass" if agree.sum_of(rc.reducer, check_errors) == 0 else "fail") if o.check else None
    if rc.rank != 0:
        return None, check
    matrix = median_matrix(repeats) if passes > 1 else repeats[0]
    values = [v for i, row in enumerate(matrix) for j, v in enumerate(row) if j > i and v is not None]
    record = build.pairs_record(
        run_id=rc.run_id, metric=metric.name, plan=size_plan, dtype=dtype, opts=o, nranks=rc.nranks,
        iterations=iterations, warmup=warmup, loop=build.LoopFacts.of(loop), check=check,
        latency_us=_latency_over_pairs([metric.latency_us(size_plan.size_bytes, v) for v in values]),
        matrix_fields=_matrix_fields(test, metric, matrix, repeats if passes > 1 else None), wall_s=round(time.perf_counter() - started, 4),
        cycle=rc.cycle)
    return record, check


def _latency_over_pairs(lat_values: list[float]) -> dict:
    """Statistics over the pairs' cells, each the p50 latency of that pair (us)."""
    return {"avg": float(np.mean(lat_values)), "min": min(lat_values), "max": max(lat_values),
            "p50": float(np.median(lat_values)), "p10": float(np.percentile(lat_values, 10)),
            "p90": float(np.percentile(lat_values, 90)), "p99": float(np.percentile(lat_values, 99)),
            "samples": len(lat_values), "over": "pairs (each the p50 of its iterations)"}


def _matrix_fields(test: Plan, metric: Metric, matrix: list[list[float | None]],
                   repeats: list[list[list[float | None]]] | None = None) -> dict:
    """The pairs-only fields of the record: the matrix (the passes' median), its labels, each pass's matrix, both
    outlier rules and what they flag."""
    return {
        "unit": test.unit, "labels": test.labels, "participant_ranks": test.members,
        "matrix_unit": metric.matrix_unit, "matrix": matrix,
        "schedule": "serial" if test.serial else "round-robin", "rounds": len(test.schedule),
        **({"repeats": repeats} if repeats else {}),
        **flag_matrix(matrix, test.labels, metric.higher_is_worse, repeats=repeats),
    }

"""The job beside the curve: what a job's collectives achieved (an imported NCCL Inspector dump) against the
benchmark's measured busbw of the same collective and group size.

A job's run is one imported by ``microbench import nccl-inspector`` (its ``source.tool``). Per job result
(collective, size, group): the busbw of its median operation (from the p50 of its operations' times) with the
p10..p90 band of its operations, and the benchmark's busbw at that size from the newest measured run of the
same collective and rank count: the measured point at that size, else the straight line between the two
measured sizes around it on a log-size axis; outside the measured sizes, none. ``share`` = job / benchmark.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from microbench.results.columns import Table
from microbench.results.load import run_time

JOB_TOOLS = ("nccl-inspector",)


@dataclass
class JobPoint:
    benchmark: str
    ranks: int
    size: int
    operations: int | None
    job_gbps: float | None  #: busbw of the median operation
    job_band: tuple[float, float] | None  #: busbw of the p90 and p10 operation times
    curve_gbps: float | None
    curve_run: int | None
    how: str  #: "measured at this size", "between 1 MiB and 2 MiB", or why there is none
    share: float | None


def is_job(table: Table, run: int) -> bool:
    source = table.runs[run].meta.get("source")
    return isinstance(source, dict) and source.get("tool") in JOB_TOOLS


def job_runs(table: Table) -> list[int]:
    return [i for i in table.used_runs() if is_job(table, i)]


def _finite(values: np.ndarray, row: int) -> float | None:
    value = float(values[row])
    return value if math.isfinite(value) else None


def curve_at(sizes: list[int], values: list[float], size: int) -> tuple[float | None, str]:
    """The curve's value at ``size``: measured, or between the two measured sizes around it (log size)."""
    if size in sizes:
        return values[sizes.index(size)], "measured at this size"
    at = bisect.bisect(sizes, size)
    if at == 0 or at == len(sizes):
        return None, "outside the benchmark's measured sizes"
    lo, hi = sizes[at - 1], sizes[at]
    t = (math.log(size) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return values[at - 1] + t * (values[at] - values[at - 1]), f"between its {lo} B and {hi} B points"


def _curves(table: Table, busbw: np.ndarray) -> dict:
    """(benchmark, ranks) -> (run, sizes, busbw) of the newest measured (not imported-job) run."""
    best: dict = {}
    for row in range(len(table.run)):
        run = int(table.run[row])
        if is_job(table, run) or not math.isfinite(busbw[row]):
            continue
        key = table.configs[table.config[row]]
        ident = (key.get("benchmark"), key.get("ranks"))
        when = run_time(table.runs[run])
        stamp = when.timestamp() if when else -1.0
        found = best.get(ident)
        if found is None or stamp > found[0] or (stamp == found[0] and run > found[1]):
            best[ident] = (stamp, run, {})
            found = best[ident]
        if found[1] == run:
            found[2].setdefault(int(table.size[row]), float(busbw[row]))
    return {k: (run, sorted(points), [points[s] for s in sorted(points)]) for k, (_, run, points) in best.items()}


def job_points(table: Table) -> list[JobPoint]:
    """Every job result beside its benchmark curve (none when no job run was read)."""
    jobs = set(job_runs(table))
    if not jobs:
        return []
    busbw = table.values("busbw", "avg")
    median = table.values("busbw", "p50") if "p50" in table.latency else busbw
    low = table.values("busbw", "p90") if "p90" in table.latency else None
    high = table.values("busbw", "p10") if "p10" in table.latency else None
    curves = _curves(table, busbw)
    out = []
    for row in range(len(table.run)):
        if int(table.run[row]) not in jobs:
            continue
        key = table.configs[table.config[row]]
        benchmark, ranks, size = key.get("benchmark"), key.get("ranks"), int(table.size[row])
        job = _finite(median, row)
        band = (_finite(low, row), _finite(high, row)) if low is not None and high is not None else None
        curve = curves.get((benchmark, ranks))
        if curve is None:
            value, how, run = None, f"no measured {benchmark} on {ranks} ranks among the results", None
        else:
            run = curve[0]
            value, how = curve_at(curve[1], curve[2], size)
        share = job / value if job is not None and value else None
        ops = table.numbers.get("iterations")
        out.append(JobPoint(benchmark, ranks, size, None if ops is None else _count(ops, row), job,
                            band if band and None not in band else None, value, run, how, share))
    out.sort(key=lambda p: (p.benchmark, p.ranks, p.size))
    return out


def _count(values: np.ndarray, row: int) -> int | None:
    value = float(values[row])
    return int(value) if math.isfinite(value) else None

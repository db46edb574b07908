"""Latency over time across many runs: a table (one row per run, by start time) and optionally a figure.

Each column is one configuration (benchmark, size, ranks, backend, options); each cell the run's p50
latency (--stat, --metric to change). Runs are ordered by the start time in their run line. The MPI
library column (and dotted lines in the figure) show where the library changed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from microbench.errors import UsageError
from microbench.gate import keys, select
from microbench.gate.columns import RunInfo, Table, per_run_medians
from microbench.gate.keys import ConfigKey
from microbench.gate.load import benchmark_names, load_table, mpi_library, run_label, run_time
from microbench.gate.metrics import LATENCY_STATS, METRICS, UNITS, check_stat, default_stat, explain, label
from microbench.gate.table import num, render
from microbench.sizes import format_size, parse_sizes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="FILES|DIR", help="JSONL result files or directories")
    p.add_argument("-b", "--benchmark", action="append", metavar="NAME",
                   help="benchmarks to follow (repeat or comma-separate; pairs: the pairwise link test); "
                        "default every one found")
    p.add_argument("-m", "--sizes", default="8", metavar="SIZES",
                   help="message sizes to follow (size grammar; default 8: small-message latency)")
    p.add_argument("--metric", choices=METRICS, default="latency", help="latency (default), busbw or algbw")
    p.add_argument("--stat", choices=LATENCY_STATS, metavar="STAT",
                   help="latency statistic (default p50 for latency, avg for bandwidth)")
    p.add_argument("-o", "--figure", metavar="FILE.png", help="also draw the history (PNG or SVG by suffix)")
    p.add_argument("--json", action="store_true", help="print the history as JSON instead of the table")
    select.add_arguments(p)


def collect(table: Table, sizes: list[int], metric: str, stat: str
            ) -> tuple[list[RunInfo], list[ConfigKey], dict[tuple[int, ConfigKey], float]]:
    """(runs by start time, columns small sizes first, (run position, column) -> the run's value)."""
    order = sorted(range(len(table.runs)), key=lambda i: _time_order(table.runs[i]))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    values = table.values(metric, stat)
    rows = np.flatnonzero(table.size_mask(sizes) & np.isfinite(values))
    configs, runs, medians = per_run_medians(table.config[rows], position[table.run[rows]], values[rows])
    cells = {(run, table.configs[config]): value
             for config, run, value in zip(configs.tolist(), runs.tolist(), medians.tolist())}
    columns = sorted({table.configs[c] for c in set(configs.tolist())}, key=ConfigKey.sort_key)
    return [table.runs[i] for i in order], columns, cells


def _time_order(run: RunInfo) -> tuple:
    when = run_time(run)
    return (when is None, when.timestamp() if when else 0, run_label(run))


def column_labels(columns: list[ConfigKey]) -> list[str]:
    """``benchmark size`` plus the options that tell apart columns of the same benchmark and size."""
    out = []
    for key in columns:
        twins = [k for k in columns if (k.benchmark, k.size_bytes) == (key.benchmark, key.size_bytes)]
        extra = keys.describe_options(key, keys.varying_options(twins)) if len(twins) > 1 else ""
        out.append(f"{key.benchmark} {format_size(key.size_bytes)}" + (f" {extra}" if extra else ""))
    return out


def main(args) -> int:
    stat = check_stat(args.stat) if args.stat else default_stat(args.metric)
    chosen = benchmark_names(args.benchmark)
    benchmarks = set(chosen) if chosen else None
    sizes = parse_sizes(args.sizes)
    table = load_table(args.results, stats=[stat], selection=select.Selection.from_args(args),
                       keep=lambda key: benchmarks is None or key.benchmark in benchmarks)
    ordered, columns, values = collect(table, sizes, args.metric, stat)
    if not columns:
        present = sorted(set(table.size.tolist()) - {-1})
        raise UsageError(f"no results at sizes {args.sizes}" + (f" of {', '.join(sorted(benchmarks))}" if benchmarks
                         else "") + f"; sizes present: {', '.join(format_size(s) for s in present[:12]) or 'none'}"
                         + (" ..." if len(present) > 12 else ""))
    labels = column_labels(columns)
    if args.figure:
        from microbench.plotting import check_path

        check_path(args.figure)
    if args.json:
        json.dump(as_json(ordered, columns, labels, values, args.metric, stat), sys.stdout, indent=1)
        print()
    else:
        print("\n".join(report_lines(ordered, columns, labels, values, args.metric, stat)))
    if args.figure:
        path = draw_figure(ordered, columns, labels, values, args.metric, stat, args.figure)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _used_runs(ordered: list[RunInfo], columns: list[ConfigKey], values: dict) -> list[int]:
    return [i for i in range(len(ordered)) if any((i, k) in values for k in columns)]


def as_json(ordered, columns, labels, values, metric, stat) -> dict:
    return {"metric": metric, "stat": stat, "unit": UNITS[metric], "how": explain(metric, stat),
            "series": [{"label": lab, "config": key.as_dict(),
                        "points": [{"time_utc": ordered[i].meta.get("time_utc"), "run_id": ordered[i].run_id,
                                    "mpi": mpi_library(ordered[i]), "value": values[(i, key)]}
                                   for i in range(len(ordered)) if (i, key) in values]}
                       for key, lab in zip(columns, labels)]}


def report_lines(ordered, columns, labels, values, metric, stat) -> list[str]:
    used = _used_runs(ordered, columns, values)
    lines = [f"# microbench history: {len(used)} run(s); each cell: {label(metric, stat)} of that run",
             f"# {explain(metric, stat)}"]
    common = keys.common_options(columns)
    if common != "-":
        lines.append(f"# common options: {common}; ranks {'/'.join(sorted({str(k.get('ranks')) for k in columns}))}")
    rows, previous = [], None
    for i in used:
        run = ordered[i]
        when = run_time(run)
        lib = mpi_library(run)
        marker = "*" if previous is not None and lib != previous else ""
        previous = lib
        rows.append([when.strftime("%Y-%m-%dT%H:%M:%SZ") if when else "?", run_label(run), marker + lib,
                     *[num(values.get((i, k))) for k in columns]])
    lines += render(["time (UTC)", "run", "MPI", *labels], rows, left=[0, 1, 2])
    if any(r[2].startswith("*") for r in rows):
        lines.append("# *: the MPI library changed from the run before")
    return lines


def draw_figure(ordered, columns, labels, values, metric, stat, path):
    from microbench.plotting import history

    series, changes, previous = [], [], None
    for key, lab in zip(columns, labels):
        points = [(run_time(ordered[i]), values[(i, key)]) for i in range(len(ordered))
                  if (i, key) in values and run_time(ordered[i])]
        series.append((lab, points))
    for i in _used_runs(ordered, columns, values):
        when, lib = run_time(ordered[i]), mpi_library(ordered[i])
        if when and previous is not None and lib != previous:
            changes.append((when, lib))
        previous = lib if when else previous
    title = f"{label(metric, stat)} over time"
    return history.draw(series, path, label(metric, stat), title, changes, note=explain(metric, stat),
                        log=True)

"""Compare new runs against baseline runs: ratio of medians per configuration, with a confidence interval.

Each run is one sample (launch-to-launch variance dominates small messages): a run's value is its p50
latency by default. ratio = median(new) / median(baseline); the interval is distribution-free
(Mann-Whitney / Hodges-Lehmann over runs). A regression is a ratio beyond --threshold in the bad
direction (latency up, bandwidth down) whose interval excludes 1. With too few runs to judge (at 95 %:
fewer than 4 and 4, 3 and 5, 2 and 8 or 1 and 39 runs) a change beyond the threshold is reported as
"regression?" and fails unless --allow-unconfirmed. Exit 1 on a regression, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from microbench.errors import UsageError
import numpy as np

from microbench.gate import intervals, keys
from microbench.gate import select as select_runs
from microbench.gate.compare import IMPROVED, IMPROVED_UNCONFIRMED, NOISE, OK, REGRESSION, UNCONFIRMED, \
    Comparison, compare
from microbench.gate.columns import RunInfo, Table
from microbench.gate.load import benchmark_names, load_table, mpi_library, time_span
from microbench.gate.metrics import LATENCY_STATS, METRICS, UNITS, check_stat, default_stat, explain, \
    higher_is_better
from microbench.gate.table import num, render
from microbench.sizes import format_size, parse_sizes

_SHOWN_VERDICT = {REGRESSION: "REGRESSION", UNCONFIRMED: "regression?", NOISE: "noise", OK: "ok",
                  IMPROVED: "improved", IMPROVED_UNCONFIRMED: "improved?"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", nargs="+", required=True, metavar="FILE",
                   help="baseline JSONL files or directories (each run is one sample)")
    p.add_argument("--new", nargs="+", required=True, metavar="FILE", help="new JSONL files or directories")
    p.add_argument("--threshold", default="5%", type=parse_threshold, metavar="PCT",
                   help="smallest change that counts: a percentage (5%%) or a fraction (0.05); default 5%%")
    p.add_argument("--metric", choices=METRICS, default="latency",
                   help="latency (a rise is a regression) or busbw/algbw (a fall is); default latency")
    p.add_argument("--stat", choices=LATENCY_STATS, metavar="STAT",
                   help=f"latency statistic per run ({', '.join(LATENCY_STATS)}); default p50 for latency, "
                        "avg for bandwidth (the recorded algbw/busbw)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="C",
                   help="confidence of the interval, between 0.5 and 1 (default 0.95)")
    p.add_argument("-b", "--benchmark", action="append", metavar="NAME",
                   help="only these benchmarks (repeat or comma-separate; pairs: the pairwise link test)")
    p.add_argument("-m", "--sizes", metavar="SIZES", help="only these sizes (size grammar, e.g. 8:4K)")
    p.add_argument("--allow-unconfirmed", action="store_true",
                   help="exit 0 when changes beyond the threshold could not be judged for lack of runs")
    p.add_argument("--changes-only", action="store_true", help="table: leave out rows whose verdict is ok")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    select_runs.add_arguments(p)


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05 (a bare number must be a fraction below 1)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"bad --threshold {text!r}: give a percentage such as 5% or a fraction such as 0.05") \
            from None
    if not raw.endswith("%") and value >= 1:
        raise UsageError(f"bad --threshold {text!r}: a bare number is a fraction (0.05 = 5 %); write {raw}% "
                         "for a percentage")
    if not value > 0:
        raise UsageError(f"bad --threshold {text!r}: must be above 0")
    return value


def _selector(args):
    """(keep: which configurations to read, select: which rows of a table to compare)."""
    chosen = benchmark_names(args.benchmark)
    names = set(chosen) if chosen else None
    sizes = parse_sizes(args.sizes) if args.sizes else None

    def keep(key) -> bool:
        return names is None or key.benchmark in names

    def select(table: Table) -> np.ndarray:
        return table.size_mask(sizes) if sizes is not None else np.ones(len(table), dtype=bool)
    return keep, select


def main(args) -> int:
    if not 0.5 <= args.confidence < 1:
        raise UsageError(f"--confidence must be from 0.5 up to 1 (got {args.confidence})")
    stat = check_stat(args.stat) if args.stat else default_stat(args.metric)
    keep, select = _selector(args)
    chosen = select_runs.Selection.from_args(args)
    baseline_table = load_table(args.baseline, "baseline", [stat], chosen, keep)
    new_table = load_table(args.new, "new", [stat], select_runs.Selection.from_args(args), keep)
    result = compare(baseline_table, new_table, args.metric, stat, args.threshold, args.confidence, select)
    baseline, new = baseline_table.runs, new_table.runs
    if not result.rows:
        raise UsageError("nothing to compare: no configuration (benchmark, size, ranks, backend, options) "
                         "was measured on both sides")
    failing = result.count(REGRESSION) + (0 if args.allow_unconfirmed else result.count(UNCONFIRMED))
    code = 1 if failing else 0
    if args.json:
        json.dump(as_json(result, baseline, new, args, code), sys.stdout, indent=1)
        print()
    else:
        print("\n".join(report_lines(result, baseline, new, args)))
    return code


def _side(runs: list[RunInfo], files: list[str]) -> dict:
    return {"files": list(files), "run_ids": [r.run_id for r in runs],
            "time_utc": [r.meta.get("time_utc") for r in runs]}


def as_json(result: Comparison, baseline: list[RunInfo], new: list[RunInfo], args, code: int) -> dict:
    return {
        "metric": result.metric, "stat": result.stat, "threshold": result.threshold,
        "confidence": result.confidence, "higher_is_better": higher_is_better(result.metric),
        "method": "ratio of medians of per-run values; distribution-free (Mann-Whitney/Hodges-Lehmann) "
                  "confidence interval over runs; regression = beyond threshold and interval excludes 1",
        "baseline": _side(baseline, args.baseline), "new": _side(new, args.new),
        "summary": {v: result.count(v) for v in _SHOWN_VERDICT},
        "exit_status": code,
        "rows": [r.as_dict() for r in result.rows],
        "only_baseline": [k.as_dict() for k in result.only_baseline],
        "only_new": [k.as_dict() for k in result.only_new],
    }


def report_lines(result: Comparison, baseline: list[RunInfo], new: list[RunInfo], args) -> list[str]:
    conf = f"{result.confidence * 100:g} %"
    worse = "falls" if higher_is_better(result.metric) else "rises"
    need = intervals.min_runs(result.confidence)
    lines = [
        f"# microbench compare: baseline {len(baseline)} run(s) ({time_span(baseline)}, "
        f"{', '.join(sorted({mpi_library(r) for r in baseline}))}), new {len(new)} run(s) ({time_span(new)}, "
        f"{', '.join(sorted({mpi_library(r) for r in new}))})",
        f"# per-run value: {explain(result.metric, result.stat)}; ratio = median(new) / median(baseline)",
        f"# {conf} CI: distribution-free over runs (Mann-Whitney / Hodges-Lehmann); significant = CI excludes 1",
        f"# REGRESSION: {result.metric} {worse} by more than {result.threshold * 100:g} % and significant; "
        f"regression?: beyond the threshold but too few runs to judge (at {conf} a side needs >= {need} runs "
        f"when the other has as many); noise: beyond the threshold, CI holds 1",
    ]
    shared = {r.run_id for r in baseline if r.run_id} & {r.run_id for r in new if r.run_id}
    if shared:
        lines.append(f"# note: {len(shared)} run(s) are on both sides: {', '.join(sorted(shared)[:5])}")
    shown = keys.varying_options(r.key for r in result.rows)
    common = keys.common_options([r.key for r in result.rows])
    if common != "-":
        lines.append(f"# common options: {common}")
    unit = UNITS[result.metric]
    headers = ["size", "benchmark", "ranks", "backend", *(["options"] if _extra(shown) else []),
               f"baseline({unit})", "runs", f"new({unit})", "runs", "ratio", f"{conf} CI", "verdict"]
    rows = []
    for r in result.rows:
        if args.changes_only and r.verdict == OK:
            continue
        iv = r.interval
        rows.append([format_size(r.key.size_bytes), r.key.benchmark, str(r.key.get("ranks")),
                     str(r.key.get("backend")), *([keys.describe_options(r.key, _extra(shown))] if _extra(shown) else []),
                     num(r.baseline_median), str(len(r.baseline)), num(r.new_median), str(len(r.new)),
                     f"{r.ratio:.3f}", f"[{iv.low:.3f}, {iv.high:.3f}]" if iv else "too few runs",
                     _SHOWN_VERDICT[r.verdict]])
    left = {1, 3, *([4] if _extra(shown) else []), len(headers) - 1}
    lines += render(headers, rows, left=sorted(left))
    for title, only in (("only in baseline", result.only_baseline), ("only in new", result.only_new)):
        if only:
            names = ", ".join(f"{k.benchmark} {format_size(k.size_bytes)}" for k in only[:10])
            lines.append(f"# note: {len(only)} configuration(s) {title}: {names}{' ...' if len(only) > 10 else ''}")
    summary = ", ".join(f"{result.count(v)} {_SHOWN_VERDICT[v]}" for v in _SHOWN_VERDICT if result.count(v))
    failing = result.count(REGRESSION) + (0 if args.allow_unconfirmed else result.count(UNCONFIRMED))
    lines.append(f"# {len(result.rows)} configuration(s) compared: {summary} -> "
                 f"{'FAIL' if failing else 'PASS'}")
    return lines


def _extra(shown: list[str]) -> list[str]:
    return [n for n in shown if n not in ("ranks", "backend")]

"""Compare new runs against baseline runs: ratio of medians per configuration, judged over the whole comparison.

Each run is one sample (launch-to-launch variance dominates small messages): a run's value is its p50
latency by default. ratio = median(new) / median(baseline). Per configuration a t-test on log run values
whose variance allows for the correlation of back-to-back runs (measured from the runs, or
--run-correlation); with --lookback DAYS the new runs are judged against the spread between the
baseline's last DAYS days. The p-values of all configurations are Holm-adjusted: a comparison reports a
false REGRESSION with probability at most 1 - --confidence, however many configurations it holds.
A regression is a ratio beyond --threshold in the bad direction that is significant after adjustment.
One new run against 3 or more baseline runs (or the other way) is judged against the many runs' spread.
Per benchmark it says the smallest change it would have flagged with 90 % probability, and with --plan PCT how
many runs a side a change of PCT needs on these runs' spread.

Three outcomes: FAIL (exit 1) on a REGRESSION; PASS (exit 0) only when no REGRESSION was seen and every
configuration would have seen a change of --must-see with 90 % probability; otherwise INCONCLUSIVE (exit 4, or
what --inconclusive-exit says), saying what it could see and how many runs a side would see --must-see, and
also when REGRESSIONs came with a change of the machine's recorded state (other processes' load). Exit 2 on
bad input, 3 on an internal error (a bug, never a verdict). See docs/regressions.md.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from microbench.errors import UsageError
from microbench.gate import compare_power as power
from microbench.gate import outcome
from microbench.gate.compare import UNCONFIRMED, Comparison, compare, untested_remedy
from microbench.gate.compare_outcome import decide
from microbench.gate.compare_text import METHOD, SHOWN_VERDICT, final_word, geometric_means, text_lines
from microbench.records.jsonout import dump_strict
from microbench.results import selection
from microbench.results.columns import RunInfo, Table
from microbench.results.load import benchmark_names, load_table, run_time
from microbench.results.metrics import LATENCY_STATS, METRICS, check_stat, default_stat, higher_is_better
from microbench.units import parse_sizes


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
    p.add_argument("--lookback", type=int, metavar="DAYS",
                   help="baseline = the runs of the last DAYS days (UTC, with runs) before the new runs start; "
                        "the new runs are judged against the spread between those days (nightly history)")
    p.add_argument("--run-correlation", type=parse_rho, default=None, metavar="RHO",
                   help="lag-1 correlation of back-to-back runs, 0 to 0.9 (default: measured from the runs)")
    p.add_argument("--must-see", type=lambda t: parse_threshold(t, "--must-see"), metavar="PCT",
                   help="a PASS needs every configuration to have been able to see a change of PCT (flagged with 90 %% "
                        "probability); default the larger of 25%% and twice --threshold")
    outcome.add_argument(p)
    p.add_argument("--fail-unconfirmed", action="store_true",
                   help="kept for old scripts: the same as --inconclusive-exit 1")
    p.add_argument("--allow-unconfirmed", action="store_true",
                   help="kept for old scripts: does nothing")
    p.add_argument("--plan", type=lambda t: parse_threshold(t, "--plan"), metavar="PCT",
                   help="also say how many runs a side would flag a change of PCT (e.g. 25%%) with 90 %% probability "
                        "on these runs' spread, per benchmark")
    p.add_argument("--table", action="store_true",
                   help="also a table per benchmark: geometric mean of the ratios across sizes")
    p.add_argument("--changes-only", action="store_true", help="table: leave out rows whose verdict is ok")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    selection.add_arguments(p)


def parse_threshold(text: str, option: str = "--threshold") -> float:
    """``5%`` or ``0.05`` -> 0.05 (a bare number must be a fraction below 1); errors name ``option``."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"bad {option} {text!r}: give a percentage such as 5% or a fraction such as 0.05") \
            from None
    if not raw.endswith("%") and value >= 1:
        raise UsageError(f"bad {option} {text!r}: a bare number is a fraction (0.05 = 5 %); write {raw}% "
                         "for a percentage")
    if not value > 0 or not math.isfinite(value):
        raise UsageError(f"bad {option} {text!r}: must be a finite number above 0")
    return value


def parse_rho(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 0.9:
        raise UsageError(f"bad --run-correlation {text!r}: give a number from 0 to 0.9")
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
    if args.lookback is not None and args.lookback < 3:
        raise UsageError(f"--lookback needs at least 3 days to measure their spread (got {args.lookback})")
    stat = check_stat(args.stat) if args.stat else default_stat(args.metric)
    keep, select = _selector(args)
    baseline_table = load_table(args.baseline, "baseline", [stat], selection.Selection.from_args(args), keep)
    new_table = load_table(args.new, "new", [stat], selection.Selection.from_args(args), keep)
    window = lookback_mask(baseline_table, new_table, args.lookback) if args.lookback else None
    must_see = getattr(args, "must_see", None)
    if must_see is not None and must_see <= args.threshold:
        raise UsageError(f"--must-see {must_see * 100:g}% must be above --threshold {args.threshold * 100:g}%: "
                         "only changes beyond the threshold are flagged")
    result = compare(baseline_table, new_table, args.metric, stat, args.threshold, args.confidence, select,
                     by_day=bool(args.lookback), rho=args.run_correlation, baseline_rows=window,
                     plan=getattr(args, "plan", None), must_see=must_see)
    if not result.rows:
        raise UsageError("nothing to compare: no configuration (benchmark, size, ranks, backend, options) "
                         "was measured on both sides" + (" within the lookback window" if args.lookback else ""))
    code = outcome.exit_status(decide(result).outcome, inconclusive_exit(args))
    used = select(baseline_table) & (window if window is not None else True)
    baseline = [baseline_table.runs[i] for i in baseline_table.used_runs(np.flatnonzero(used))]
    if args.json:
        dump_strict(as_json(result, baseline, new_table.runs, args, code))
    else:
        print("\n".join(text_lines(result, baseline, new_table.runs, args, code)))
    return code


def inconclusive_exit(args) -> int:
    """The exit status of INCONCLUSIVE: --inconclusive-exit, or 1 with the old --fail-unconfirmed."""
    return 1 if getattr(args, "fail_unconfirmed", False) else getattr(args, "inconclusive_exit", 4)


def lookback_mask(baseline: Table, new: Table, days: int) -> np.ndarray:
    """Baseline rows of runs on the last ``days`` UTC days that have runs, before the new runs start."""
    starts = [t for t in (run_time(r) for r in new.runs) if t]
    first = min(starts) if starts else None
    times = [run_time(r) for r in baseline.runs]
    eligible = [t for t in times if t and (first is None or t < first)]
    chosen = set(sorted({t.date() for t in eligible})[-days:])
    per_run = np.array([bool(t and t.date() in chosen and (first is None or t < first)) for t in times] or [False])
    return per_run[baseline.run] if len(baseline) else np.zeros(0, dtype=bool)


def _side(runs: list[RunInfo], files: list[str]) -> dict:
    return {"files": list(files), "run_ids": [r.run_id for r in runs],
            "time_utc": [r.meta.get("time_utc") for r in runs]}


def as_json(result: Comparison, baseline: list[RunInfo], new: list[RunInfo], args, code: int) -> dict:
    return {
        "metric": result.metric, "stat": result.stat, "threshold": result.threshold,
        "confidence": result.confidence, "higher_is_better": higher_is_better(result.metric),
        "method": METHOD, "error_control": "Holm: family-wise error rate <= 1 - confidence over all rows",
        "run_correlation": result.rho, "run_correlation_source": result.rho_source,
        "interval_confidence": result.interval_confidence, "lookback_days": args.lookback,
        "baseline": _side(baseline, args.baseline), "new": _side(new, args.new),
        "summary": {v: result.count(v) for v in SHOWN_VERDICT},
        **decide(result).as_dict(), "outcome_text": final_word(result, code), "must_see": result.must_see,
        "machine": result.machine,
        "untested": {"count": len(result.untested), "worse": result.count(UNCONFIRMED),
                     "better": len(result.untested) - result.count(UNCONFIRMED), "remedy": untested_remedy(result)},
        "exit_status": code,
        "power": power.POWER, "plan_change": result.plan,
        "could_see": [g.as_dict() for g in power.per_benchmark(
            result.rows, [r.detectable for r in result.rows],
            [r.runs_needed for r in result.rows] if result.plan is not None else None)],
        "rows": [r.as_dict() for r in result.rows],
        "geometric_means": [g.as_dict() for g in geometric_means(result)],
        "only_baseline": [k.as_dict() for k in result.only_baseline],
        "only_new": [k.as_dict() for k in result.only_new],
    }

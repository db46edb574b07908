"""Latency over time across many runs: a table (one row per run, by start time), steps, and a figure.

Each column is one configuration (benchmark, size, ranks, backend, options); each cell the run's p50
latency (--stat, --metric to change). Runs are ordered by the start time in their run line. The MPI
library column (and dotted lines in the figure) show where the library changed. In each column the
steps (``steps.detect``: a level that shifts at one run and stays) are listed with the run where they
start, the medians before and after, and what the runs recorded as changed at that run (MPI, package
versions, hosts, transport environment); the chance of any false step in the call, over all its series,
is at most 1 - --confidence, and is stated. Every series says its step(s), or "no step" with the smallest step
it would have found at its middle (90 %), or "too short" with the runs it needs. Per-launch values (temporary
paths, working directories, job ids) never explain a step (cluster/conditions.py lists what may); the
machine's recorded state (other processes' load) may, but never hides one.

--fail-on-step makes it a gate with three outcomes: FAIL (exit 1) on a step for the worse that starts where no
recorded condition and not the machine's state changed; INCONCLUSIVE (exit 4, or what --inconclusive-exit
says) on a step for the worse that came with a change of the machine's state, a series too short to judge, or
a series that could not have found a step of --must-see; PASS (exit 0) otherwise. Without --fail-on-step it
exits 0. 2 is bad input, 3 an internal error (a bug, never a verdict). The figure draws a rolling median and
band over the points and marks steps.
"""

from __future__ import annotations

import argparse
import sys

from microbench.errors import UsageError
from microbench.gate import history, outcome
from microbench.gate.compare_cli import parse_threshold
from microbench.gate.text import num, render
from microbench.records.jsonout import dump_strict
from microbench.results import keys
from microbench.results import selection
from microbench.results.columns import RunInfo
from microbench.results.load import benchmark_names, load_table, mpi_library, run_label, run_time
from microbench.results.metrics import LATENCY_STATS, METRICS, UNITS, check_stat, default_stat, explain, label
from microbench.units import format_size, parse_sizes


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
    p.add_argument("--lookback", type=int, metavar="DAYS", help="only the runs of the last DAYS days with runs")
    p.add_argument("--min-step", type=lambda text: parse_threshold(text, "--min-step"), default=0.05, metavar="PCT",
                   help="smallest step reported: medians this far apart (default 5%%)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="C",
                   help="the chance of any false step in the call, over all the series it judges, is at most "
                        "1 - C (default 0.95): a step is kept when its p-value x its series' split points x the "
                        "series judged is at most 1 - C")
    p.add_argument("--fail-on-step", action="store_true",
                   help="a gate: exit 1 (FAIL) on a step for the worse where no recorded condition and not the "
                        "machine's state changed; 4 (INCONCLUSIVE) where it could not tell; 0 (PASS) otherwise")
    p.add_argument("--must-see", type=lambda text: parse_threshold(text, "--must-see"), metavar="PCT",
                   help="with --fail-on-step, a PASS needs every series to have been able to find a step of PCT "
                        "(90 %%); default the larger of 25%% and twice --min-step")
    outcome.add_argument(p)
    selection.add_arguments(p)


def main(args) -> int:
    if not 0.5 <= args.confidence < 1:
        raise UsageError(f"--confidence must be from 0.5 up to 1 (got {args.confidence})")
    stat = check_stat(args.stat) if args.stat else default_stat(args.metric)
    chosen = benchmark_names(args.benchmark)
    benchmarks = set(chosen) if chosen else None
    sizes = parse_sizes(args.sizes)
    table = load_table(args.results, stats=[stat], selection=selection.Selection.from_args(args),
                       keep=lambda key: benchmarks is None or key.benchmark in benchmarks)
    hist = history.build(table, sizes, args.metric, stat, args.lookback)
    if not hist.columns:
        present = sorted(set(table.size.tolist()) - {-1})
        raise UsageError(f"no results at sizes {args.sizes}" + (f" of {', '.join(sorted(benchmarks))}" if benchmarks
                         else "") + f"; sizes present: {', '.join(format_size(s) for s in present[:12]) or 'none'}"
                         + (" ..." if len(present) > 12 else ""))
    hist.find_steps(args.min_step, 1 - args.confidence)
    if args.figure:
        from microbench.output_files import check_target
        from microbench.plotting import check_path

        check_target(check_path(args.figure))
    must_see = must_see_of(args)
    word, _ = hist.outcome(must_see)
    code = outcome.exit_status(word, args.inconclusive_exit) if args.fail_on_step else 0
    if args.json:
        dump_strict(as_json(hist, args, code))
    else:
        print("\n".join(text_lines(hist) + step_lines(hist, args, code)))
    if args.figure:
        path = draw_figure(hist, args.figure)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return code


def must_see_of(args) -> float:
    """--must-see, or the larger of 25 % and twice --min-step."""
    given = getattr(args, "must_see", None)
    return given if given is not None else max(0.25, 2 * args.min_step)


def _time(run: RunInfo) -> str:
    when = run_time(run)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when else "?"


def step_dict(hist: history.History, found: history.FoundStep) -> dict:
    run = hist.runs[found.run]
    column = hist.points(found.column)
    return {"run_id": run.run_id, "time_utc": _time(run), "previous_run_id": hist.runs[found.previous].run_id,
            "run_number": column.index(found.run) + 1, "runs": len(column),
            "median_before": found.step.before, "median_after": found.step.after, "ratio": found.step.ratio,
            "p": found.step.p, "test": found.step.test, "worse": found.worse, "changed": found.changed,
            "explained": found.explained, "machine": found.machine, "fails": found.fails}


def as_json(hist: history.History, args, code: int) -> dict:
    word, reasons = hist.outcome(must_see_of(args))
    return {"outcome": word if args.fail_on_step else None, "gate_outcome": word, "outcome_reasons": reasons,
            "must_see": must_see_of(args), "metric": hist.metric, "stat": hist.stat, "unit": UNITS[hist.metric], "how": explain(hist.metric, hist.stat),
            "steps_method": STEPS_METHOD, "min_step": args.min_step, "confidence": args.confidence,
            "false_steps": {"chance_per_call_at_most": round(hist.alpha, 12), "series_judged": hist.family,
                            "rule": rate_rule(hist)},
            "exit_status": code,
            "series": [{"label": lab, "config": key.as_dict(),
                        "points": [{"time_utc": hist.runs[i].meta.get("time_utc"), "run_id": hist.runs[i].run_id,
                                    "mpi": mpi_library(hist.runs[i]), "value": hist.values[(i, key)]}
                                   for i in hist.points(c)],
                        "runs": len(hist.points(c)), "too_short": c in hist.too_short,
                        "runs_needed": hist.too_short.get(c), "judged": c in hist.judged,
                        "findable_ratio_90": hist.findable.get(c),
                        "steps": [step_dict(hist, f) for f in hist.steps if f.column == c]}
                       for c, (key, lab) in enumerate(zip(hist.columns, hist.labels))]}


STEPS_METHOD = ("binary segmentation; each split judged by the Mann-Whitney rank test of the later runs against "
                "the earlier ones, or by Student's t on the log values where ranks cannot reach the level, kept "
                "when the medians differ by at least min_step and p x the series' split points x the series "
                "judged <= 1 - confidence")


def rate_rule(hist: history.History) -> str:
    """The error rule the call kept, in one line: the chance of any false step over all its series."""
    if not hist.family:
        return "false-step chance per call 0: no series has the runs for a step to be judged"
    return (f"false-step chance per call <= {hist.alpha * 100:g} % over {hist.family} series "
            f"(Bonferroni: each series {hist.alpha * 100:g} %/{hist.family}, shared by its split points)")


def text_lines(hist: history.History) -> list[str]:
    used = hist.used_runs()
    lines = [f"# microbench history: {len(used)} run(s); each cell: {label(hist.metric, hist.stat)} of that run",
             f"# {explain(hist.metric, hist.stat)}"]
    common = keys.common_options(hist.columns)
    if common != "-":
        lines.append(f"# common options: {common}; ranks "
                     f"{'/'.join(sorted({str(k.get('ranks')) for k in hist.columns}))}")
    starts = {(f.run, f.column) for f in hist.steps}
    # each column's cells as text in the order of ``used``: one pass over its arrays, not a lookup per cell
    where = {i: row for row, i in enumerate(used)}
    blank = num(None)
    columns = []
    for c in range(len(hist.columns)):
        runs, values = hist.column(c)
        text = [blank] * len(used)
        for i, v in zip(runs.tolist(), values.tolist()):
            text[where[i]] = num(v) + ("^" if (i, c) in starts else "")
        columns.append(text)
    rows, previous = [], None
    for row, i in enumerate(used):
        run = hist.runs[i]
        lib = mpi_library(run)
        marker = "*" if previous is not None and lib != previous else ""
        previous = lib
        rows.append([_time(run), run_label(run), marker + lib, *[col[row] for col in columns]])
    del columns
    lines += render(["time (UTC)", "run", "MPI", *hist.labels], rows, left=[0, 1, 2])
    if any(r[2].startswith("*") for r in rows):
        lines.append("# *: the MPI library changed from the run before")
    return lines


def step_lines(hist: history.History, args, code: int) -> list[str]:
    """One line per step (``^`` in the table marks where it starts), then the verdict."""
    lines = [f"# steps ({STEPS_METHOD}; min step {args.min_step * 100:g} %):", f"# {rate_rule(hist)}"]
    by_column: dict[int, list] = {}
    for found in hist.steps:
        by_column.setdefault(found.column, []).append(found)
    for c, lab in enumerate(hist.labels):
        if c in hist.too_short:
            lines.append(f"  {lab}: too short: {len(hist.points(c))} run(s), needs {hist.too_short[c]} for a step "
                         f"to be found")
        elif c not in by_column:
            ratio = hist.findable.get(c)
            seen = "" if ratio is None else f" (a step of {_ratio(ratio)} at its middle would have been found, 90 %)"
            lines.append(f"  {lab}: no step in {len(hist.points(c))} runs{seen}")
        for found in by_column.get(c, ()):
            lines.append(_step_line(hist, found))
    unexplained = sum(f.worse and not f.explained for f in hist.steps)
    word, reasons = hist.outcome(must_see_of(args))
    verdict = f"{word}" + (f": {'; '.join(reasons)}" if reasons and word == "INCONCLUSIVE" else "")
    lines.append(f"# {len(hist.steps)} step(s), {unexplained} for the worse with no recorded change"
                 + (f" -> {verdict} (--fail-on-step, exit {code})" if args.fail_on_step
                    else f"; as a gate (--fail-on-step): {verdict}"))
    return lines


def _ratio(ratio: float) -> str:
    return f"x{ratio:.2f}" if ratio <= 1000 else "x>1000"


def _step_line(hist: history.History, found: history.FoundStep) -> str:
    step = found.step
    what = "worse" if found.worse else "better"
    why = "; ".join(found.changed[:6]) + (" ..." if len(found.changed) > 6 else "") if found.changed \
        else "no recorded change"
    column = hist.points(found.column)
    machine = f"; {found.machine} (may explain it: not a FAIL, INCONCLUSIVE)" if found.machine and found.worse \
        and not found.changed else f"; {found.machine}" if found.machine else ""
    return (f"  {hist.labels[found.column]}: step at run {run_label(hist.runs[found.run])} "
            f"({_time(hist.runs[found.run])}, run {column.index(found.run) + 1} of {len(column)}): "
            f"{num(step.before)} -> {num(step.after)} {UNITS[hist.metric]}, x{step.ratio:.3f} ({what}, {step.test}, "
            f"p {step.p:.2g}); changed: {why}{machine}")


def draw_figure(hist: history.History, path):
    from microbench.plotting import history as figure

    series, libs, previous = [], [], None
    for c, lab in enumerate(hist.labels):
        key = hist.columns[c]
        points = [(run_time(hist.runs[i]), hist.values[(i, key)]) for i in hist.points(c) if run_time(hist.runs[i])]
        marks = [(run_time(hist.runs[f.run]), f.step.ratio) for f in hist.steps if f.column == c
                 and run_time(hist.runs[f.run])]
        series.append(figure.Line(lab, points, marks))
    for i in hist.used_runs():
        when, lib = run_time(hist.runs[i]), mpi_library(hist.runs[i])
        if when and previous is not None and lib != previous:
            libs.append((when, lib))
        previous = lib if when else previous
    title = f"{label(hist.metric, hist.stat)} over time"
    return figure.draw(series, path, label(hist.metric, hist.stat), title, libs,
                       note=explain(hist.metric, hist.stat), log=True)

"""The text of a comparison: header lines saying how each figure is computed, a row per configuration, and
(``--table``) a row per benchmark with the geometric mean of its ratios across sizes (as pyperf's
compare_to summarises a suite)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from microbench.gate import compare_power as power
from microbench.gate.compare import IMPROVED, IMPROVED_UNCONFIRMED, NOISE, OK, REGRESSION, UNCONFIRMED, Comparison
from microbench.gate.compare_outcome import decide
from microbench.gate.text import num, render
from microbench.results import keys, metrics
from microbench.results.columns import RunInfo
from microbench.results.keys import ConfigKey
from microbench.results.load import mpi_library, time_span
from microbench.results.metrics import UNITS, explain, higher_is_better
from microbench.units import format_size

SHOWN_VERDICT = {REGRESSION: "REGRESSION", UNCONFIRMED: "regression?", NOISE: "noise", OK: "ok",
                 IMPROVED: "improved", IMPROVED_UNCONFIRMED: "improved?"}
METHOD = ("ratio of medians of per-run values; Welch t-test on winsorized log run values with each side's "
          "variance inflated for the lag-1 correlation of back-to-back runs (AR(1)); a paired t on log ratios "
          "when the sides alternate in time; one run against 3 or more: against the many runs' spread (prediction); "
          "with a lookback, against the spread between days; Holm adjustment over all rows; regression = beyond "
          "threshold and adjusted p <= 1 - confidence")


@dataclass
class GeoMean:
    """The ratios of one benchmark's sizes (one size sweep: benchmark and options), summarised."""

    key: ConfigKey  #: the sweep (size None)
    sizes: int
    geomean: float  #: exp(mean(log ratio)) over the sizes
    low: float
    high: float
    verdicts: dict[str, int]

    def as_dict(self) -> dict:
        return {"config": self.key.as_dict(), "sizes": self.sizes, "geometric_mean_ratio": self.geomean,
                "min_ratio": self.low, "max_ratio": self.high, "verdicts": self.verdicts}


def geometric_means(result: Comparison) -> list[GeoMean]:
    groups: dict[ConfigKey, list] = {}
    for row in result.rows:
        groups.setdefault(row.key.without_size(), []).append(row)
    out = []
    for key, rows in groups.items():
        ratios = [r.ratio for r in rows]
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        out.append(GeoMean(key, len(rows), math.exp(sum(map(math.log, ratios)) / len(ratios)), min(ratios),
                           max(ratios), counts))
    return sorted(out, key=lambda g: (g.key.benchmark or "", g.key.sort_key()))


def header_lines(result: Comparison, baseline: list[RunInfo], new: list[RunInfo], lookback: int | None) -> list[str]:
    alpha = result.alpha
    worse = "falls" if higher_is_better(result.metric) else "rises"
    methods = sorted({r.test.method for r in result.rows if r.test})
    test = (f"the new runs against the spread between the baseline's {lookback} latest days (t, days - 1 df)"
            if lookback else "paired t on the log ratio of neighbouring runs (the sides alternate in time)"
            if methods == ["pairs"] else "the one run against the other side's spread (prediction t, n - 1 df)"
            if methods == ["prediction"] else "Welch t on log run values")
    return [
        f"# microbench compare: baseline {len(baseline)} run(s) ({time_span(baseline)}, "
        f"{', '.join(sorted({mpi_library(r) for r in baseline}))}), new {len(new)} run(s) ({time_span(new)}, "
        f"{', '.join(sorted({mpi_library(r) for r in new}))})",
        f"# per-run value: {explain(result.metric, result.stat)}; ratio = median(new) / median(baseline)",
        f"# test: {test}, variances x AR(1) factor for back-to-back runs, correlation {result.rho:.2f} "
        f"({result.rho_source}); p adjusted by Holm over {len(result.rows)} rows: P(any false REGRESSION) "
        f"<= {alpha * 100:g} %",
        f"# CI: ratio of geometric means at {result.interval_confidence * 100:.4g} % each (all rows together "
        f">= {result.confidence * 100:g} %)",
        f"# REGRESSION: {result.metric} {worse} by more than {result.threshold * 100:g} % and adjusted p <= "
        f"{alpha:g}; noise: beyond the threshold, not significant; regression?: beyond it, too few runs to test "
        "(2 a side, 1 against 3, or 3 days of lookback)",
        f"# PASS needs no REGRESSION and every configuration able to see a {result.must_see * 100:g} % "
        f"{'fall' if higher_is_better(result.metric) else 'rise'} (--must-see) with {power.POWER * 100:g} % "
        "probability; else INCONCLUSIVE (exit 4 unless --inconclusive-exit says 0 or 1); REGRESSION -> FAIL",
    ]


def text_lines(result: Comparison, baseline: list[RunInfo], new: list[RunInfo], args, code: int) -> list[str]:
    lines = header_lines(result, baseline, new, args.lookback)
    shared = {r.run_id for r in baseline if r.run_id} & {r.run_id for r in new if r.run_id}
    if shared:
        lines.append(f"# note: {len(shared)} run(s) are on both sides: {', '.join(sorted(shared)[:5])}")
    shown = [n for n in keys.varying_options(r.key for r in result.rows) if n not in ("ranks", "backend")]
    common = keys.common_options([r.key for r in result.rows])
    if common != "-":
        lines.append(f"# common options: {common}")
    unit = UNITS[result.metric]
    headers = ["size", "benchmark", "ranks", "backend", *(["options"] if shown else []),
               f"baseline({unit})", "runs", f"new({unit})", "runs", "ratio", "CI", "p(Holm)", "verdict"]
    rows = []
    for r in result.rows:
        if args.changes_only and r.verdict == OK:
            continue
        iv = r.interval
        base_runs = f"{len(r.baseline)}/{r.days}d" if r.days else str(len(r.baseline))
        rows.append([format_size(r.key.size_bytes) + ("*" if r.launch_bound else ""), r.key.benchmark, str(r.key.get("ranks")),
                     str(r.key.get("backend")), *([keys.describe_options(r.key, shown)] if shown else []),
                     num(r.baseline_median), base_runs, num(r.new_median), str(len(r.new)), f"{r.ratio:.3f}",
                     f"[{ratio_text(iv[0])}, {ratio_text(iv[1])}]" if iv else "too few runs",
                     "-" if r.p_adjusted is None else f"{r.p_adjusted:.2g}", SHOWN_VERDICT[r.verdict]])
    left = {1, 3, *([4] if shown else []), len(headers) - 1}
    lines += render(headers, rows, left=sorted(left))
    if getattr(args, "table", False):
        lines += [""] + geomean_lines(result)
    for title, only in (("only in baseline", result.only_baseline), ("only in new", result.only_new)):
        if only:
            names = ", ".join(f"{k.benchmark} {format_size(k.size_bytes)}" for k in only[:10])
            lines.append(f"# note: {len(only)} configuration(s) {title}: {names}{' ...' if len(only) > 10 else ''}")
    bound = [r for r in result.rows if r.launch_bound]
    if bound:
        lines.append(f"# note: * {metrics.LAUNCH_BOUND_ADVICE_SHORT}: " + ", ".join(
            f"{r.key.benchmark} {format_size(r.key.size_bytes)}" for r in bound[:10]) + (" ..." if len(bound) > 10 else ""))
    lines += could_see_lines(result)
    lines += machine_lines(result)
    summary = ", ".join(f"{result.count(v)} {SHOWN_VERDICT[v]}" for v in SHOWN_VERDICT if result.count(v))
    lines.append(f"# {len(result.rows)} configuration(s) compared: {summary} -> {final_word(result, code)}")
    return lines


def final_word(result: Comparison, code: int) -> str:
    """The outcome's words (``compare_outcome.decide``), with the exit status where it is not 0 or 1's usual."""
    decision = decide(result)
    return decision.text + (f" (exit {code})" if decision.outcome == "INCONCLUSIVE" else "")


def machine_lines(result: Comparison) -> list[str]:
    """The two sides' machine states, shown when they differ (or when the new runs are older)."""
    m = result.machine
    lines = []
    if m.get("change") or m.get("other_way"):
        lines.append(f"# machine: baseline {m['baseline']}; new {m['new']}: the machine's state changed "
                     "between the sides (a change in the results may be the machine's, not the code's)")
    if m.get("new_older"):
        lines.append("# note: the new runs are older than the baseline runs (check --baseline and --new)")
    return lines


def ratio_text(value: float) -> str:
    """A ratio with 3 decimals, ``>1000`` above 1000 and ``<0.001`` below 0.001 (a blind interval's ends)."""
    if not value <= 1000:
        return ">1000"
    if value < 0.001:
        return "<0.001"
    return f"{value:.3f}"


def could_see_lines(result: Comparison) -> list[str]:
    """Per benchmark: the smallest change flagged with 90 % probability (median and worst over its sizes) and,
    with a plan, the runs a side the planned change needs."""
    higher = higher_is_better(result.metric)
    bad = "fall" if higher else "rise"
    groups = power.per_benchmark(result.rows, [r.detectable for r in result.rows],
                                 [r.runs_needed for r in result.rows] if result.plan is not None else None)
    lines = [f"# could see: the smallest {result.metric} {bad} flagged with {power.POWER * 100:g} % probability "
             "(at the adjusted level, as the only change; from each row's own spread and runs), per benchmark as "
             "median / worst over its sizes"]
    for g, sweep_rows in zip(groups, _rows_by_sweep(result)):
        t = g.tested
        seen = f"{power.percent(statistics.median(t))} / {power.percent(t[-1])}" if t else "nothing (too few runs)"
        if len(t) < g.sizes and t:
            seen += f" ({g.sizes - len(t)} size(s) untestable)"
        line = f"#   {_sweep_name(g, groups)}: {seen}"
        if result.plan is not None:
            line += "; " + _plan_text(result, g, sweep_rows)
        lines.append(line)
    return lines


def _plan_text(result: Comparison, g: power.BenchmarkPower, rows: list) -> str:
    goal = f"{result.plan * 100:g} %"
    if result.plan <= result.threshold:
        return f"a {goal} change is within the {result.threshold * 100:g} % threshold: never flagged"
    if all(power.pooled_log_sd(r.baseline, r.new) is None for r in rows):
        return f"{goal}: spread unknown (1 run a side)"
    known = sorted(n for n in g.runs_needed if n is not None)
    if not known:
        return f"{goal} needs more than {power.MAX_PLAN_RUNS} runs a side"
    worst = f"{known[-1]}" if len(known) == g.sizes else f"more than {power.MAX_PLAN_RUNS}"
    return f"{goal} needs {power.median_runs(known)} / {worst} runs a side (median / worst size)"


def _rows_by_sweep(result: Comparison) -> list[list]:
    groups: dict = {}
    for r in result.rows:
        groups.setdefault(r.key.without_size(), []).append(r)
    return list(groups.values())


def _sweep_name(g: power.BenchmarkPower, groups: list[power.BenchmarkPower]) -> str:
    if sum(o.benchmark == g.benchmark for o in groups) == 1:
        return g.benchmark
    extra = ", ".join(f"{k}={v}" for k, v in g.sweep.items() if k not in ("benchmark", "size_bytes") and
                      len({str(o.sweep.get(k)) for o in groups if o.benchmark == g.benchmark}) > 1)
    return f"{g.benchmark} ({extra})"


def geomean_lines(result: Comparison) -> list[str]:
    """Per benchmark (size sweep): geometric mean of new/baseline across its sizes, range, verdicts."""
    means = geometric_means(result)
    shown = [n for n in keys.varying_options(g.key for g in means) if n not in ("size_bytes",)]
    rows = []
    for g in means:
        verdicts = ", ".join(f"{n} {SHOWN_VERDICT[v]}" for v, n in sorted(g.verdicts.items()))
        rows.append([g.key.benchmark, *([keys.describe_options(g.key, shown)] if shown else []), str(g.sizes),
                     f"{g.geomean:.3f}", f"{g.low:.3f} .. {g.high:.3f}", verdicts])
    headers = ["benchmark", *(["options"] if shown else []), "sizes", "geomean ratio", "range", "verdicts"]
    return ["# per benchmark: geometric mean of the ratios across its sizes (new / baseline)"] + \
        render(headers, rows, left=[0, 1, len(headers) - 1] if shown else [0, len(headers) - 1])

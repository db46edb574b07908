"""History: each configuration's value across the runs given, in start-time order, with the steps the gate
finds (``gate.history.build`` and ``History.find_steps``: ``microbench history``'s own numbers), one chart per
benchmark with a line per configuration (size and options).

Each point is one run's value of that configuration: its latency statistic (``--stat``, p50 by default; a
benchmark none of whose runs has it falls back to avg, and says so). Runs without a start time come last.
A dashed line marks where the MPI library changed from the run before; steps are listed under the chart
with the recorded conditions that changed where they start (a step nothing explains is what to look into).

Past ``MAX_POINTS`` runs a point is a bin of consecutive runs (as few runs per bin as keep the points
within ``MAX_POINTS``): its median over those runs' values, the band their p10..p90, the tooltip naming the
first and last run; the steps are still found on every run's value (the gate's own numbers).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from microbench.gate import history as gate_history
from microbench.report import svg
from microbench.report.figures import FALLBACK_STAT, benchmarks_in
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, el, notes, text_el
from microbench.results.columns import Table
from microbench.results.load import mpi_library, run_time
from microbench.units import format_size

MAX_TICKS = 10
MAX_POINTS = 50  #: points per history line, at most; more runs are binned
MIN_STEP, ALPHA = 0.05, 0.05  #: microbench history's defaults (--min-step 5 %, --confidence 0.95): a false step
#: in one benchmark's chart (all its configurations, one family) at most 5 % likely


def _when(run) -> str:
    t = run_time(run)
    return f"{t:%m-%d %H:%M}" if t else "no time"


def _day(run) -> str:
    t = run_time(run)
    return f"{t:%Y-%m-%d}" if t else "no time"


def build(table: Table, stat: str) -> gate_history.History:
    """The history of every configuration of ``table`` at every size, with its steps."""
    sizes = sorted(set(table.size.tolist()) - {-1})
    hist = gate_history.build(table, sizes, "latency", stat)
    hist.find_steps(MIN_STEP, ALPHA)
    return hist


def histories(loaded: Loaded, stat: str) -> Iterator[tuple[str, gate_history.History]]:
    """(benchmark, its history) one benchmark at a time: a history holds one value per run and
    configuration, so only one benchmark's are held at once."""
    table = loaded.table
    names = table.benchmarks()
    drawn = benchmarks_in(table)
    others = sorted({str(n) for n in names.tolist() if n is not None} - set(drawn))  # pairs: counted, not drawn
    for benchmark in [*drawn, *others]:
        yield benchmark, build(table.take(np.flatnonzero(names == benchmark)), stat)


def _step_lines(hist: gate_history.History, names: dict[int, str], columns: list[int]) -> list[str]:
    out = []
    for found in hist.steps:
        if found.column not in columns:
            continue
        why = ("conditions changed: " + "; ".join(found.changed)) if found.changed else "no recorded change"
        why += f"; {found.machine}" if found.machine else ""  # the machine's state changed with it (issue 39)
        out.append(f"step in {hist.labels[found.column]}: x{found.step.ratio:.3g} "
                   f"({found.step.before:.4g} -> {found.step.after:.4g} us) from {names[id(hist.runs[found.run])]}, "
                   f"{'worse' if found.worse else 'better'}; {why}")
    return out


def chart(hist: gate_history.History, names: dict[int, str], benchmark: str) -> tuple[str, list[str]]:
    """One benchmark's history chart, legend and notes ('' when fewer than two runs measured it)."""
    columns = [c for c, key in enumerate(hist.columns) if key.benchmark == benchmark]
    used = hist.used_runs(columns)
    if len(used) < 2:
        return "", []
    width = -(-len(used) // MAX_POINTS)  #: runs per point
    bins = [used[b:b + width] for b in range(0, len(used), width)]
    bin_of = np.full(len(hist.runs), -1, dtype=np.int64)  # run position -> its bin
    bin_of[used] = np.arange(len(used)) // width
    lines = []
    for n, c in enumerate(columns):
        key = hist.columns[c]
        color, dash = svg.style_of(n)
        line = svg.Line(f"h{n}", hist.labels[c], f"h{n} size:{key.size_bytes}", color, dash)
        runs, values = hist.column(c)
        at = bin_of[runs]
        groups = _groups(at)
        if width == 1:
            line.points = [svg.Point(int(at[first]), float(values[first]), names[id(hist.runs[int(runs[first])])])
                           for first, _ in groups]
        else:
            for (first, last), (lo, mid, hi) in zip(groups, _percentiles(values, groups)):
                what = (f"{_day(hist.runs[int(runs[first])])} .. {_day(hist.runs[int(runs[last - 1])])}, "
                        f"median of {last - first} runs")
                line.points.append(svg.Point(int(at[first]), mid, what, lo, hi))
        lines.append(line)
    stride = max(1, -(-len(bins) // MAX_TICKS))
    ticks = [(b, _when(hist.runs[members[0]])) for b, members in enumerate(bins) if b % stride == 0]
    marks = [(int(bin_of[i]), mpi_library(hist.runs[i])) for n, i in enumerate(used)
             if n and mpi_library(hist.runs[i]) != mpi_library(hist.runs[used[n - 1]])]
    x_label = "run (start time, UTC)" if width == 1 else f"runs, {width} per point (start time, UTC)"
    axes = svg.make_axes(lines, "index", True, x_label, f"{hist.stat} latency (us)", x_ticks=ticks)
    title = f"{benchmark}: {hist.stat} latency per run" if width == 1 else \
        f"{benchmark}: {hist.stat} latency, median of {width} runs per point"
    svg_text = svg.line_chart(lines, axes, title, "us", f"{hist.stat} latency",
                              "" if width == 1 else "p10..p90 of the runs of the point", marks=marks)
    sizes = sorted({hist.columns[c].size_bytes for c in columns})
    several = len(columns) > len(sizes)  # options vary: a button per size helps
    toggles = svg.group_toggles("sizes:", [(f"size:{s}", format_size(s)) for s in sizes]) if several else ""
    found = _step_lines(hist, names, columns)
    body = text_el("h3", f"{benchmark}: {len(used)} runs") + toggles + svg.legend(lines) + \
        el("div", el("figure", svg_text), class_="charts") + notes(found)
    return el("div", body, class_="figure-group", id=f"history-{benchmark}"), found


def _groups(at: np.ndarray) -> list[tuple[int, int]]:
    """[first, last) of each run of equal bins in ``at`` (a column's cells, in time order)."""
    if len(at) == 0:
        return []
    starts = np.flatnonzero(np.r_[True, at[1:] != at[:-1]])
    return list(zip(starts.tolist(), np.r_[starts[1:], len(at)].tolist()))


def _percentiles(values: np.ndarray, groups: list[tuple[int, int]]) -> list[tuple[float, float, float]]:
    """p10, median and p90 of each group [first, last) of ``values``; groups of one length at once (a
    decade is 301 lines of 50 bins). On values near the largest float, where interpolating between two of
    them overflows, computed on halves and doubled back."""
    out: list = [None] * len(groups)
    lengths = np.array([last - first for first, last in groups], dtype=np.int64)
    firsts = np.array([first for first, _ in groups], dtype=np.int64)
    for length in np.unique(lengths).tolist():
        which = np.flatnonzero(lengths == length)
        block = values[firsts[which][:, None] + np.arange(length)]
        with np.errstate(over="ignore", invalid="ignore"):
            got = np.percentile(block, [10, 50, 90], axis=1)
        wild = ~np.all(np.isfinite(got), axis=0)
        if wild.any():
            got[:, wild] = np.percentile(block[wild] / 2, [10, 50, 90], axis=1) * 2
        for j, (lo, mid, hi) in zip(which.tolist(), got.T.tolist()):
            out[j] = (lo, mid, hi)
    return out


def section(loaded: Loaded, stat: str) -> Section:
    loaded_stat = stat
    how = text_el("p", "Each point: one run's value of a configuration (benchmark, size, ranks, backend, options), "
                  "runs in start-time order; dashed lines mark a change of MPI library. Steps: microbench history's "
                  f"change points (at least {MIN_STEP * 100:g} %, p <= {ALPHA:g}, corrected for the splits tried). "
                  "Hover for the run and value; the buttons show and hide configurations."
                  + (f" {len(loaded.order)} runs: past {MAX_POINTS} runs a point is the median of consecutive runs "
                     "(band: their p10..p90); the steps are found on every run." if len(loaded.order) > MAX_POINTS
                     else ""), class_="how")
    table = loaded.table
    names = {id(run): name for run, name in zip(table.runs, loaded.names)}
    said = []
    if not np.any(np.isfinite(table.latency[stat]) & (table.size > 0)) and stat != FALLBACK_STAT \
            and FALLBACK_STAT in table.latency:
        stat = FALLBACK_STAT
        said.append(f"no run has a {loaded_stat} latency; the history shows {FALLBACK_STAT}")
    groups, used, worse = [], set(), 0
    drawn = set(benchmarks_in(table))
    for benchmark, hist in histories(loaded, stat):
        if benchmark in drawn:
            groups.append(chart(hist, names, benchmark))
        used |= {id(hist.runs[i]) for i in hist.used_runs()}
        worse += sum(f.worse and not f.explained for f in hist.steps)
    lacking = len(loaded.order) - len(used)
    if lacking > 0:
        said.append(f"{lacking} run(s) have no {stat} latency and are not in the history")
    if not any(html for html, _ in groups):
        return Section("history", "History", text_el("p", "Fewer than two runs measured any benchmark: no history.")
                       + notes(said), "", None)
    steps = sum(len(found) for _, found in groups)
    return Section("history", "History", how + notes(said) + "".join(html for html, _ in groups),
                   f"{sum(bool(h) for h, _ in groups)} benchmark(s), {steps} step(s)"
                   + (f", {worse} for the worse unexplained" if worse else ""), None if not worse else False)

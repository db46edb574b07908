"""History: each configuration's value across the runs given, in start-time order (``microbench history``'s
data: ``gate.history_cli.collect``), one chart per benchmark with a line per configuration (size and options).

Each point is one run's value of that configuration: its latency statistic (``--stat``, p50 by default;
a benchmark none of whose runs has it falls back to avg, and says so). Runs without a start time come last.
A dashed line marks where the MPI library changed from the run before.
"""

from __future__ import annotations

from microbench.gate.history_cli import collect, column_labels
from microbench.gate.load import mpi_library, run_time
from microbench.htmlreport import svg
from microbench.htmlreport.figures import FALLBACK_STAT, benchmarks_in
from microbench.htmlreport.markup import Section, el, notes, text_el
from microbench.records import Run
from microbench.sizes import format_size

MAX_TICKS = 10


def _when(run: Run) -> str:
    t = run_time(run)
    return f"{t:%m-%d %H:%M}" if t else "no time"


def chart(runs: list[Run], names: list[str], benchmark: str, stat: str) -> tuple[str, list[str]]:
    """One benchmark's history chart and legend, and its notes ('' when fewer than two runs measured it)."""
    sizes = {r.get("size_bytes") for run in runs for r in run.results if r.get("benchmark") == benchmark}
    sizes.discard(None)
    used_stat = stat
    ordered, columns, values = collect(runs, {benchmark}, sizes, "latency", stat)
    if not columns and stat != FALLBACK_STAT:
        used_stat = FALLBACK_STAT
        ordered, columns, values = collect(runs, {benchmark}, sizes, "latency", FALLBACK_STAT)
    used = [i for i in range(len(ordered)) if any((i, k) in values for k in columns)]
    if len(used) < 2:
        return "", []
    position = {i: n for n, i in enumerate(used)}
    name_of = {id(run): name for run, name in zip(runs, names)}
    lines = []
    for c, (key, label) in enumerate(zip(columns, column_labels(columns))):
        color, dash = svg.style_of(c)
        line = svg.Line(f"h{c}", label, f"h{c} size:{key.size_bytes}", color, dash)
        line.points = [svg.Point(position[i], values[(i, key)], name_of[id(ordered[i])])
                       for i in used if (i, key) in values]
        lines.append(line)
    stride = max(1, -(-len(used) // MAX_TICKS))
    ticks = [(n, _when(ordered[i])) for n, i in enumerate(used) if n % stride == 0]
    marks = [(n, f"{mpi_library(ordered[i])}") for n, i in enumerate(used)
             if n and mpi_library(ordered[i]) != mpi_library(ordered[used[n - 1]])]
    axes = svg.make_axes(lines, "index", True, "run (start time, UTC)", f"{used_stat} latency (us)",
                         x_ticks=ticks)
    svg_text = svg.line_chart(lines, axes, f"{benchmark}: {used_stat} latency per run", "us",
                              f"{used_stat} latency", marks=marks)
    found = [f"{benchmark}: no run has a {stat} latency; the history shows {FALLBACK_STAT}"] \
        if used_stat != stat else []
    missing = len({id(r) for r in runs if any(x.get("benchmark") == benchmark for x in r.results)}) - len(used)
    if missing > 0:
        found.append(f"{benchmark}: {missing} run(s) have no {used_stat} latency and are not in its history")
    several = len(columns) > len({k.size_bytes for k in columns})  # options vary: a button per size helps
    sizes_toggle = svg.group_toggles("sizes:", [(f"size:{s}", format_size(s)) for s in sorted(sizes)]) \
        if several else ""
    body = text_el("h3", f"{benchmark}: {len(used)} runs") + sizes_toggle + svg.legend(lines) + \
        el("div", el("figure", svg_text), class_="charts") + notes(found)
    return el("div", body, class_="figure-group", id=f"history-{benchmark}"), found


def section(runs: list[Run], names: list[str], stat: str) -> Section:
    how = text_el("p", "Each point: one run's value of a configuration (benchmark, size, ranks, backend, options), "
                  "runs in start-time order; dashed lines mark a change of MPI library. Hover for the run and "
                  "value; the buttons show and hide configurations.", class_="how")
    groups = [chart(runs, names, b, stat)[0] for b in benchmarks_in(runs)]
    if not any(groups):
        return Section("history", "History", text_el("p", "Fewer than two runs measured any benchmark: no history."),
                       "", None)
    return Section("history", "History", how + "".join(groups), f"{sum(bool(g) for g in groups)} benchmark(s)")

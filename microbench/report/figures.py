"""Per benchmark: interactive latency and busbw curves, and the OMB-style tables of every run.

Per run and configuration the line is a latency statistic (``--stat``, p50 by default) against message
size and the band p10..p90 of all samples; busbw = S x factor / latency from the same statistics (GB = 1e9
B): the values the gate reads (``Table.values``), as ``microbench plot`` draws them. A run whose records
lack the statistic (imported OMB or nccl-tests logs often have avg only) is drawn with avg, and the legend,
the tooltip and the notes say so. Where a configuration was measured by several runs, a "median of N runs"
series (``plotting.curves.build_series`` merged by configuration: median over runs of each run's value,
band p10..p90 over runs, every run counted) is added; single runs are drawn for the newest runs only
(``Loaded.newest``, ``--newest``), so the page does not grow with the runs read. With more than ``MANY_RUNS``
runs the medians show first and the single runs start hidden. The OMB-style tables are printed by
``microbench run``'s own formatting, for the runs drawn singly (their records read from their files).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from microbench.benchmarks.table import COLLECTIVES, PAIRS
from microbench.plotting.curves import benchmark_rows, build_series, explanation
from microbench.report import svg
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, details, el, notes, pre, text_el
from microbench.results import keys, metrics
from microbench.results.columns import Table
from microbench.results.keys import ConfigKey
from microbench.run import terminal
from microbench.units import format_size

MANY_RUNS = 6
FALLBACK_STAT = "avg"


@dataclass
class Curve:
    """One series: a run's (or the median over runs) line per size, and its bands, for latency and busbw."""

    run: int | None  #: table run index, None for the median over runs
    key: ConfigKey  #: the configuration without size
    stat: str
    runs: int = 1
    sizes: list[int] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    latency_band: list[tuple[float, float] | None] = field(default_factory=list)
    busbw: list[float | None] = field(default_factory=list)
    busbw_band: list[tuple[float, float] | None] = field(default_factory=list)


def benchmarks_in(table: Table) -> list[str]:
    """Benchmarks with results, in the suite's order, unknown names after (pairs has its own section)."""
    found = set(table.benchmarks().tolist()) - {PAIRS, None}
    return [b for b in COLLECTIVES if b in found] + sorted(str(b) for b in found - set(COLLECTIVES))


def _pair(a: np.ndarray | None, b: np.ndarray | None, row: int) -> tuple[float, float] | None:
    if a is None or b is None or not (np.isfinite(a[row]) and np.isfinite(b[row])):
        return None
    return float(a[row]), float(b[row])


def run_curves(table: Table, benchmark: str, stat: str, skip: set = frozenset(),
               runs: list[int] | None = None) -> list[Curve]:
    """One curve per (run, configuration) of ``benchmark`` at ``stat``, of ``runs`` (None: every run),
    leaving out the pairs in ``skip``."""
    lat, bw = table.values("latency", stat), table.values("busbw", stat)
    has = {s: s in table.latency for s in ("p10", "p90")}
    p10, p90 = (table.latency["p10"] if has["p10"] else None), (table.latency["p90"] if has["p90"] else None)
    bw_lo = table.values("busbw", "p90") if has["p90"] else None
    bw_hi = table.values("busbw", "p10") if has["p10"] else None
    groups: dict[tuple[int, ConfigKey], dict[int, int]] = {}
    rows = benchmark_rows(table, benchmark, stat)
    if runs is not None:
        rows = rows[np.isin(table.run[rows], np.asarray(runs, dtype=np.int64))]
    for row in rows.tolist():
        owner = (int(table.run[row]), table.configs[table.config[row]].without_size())
        if owner not in skip:
            groups.setdefault(owner, {}).setdefault(int(table.size[row]), row)
    out = []
    for (run, key), by_size in groups.items():
        curve = Curve(run, key, stat)
        for size in sorted(by_size):
            row = by_size[size]
            curve.sizes.append(size)
            curve.latency.append(float(lat[row]))
            curve.latency_band.append(_pair(p10, p90, row))
            curve.busbw.append(float(bw[row]) if np.isfinite(bw[row]) else None)
            curve.busbw_band.append(_pair(bw_lo, bw_hi, row))
        out.append(curve)
    return out


def median_curves(table: Table, benchmark: str, stat: str) -> list[Curve]:
    """``plot --by config``'s series of configurations that several runs measured."""
    out = []
    for s in build_series(table, benchmark, stat, "p10-p90", "config", "busbw"):
        if s.runs > 1:
            out.append(Curve(None, s.key, stat, s.runs, s.sizes, s.latency, s.latency_band, s.bandwidth,
                             s.bandwidth_band))
    return out


def collect(loaded: Loaded, benchmark: str, stat: str) -> tuple[list[Curve], list[str]]:
    """Per run and configuration the curve at ``stat`` (else avg), the medians over runs, and notes."""
    table, names = loaded.table, loaded.names
    curves = run_curves(table, benchmark, stat, runs=loaded.newest)
    if stat != FALLBACK_STAT and FALLBACK_STAT in table.latency:
        fallback = run_curves(table, benchmark, FALLBACK_STAT, {(c.run, c.key) for c in curves}, loaded.newest)
        notes_ = [f"{names[run]}: its {benchmark} records have no {stat} latency; its curve shows {FALLBACK_STAT}"
                  for run in sorted({c.run for c in fallback})]
        curves += fallback
    else:
        notes_ = []
    position = {run: n for n, run in enumerate(loaded.order)}
    curves.sort(key=lambda c: (position.get(c.run, -1), str(c.key)))
    for run in sorted({c.run for c in curves if all(b is None for b in c.busbw)}, key=position.get):
        notes_.append(f"{names[run]}: no {benchmark} busbw (the records lack it)")
    return curves + median_curves(table, benchmark, stat), notes_


def _lines(curves: list[Curve], names: list[str], configs: list[ConfigKey], shown: list[str], stat: str,
           bandwidth: bool, hide_single: bool) -> list[svg.Line]:
    """The chart lines of the curves (latency, or busbw when ``bandwidth``); a curve drawn with the
    fallback statistic says so in its label and tooltip."""
    lines = []
    for n, c in enumerate(curves):
        where = names[c.run] if c.run is not None else f"median of {c.runs} runs"
        opts = keys.describe_options(c.key, shown) if shown else ""
        label = where + (f", {opts}" if opts else "") + (f" [{c.stat}]" if c.stat != stat else "")
        color, dash = svg.style_of(n)
        tokens = f"s{n} cfg:{configs.index(c.key)} " + (f"run:{c.run}" if c.run is not None else "median")
        # first shown: the single runs, or (with many runs) the medians over runs
        hidden = (c.run is not None) if hide_single else (c.run is None)
        what = None if c.stat == stat else f"busbw from {c.stat}" if bandwidth else f"{c.stat} latency"
        line = svg.Line(f"s{n}", label, tokens, color, dash, hidden=hidden, what=what)
        values, bands = (c.busbw, c.busbw_band) if bandwidth else (c.latency, c.latency_band)
        for size, value, band in zip(c.sizes, values, bands):
            if value is not None:
                lo, hi = band if band else (None, None)
                line.points.append(svg.Point(size, value, format_size(size), lo, hi))
        lines.append(line)
    return lines


def _omb_tables(loaded: Loaded, benchmark: str, curves: list[Curve], shown: list[str]) -> str:
    """``microbench run``'s table (report.py's formatting) per run and configuration, newest runs first."""
    blocks = []
    singles = [c for c in curves if c.run is not None]
    position = {run: n for n, run in enumerate(loaded.order)}
    singles.sort(key=lambda c: -position.get(c.run, -1))
    for c in singles:
        name, key = loaded.names[c.run], c.key
        rows = sorted((r for r in loaded.full(c.run).results if r.get("benchmark") == benchmark
                       and keys.config_key(r).without_size() == key), key=lambda r: r.get("size_bytes") or 0)
        extra = ("first",) if any(isinstance(r.get("first_call_us"), dict) for r in rows) else ()
        opts = keys.describe_options(key, [n for n in keys.OPTION_FIELDS if key.get(n) is not None])
        head = [f"# {benchmark}: {name}, {key.get('ranks')} ranks, backend {key.get('backend')}", f"# {opts}",
                terminal.format_header(extra)]
        body = [terminal.format_result_row(r, extra) for r in rows]
        title = name + (f", {keys.describe_options(key, shown)}" if shown else "") + f": {len(rows)} sizes"
        blocks.append(details(title, pre(head + body)))
    left = len(loaded.order) - len(loaded.newest)
    return "".join(blocks) + (notes([f"tables of the {left} older run(s) left out (--newest)"]) if left > 0 else "")


def _charts(benchmark: str, stat: str, lat: list[svg.Line], bw: list[svg.Line]) -> str:
    x_label = "message size (bytes per rank)"
    charts = [
        svg.line_chart(lat, svg.make_axes(lat, "log2", True, x_label, f"{stat} latency (us)", format_size),
                       f"{benchmark}: {stat} latency", "us", f"{stat} latency", "p10..p90"),
        svg.line_chart(bw, svg.make_axes(bw, "log2", False, x_label, "busbw (GB/s)", format_size),
                       f"{benchmark}: busbw", "GB/s", f"busbw from {stat}", "band (from p90..p10 latency)"),
    ]
    return el("div", "".join(el("figure", c) for c in charts), class_="charts")


def figure_group(loaded: Loaded, benchmark: str, stat: str) -> tuple[str, list[str]]:
    """The HTML of one benchmark (charts, legend, toggles, tables) and its notes."""
    curves, notes_ = collect(loaded, benchmark, stat)
    if not curves:
        return "", [f"{benchmark}: no result has a {stat} or {FALLBACK_STAT} latency: nothing to draw"]
    notes_ = notes_ + launch_bound_notes(loaded.table, benchmark)
    names = loaded.names
    configs = list(dict.fromkeys(c.key for c in curves))
    shown = keys.varying_options(configs)
    runs_used = [r for r in loaded.order if any(c.run == r for c in curves)]
    hide_single = (len(runs_used) > MANY_RUNS or loaded.aggregated) and any(c.run is None for c in curves)
    lat = _lines(curves, names, configs, shown, stat, False, hide_single)
    bw = _lines(curves, names, configs, shown, stat, True, hide_single)
    toggles = svg.group_toggles("runs:", [(f"run:{i}", names[i]) for i in runs_used])
    toggles += svg.group_toggles("configurations:", [(f"cfg:{i}", keys.describe_options(k, shown))
                                                     for i, k in enumerate(configs)])
    if any(c.run is None for c in curves):
        toggles += svg.group_toggles("medians:", [("median", "median over runs")], minimum=1)
    coll = COLLECTIVES.get(benchmark)
    head = text_el("h3", f"{benchmark}: {coll.summary}" if coll else benchmark)
    how = text_el("p", explanation(stat, "p10-p90", "run", "busbw").replace("\n", "; ")
                  + "; medians over runs: band p10..p90 over runs"
                  + (f", every run counted; single runs: the newest {len(loaded.newest)} only."
                     if loaded.aggregated else ".")
                  + " Hover a point for its values; the buttons show and hide series.", class_="how")
    body = head + how + toggles + svg.legend(lat) + _charts(benchmark, stat, lat, bw)
    body += notes(notes_) + _omb_tables(loaded, benchmark, curves, shown)
    return el("div", body, class_="figure-group", id=f"bench-{benchmark}"), notes_


def launch_bound_notes(table: Table, benchmark: str) -> list[str]:
    """A note naming the sizes of ``benchmark`` with results marked launch-bound (their table rows say so too)."""
    rows = metrics.launch_bound(table.numbers) & (table.benchmarks() == benchmark)
    sizes = sorted(set(table.size[rows].tolist()))
    if not sizes:
        return []
    shown = ", ".join(format_size(s) for s in sizes[:12]) + (" ..." if len(sizes) > 12 else "")
    return [f"{metrics.LAUNCH_BOUND_ADVICE_SHORT}: {int(rows.sum())} result(s) at {shown}"]


def section(loaded: Loaded, stat: str) -> Section:
    groups, undrawn = [], []
    for benchmark in benchmarks_in(loaded.table):
        html, found = figure_group(loaded, benchmark, stat)
        groups.append(html)
        undrawn += [] if html else found
    if not any(groups):
        return Section("curves", "Latency and bandwidth", text_el("p", "No benchmark results to draw.")
                       + notes(undrawn), "", None)
    status = f"{sum(bool(g) for g in groups)} benchmark(s)"
    return Section("curves", "Latency and bandwidth", notes(undrawn) + "".join(groups), status, None)

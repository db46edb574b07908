"""Per benchmark: interactive latency and busbw curves, and the OMB-style tables of every run.

The curves are ``microbench plot``'s series (``plotting.curves.build_series``): per run and configuration,
the line is a latency statistic (``--stat``, p50 by default) against message size, the band p10..p90 of
all samples; busbw = S x factor / latency from the same statistics (GB = 1e9 B). A run whose records
lack the statistic (imported OMB or nccl-tests logs often have avg only) is drawn with avg, and the
legend and the notes say so. Where a configuration was measured by several runs, a "median of N runs"
series (median over runs of each run's value, band p10..p90 over runs) is added; with more than
``MANY_RUNS`` runs it is what shows first and the single runs start hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from microbench import report as terminal
from microbench.collectives import COLLECTIVES
from microbench.gate import keys
from microbench.gate.keys import ConfigKey
from microbench.htmlreport import svg
from microbench.htmlreport.markup import Section, details, el, notes, pre, text_el
from microbench.pairs import PAIRS
from microbench.plotting.curves import Series, build_series, explanation
from microbench.records import Run
from microbench.sizes import format_size

MANY_RUNS = 6
FALLBACK_STAT = "avg"


@dataclass
class Drawn:
    """One series to draw: the curve, where it came from, and the statistic its line shows."""

    series: Series
    run: int | None  #: run index, None for a median over runs
    stat: str


def benchmarks_in(runs: list[Run]) -> list[str]:
    """Benchmarks with results, in the suite's order, unknown names after (pairs has its own section)."""
    found = {r.get("benchmark") for run in runs for r in run.results} - {PAIRS, None}
    return [b for b in COLLECTIVES if b in found] + sorted(str(b) for b in found - set(COLLECTIVES))


def collect(runs: list[Run], names: list[str], benchmark: str, stat: str) -> tuple[list[Drawn], list[str]]:
    """Per run and configuration the series at ``stat`` (else avg), the medians over runs, and notes."""
    drawn, notes_ = [], []
    for index, run in enumerate(runs):
        wanted = build_series([run], benchmark, stat)
        have = {s.key for s in wanted}
        fallback = [s for s in build_series([run], benchmark, FALLBACK_STAT) if s.key not in have] \
            if stat != FALLBACK_STAT else []
        drawn += [Drawn(s, index, stat) for s in wanted] + [Drawn(s, index, FALLBACK_STAT) for s in fallback]
        if fallback:
            notes_.append(f"{names[index]}: its {benchmark} records have no {stat} latency; its curve shows "
                          f"{FALLBACK_STAT}")
        lacking_bw = [s for s in wanted + fallback if all(b is None for b in s.bandwidth)]
        if lacking_bw:
            notes_.append(f"{names[index]}: no {benchmark} busbw for {len(lacking_bw)} configuration(s) "
                          "(the records lack it)")
    counts: dict[ConfigKey, int] = {}
    for d in drawn:
        counts[d.series.key] = counts.get(d.series.key, 0) + 1
    if any(n > 1 for n in counts.values()):
        medians = build_series(runs, benchmark, stat, by="config")
        drawn += [Drawn(s, None, stat) for s in medians if counts.get(s.key, 0) > 1]
    return drawn, notes_


def _lines(drawn: list[Drawn], names: list[str], configs: list[ConfigKey], shown: list[str], stat: str,
           bandwidth: bool, hide_single: bool) -> list[svg.Line]:
    """The chart lines of the drawn series (latency, or busbw when ``bandwidth``); a series drawn with the
    fallback statistic says so in its label."""
    lines = []
    for n, d in enumerate(drawn):
        s = d.series
        cfg = configs.index(s.key)
        where = names[d.run] if d.run is not None else f"median of {s.runs} runs"
        opts = keys.describe_options(s.key, shown) if shown else ""
        label = where + (f", {opts}" if opts else "") + (f" [{d.stat}]" if d.stat == FALLBACK_STAT != stat else "")
        color, dash = svg.style_of(n)
        tokens = f"s{n} cfg:{cfg} " + (f"run:{d.run}" if d.run is not None else "median")
        # first shown: the single runs, or (with many runs) the medians over runs
        hidden = (d.run is not None) if hide_single else (d.run is None)
        what = None if d.stat == stat else f"busbw from {d.stat}" if bandwidth else f"{d.stat} latency"
        line = svg.Line(f"s{n}", label, tokens, color, dash, hidden=hidden, what=what)
        values, bands = (s.bandwidth, s.bandwidth_band) if bandwidth else (s.latency, s.latency_band)
        for size, value, band in zip(s.sizes, values, bands):
            if value is not None:
                lo, hi = band if band else (None, None)
                line.points.append(svg.Point(size, value, format_size(size), lo, hi))
        lines.append(line)
    return lines


def _omb_tables(runs: list[Run], names: list[str], benchmark: str, drawn: list[Drawn], shown: list[str]) -> str:
    """``microbench run``'s table (report.py's formatting) for each run and configuration."""
    blocks = []
    for d in drawn:
        if d.run is None:
            continue
        key = d.series.key
        rows = sorted((r for r in runs[d.run].results if r.get("benchmark") == benchmark
                       and keys.config_key(r).without_size() == key), key=lambda r: r.get("size_bytes") or 0)
        extra = ("first",) if any(isinstance(r.get("first_call_us"), dict) for r in rows) else ()
        opts = keys.describe_options(key, [n for n in keys.OPTION_FIELDS if key.get(n) is not None])
        head = [f"# {benchmark}: {names[d.run]}, {key.get('ranks')} ranks, backend {key.get('backend')}",
                f"# {opts}", terminal.format_header(extra)]
        body = [terminal.format_result_row(r, extra) for r in rows]
        title = names[d.run] + (f", {keys.describe_options(key, shown)}" if shown else "") + f": {len(rows)} sizes"
        blocks.append(details(title, pre(head + body)))
    return "".join(blocks)


def figure_group(runs: list[Run], names: list[str], benchmark: str, stat: str) -> tuple[str, list[str]]:
    """The HTML of one benchmark (charts, legend, toggles, tables) and its notes."""
    drawn, notes_ = collect(runs, names, benchmark, stat)
    if not drawn:
        return "", [f"{benchmark}: no result has a {stat} or {FALLBACK_STAT} latency: nothing to draw"]
    configs = list(dict.fromkeys(d.series.key for d in drawn))
    shown = keys.varying_options(configs)
    hide_single = len({d.run for d in drawn if d.run is not None}) > MANY_RUNS and any(d.run is None for d in drawn)
    lat = _lines(drawn, names, configs, shown, stat, False, hide_single)
    bw = _lines(drawn, names, configs, shown, stat, True, hide_single)
    x_label = "message size (bytes per rank)"
    charts = [
        svg.line_chart(lat, svg.make_axes(lat, "log2", True, x_label, f"{stat} latency (us)", format_size),
                       f"{benchmark}: {stat} latency", "us", f"{stat} latency", "p10..p90"),
        svg.line_chart(bw, svg.make_axes(bw, "log2", False, x_label, "busbw (GB/s)", format_size),
                       f"{benchmark}: busbw", "GB/s", f"busbw from {stat}", "band (from p90..p10 latency)"),
    ]
    runs_used = sorted({d.run for d in drawn if d.run is not None})
    toggles = svg.group_toggles("runs:", [(f"run:{i}", names[i]) for i in runs_used])
    toggles += svg.group_toggles("configurations:", [(f"cfg:{i}", keys.describe_options(k, shown))
                                                     for i, k in enumerate(configs)])
    if any(d.run is None for d in drawn):
        toggles += svg.group_toggles("medians:", [("median", "median over runs")], minimum=1)
    coll = COLLECTIVES.get(benchmark)
    head = text_el("h3", f"{benchmark}: {coll.summary}" if coll else benchmark)
    how = text_el("p", explanation(stat, "p10-p90", "run", "busbw") + "; medians over runs: band p10..p90 over runs."
                  " Hover a point for its values; the buttons show and hide series.", class_="how")
    body = head + how + toggles + svg.legend(lat) + el("div", "".join(el("figure", c) for c in charts),
                                                         class_="charts")
    body += notes(notes_) + _omb_tables(runs, names, benchmark, drawn, shown)
    return el("div", body, class_="figure-group", id=f"bench-{benchmark}"), notes_


def section(runs: list[Run], names: list[str], stat: str) -> Section:
    groups, undrawn = [], []
    for benchmark in benchmarks_in(runs):
        html, found = figure_group(runs, names, benchmark, stat)
        groups.append(html)
        undrawn += [] if html else found
    if not any(groups):
        return Section("curves", "Latency and bandwidth", text_el("p", "No benchmark results to draw.")
                       + notes(undrawn), "", None)
    status = f"{sum(bool(g) for g in groups)} benchmark(s)"
    return Section("curves", "Latency and bandwidth", notes(undrawn) + "".join(groups), status, None)


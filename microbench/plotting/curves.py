"""Latency (log-log) and bandwidth curves of one benchmark: several runs or configurations overlaid.

A series is one size sweep: the results of one run with one configuration (``by="run"``), or of every
run with that configuration merged (``by="config"``). Its line is a latency statistic (p50 by default);
its band the spread of what the line summarises:

- one run: p10..p90 (or fastest..slowest, ``band="min-max"``) of all per-iteration samples;
- merged runs: the line is the median over runs of each run's statistic, the band p10..p90 (or
  min..max) over the runs: launch-to-launch spread.

The bandwidth panel shows busbw (or algbw) = S [x factor] / latency, from the same statistics.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microbench.results import keys
from microbench.results.columns import RunInfo, Table, per_run_medians
from microbench.results.keys import ConfigKey
from microbench.results.job_overlay import is_job
from microbench.results.load import mpi_library, run_label, run_time

BANDS = {"p10-p90": ("p90", "p10"), "min-max": ("slowest", "fastest"), "none": None}
BYS = ("auto", "run", "config")


@dataclass
class Series:
    """One curve: per size, the line value and the band (low, high) for latency and bandwidth."""

    label: str
    key: ConfigKey  #: the configuration without size
    sizes: list[int] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    latency_band: list[tuple[float, float] | None] = field(default_factory=list)
    bandwidth: list[float | None] = field(default_factory=list)
    bandwidth_band: list[tuple[float, float] | None] = field(default_factory=list)
    runs: int = 1
    newest: list[float | None] = field(default_factory=list)  #: merged: the newest run's latency per size
    newest_bandwidth: list[float | None] = field(default_factory=list)
    job: bool = False  #: a job's operations (an imported NCCL Inspector dump): points, not a curve


#: More runs than this of one benchmark are drawn merged by configuration (``by="auto"``).
HANDFUL = 5


def _run_titles(runs: list[RunInfo]) -> list[str]:
    """A legend title per run: its start time to the minute, to the second where two runs share a
    minute, and with the run id where they still collide (or have no time)."""
    times = [run_time(r) for r in runs]
    titles = [f"{t:%Y-%m-%d %H:%M}" if t else run_label(r) for r, t in zip(runs, times)]
    if len(set(titles)) < len(titles):
        titles = [f"{t:%Y-%m-%d %H:%M:%S}" if t else run_label(r) for r, t in zip(runs, times)]
    if len(set(titles)) < len(titles):
        titles = [f"{title} {run_label(r)}" if t else title for title, r, t in zip(titles, runs, times)]
    return titles


def benchmark_rows(table: Table, benchmark: str, stat: str) -> np.ndarray:
    """Rows of ``benchmark`` that have the latency statistic ``stat``."""
    mine = table.config_mask(lambda key: key.benchmark == benchmark)  # asked once per configuration
    return np.flatnonzero(mine & np.isfinite(table.latency[stat]) & (table.size > 0))


def resolve_by(by: str, runs: int) -> str:
    """``auto``: one curve per run up to ``HANDFUL`` runs, merged by configuration past it."""
    return by if by != "auto" else ("run" if runs <= HANDFUL else "config")


def newest_run(table: Table, rows: np.ndarray) -> int | None:
    """The run (index) among ``rows`` that started last (of runs that started in the same second, the one read
    last)."""
    runs = table.used_runs(rows)
    timed = [(run_time(table.runs[i]), i) for i in runs if run_time(table.runs[i])]
    return max(timed)[1] if timed else (runs[-1] if runs else None)


def group_rows(table: Table, rows: np.ndarray, by: str) -> dict[tuple[int | None, ConfigKey], np.ndarray]:
    """``rows`` by (run, configuration without size) (``by="run"``) or by configuration without size (run
    None), groups in the order of their first row and rows in their order within a group."""
    sweep_index: dict[ConfigKey, int] = {}
    sweep_code = np.array([sweep_index.setdefault(c.without_size(), len(sweep_index)) for c in table.configs] or [0],
                          dtype=np.int64)
    sweeps = list(sweep_index)
    codes = sweep_code[table.config[rows]]
    runs = table.run[rows].astype(np.int64) if by == "run" else np.zeros(len(rows), dtype=np.int64)
    _, first, inverse = np.unique(runs * max(len(sweeps), 1) + codes, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")
    ends = np.cumsum(np.bincount(inverse, minlength=len(first)))
    starts = ends - np.bincount(inverse, minlength=len(first))
    out = {}
    for g in np.argsort(first, kind="stable").tolist():
        at = int(first[g])
        out[(int(runs[at]) if by == "run" else None, sweeps[int(codes[at])])] = rows[order[starts[g]:ends[g]]]
    return out


def build_series(table: Table, benchmark: str, stat: str = "p50", band: str = "p10-p90", by: str = "run",
                 bw_metric: str = "busbw") -> list[Series]:
    """The series of one benchmark (results with no usable latency statistic are left out)."""
    rows = benchmark_rows(table, benchmark, stat)
    groups = group_rows(table, rows, by)
    shown = keys.varying_options(k for i, k in groups if i is None or not is_job(table, i))  # jobs: see below
    used = sorted({i for i, _ in groups if i is not None})
    titles = dict(zip(used, _run_titles([table.runs[i] for i in used])))
    several_runs = by == "run" and len(used) > 1
    newest = newest_run(table, rows) if by == "config" else None
    out = []
    for (index, key), members in groups.items():
        parts = [titles[index]] if several_runs else []
        if shown:
            parts.append(keys.describe_options(key, shown))
        label_runs = len(table.used_runs(members))
        if by == "config":
            parts.append(f"{label_runs} run(s)")
        title = ", ".join(parts) or _run_titles([table.runs[table.run[members[0]]]])[0]
        job = index is not None and is_job(table, index)
        if job:  # a job's options are another tool's: its run and group size name it
            title = f"job {_run_titles([table.runs[index]])[0]}, {key.get('ranks')} ranks"
        series = Series(label=title, key=key, runs=label_runs, job=job)
        sizes = table.size[members]
        for size in np.unique(sizes).tolist():
            at = members[sizes == size]
            if by == "config":
                _add_merged_point(series, table, size, at, stat, band, bw_metric, newest)
            else:
                _add_run_point(series, table, size, int(at[0]), stat, band, bw_metric)
        out.append(series)
    out.sort(key=lambda s: s.label)
    return out


def _spread(values: np.ndarray, band: str) -> tuple[float, float]:
    if band == "min-max":
        return float(values.min()), float(values.max())
    lo, hi = np.percentile(values, [10, 90])
    return float(lo), float(hi)


def _add_merged_point(series: Series, table: Table, size: int, rows: np.ndarray, stat: str, band: str, bw: str,
                      newest: int | None) -> None:
    """Median over runs (each run's median, should it hold the size twice) and the spread over runs."""
    lat_runs = per_run_medians(np.zeros(len(rows), dtype=np.int64), table.run[rows], table.values("latency", stat)[rows])
    bw_values = table.values(bw, stat)[rows]
    good = np.isfinite(bw_values)
    bw_runs = per_run_medians(np.zeros(good.sum(), dtype=np.int64), table.run[rows][good], bw_values[good])
    series.sizes.append(size)
    series.latency.append(float(np.median(lat_runs[2])))
    series.bandwidth.append(float(np.median(bw_runs[2])) if len(bw_runs[2]) else None)
    series.latency_band.append(_spread(lat_runs[2], band) if BANDS.get(band) else None)
    series.bandwidth_band.append(_spread(bw_runs[2], band) if BANDS.get(band) and len(bw_runs[2]) else None)
    mine = lat_runs[1] == newest
    series.newest.append(float(lat_runs[2][mine][0]) if mine.any() else None)
    mine_bw = bw_runs[1] == newest
    series.newest_bandwidth.append(float(bw_runs[2][mine_bw][0]) if mine_bw.any() else None)


def _add_run_point(series: Series, table: Table, size: int, row: int, stat: str, band: str, bw: str) -> None:
    """One run's statistic, its band from that run's samples (p10..p90 or fastest..slowest)."""
    def value(metric: str, which: str | None) -> float | None:
        if which is None or which not in table.latency:
            return None
        v = table.values(metric, which)[row]
        return float(v) if np.isfinite(v) else None

    series.sizes.append(size)
    series.latency.append(value("latency", stat))
    series.bandwidth.append(value(bw, stat))
    hi_stat, lo_stat = BANDS[band] or (None, None)
    lo, hi = value("latency", lo_stat), value("latency", hi_stat)
    series.latency_band.append((lo, hi) if lo is not None and hi is not None else None)
    bw_lo, bw_hi = value(bw, hi_stat), value(bw, lo_stat)
    series.bandwidth_band.append((bw_lo, bw_hi) if bw_lo is not None and bw_hi is not None else None)


def band_stats(stat: str, band: str) -> list[str]:
    """The latency statistics a figure reads: the line's and the band's."""
    return list(dict.fromkeys([stat, *(BANDS.get(band) or ())]))


def explanation(stat: str, band: str, by: str, bw_metric: str) -> str:
    """How the figure's numbers are computed (printed under the figure)."""
    line = f"line: {stat} latency" + (" (median over runs of each run's value; diamonds: the newest run)"
                                      if by == "config" else "")
    if BANDS.get(band) is None:
        spread = "no band"
    elif by == "config":
        spread = f"band: {band.replace('-', '..')} over runs (launch-to-launch spread)"
    else:
        spread = "band: " + ("p10..p90 of all samples" if band == "p10-p90" else "fastest..slowest sample")
    factor = " x factor" if bw_metric == "busbw" else ""
    return (f"{line}; {spread}\n{bw_metric} = S{factor} / latency from the same statistics "
            f"(S and factor as nccl-tests); GB = 1e9 B")


@dataclass
class Heading:
    """What a figure names beside its series: the newest run's legend title, the MPI libraries."""

    newest: str | None
    libraries: list[str]
    peaks: list[tuple[float, str]] = field(default_factory=list)  #: the runs' path peaks (GB/s, what sets them)


def heading(table: Table, rows: np.ndarray) -> Heading:
    """The heading of a figure drawn from ``rows``."""
    newest = newest_run(table, rows)
    peaks = {(p["gbps"], f"{p['tier']}: {p['link']}") for i in table.used_runs(rows)
             for p in [table.runs[i].meta.get("path_peak")] if isinstance(p, dict) and p.get("gbps")}
    return Heading(_run_titles([table.runs[newest]])[0] if newest is not None else None,
                   sorted({mpi_library(table.runs[i]) for i in table.used_runs(rows)}), sorted(peaks))


def draw(benchmark: str, summary: str, series: list[Series], table: Table | Heading, path: str | os.PathLike,
         stat: str, band: str, by: str, bw_metric: str) -> Path:
    """Write one figure: latency (log-log) left, bandwidth right; merged series mark the newest run.
    ``table``: the table the series come from, or their ``Heading`` (then the table is not needed)."""
    from microbench.plotting import line_style, log_value_axis, new_figure, save, size_axis

    head = table if isinstance(table, Heading) else heading(table, benchmark_rows(table, benchmark, stat))
    fig = new_figure(11, 4.6)
    lat_ax, bw_ax = fig.subplots(1, 2)
    for i, s in enumerate(series):
        _curve(lat_ax, s.sizes, s.latency, s.latency_band, line_style(i), s.label, s.job)
        _curve(bw_ax, s.sizes, s.bandwidth, s.bandwidth_band, line_style(i), s.label, s.job)
        _newest(lat_ax, s.sizes, s.newest, line_style(i))
        _newest(bw_ax, s.sizes, s.newest_bandwidth, line_style(i))
    all_sizes = [x for s in series for x in s.sizes]
    for ax in (lat_ax, bw_ax):
        size_axis(ax, all_sizes)
        ax.grid(True, which="major", alpha=0.3)
    log_value_axis(lat_ax)
    lat_ax.set_ylabel(f"{stat} latency (us)")
    bw_ax.set_ylabel(f"{bw_metric} (GB/s)")
    bw_ax.set_ylim(bottom=0)
    if bw_metric == "busbw":  # the peak of the path the runs' data crossed (records' path_peak)
        for n, (gbps, link) in enumerate(head.peaks[:4]):
            text = f"path peak {gbps:.4g} GB/s, {link}"
            bw_ax.axhline(gbps, color="black", linestyle=(0, (1, 1 + n)), linewidth=1,
                          label=text if len(text) <= 60 else text[:57] + "...")
        if head.peaks:
            bw_ax.set_ylim(top=max(bw_ax.get_ylim()[1], max(g for g, _ in head.peaks[:4]) * 1.08))
            bw_ax.legend(fontsize=6, loc="upper left")
    if any(s.newest for s in series):
        lat_ax.plot([], [], linestyle="none", marker="D", markersize=4, markerfacecolor="none",
                    markeredgecolor="black", label=f"newest run ({head.newest})")
    if len(series) > 1 or series[0].label or any(s.newest for s in series):
        lat_ax.legend(fontsize=7, loc="upper left")
    ranks = sorted({str(s.key.get("ranks")) for s in series})
    fig.suptitle(f"{benchmark}: {summary}\n{'/'.join(ranks)} ranks, {', '.join(head.libraries)}", fontsize=10)
    fig.supxlabel(explanation(stat, band, by, bw_metric), fontsize=7)
    return save(fig, path)


def _curve(ax, sizes, values, bands, style: dict, label, job: bool = False) -> None:
    pts = [(x, y) for x, y in zip(sizes, values) if y is not None]
    if not pts:
        return
    xs, ys = zip(*pts)
    if job:  # a job's operations: a star per size, whiskers p10..p90 of its operations
        ax.plot(xs, ys, linestyle="none", marker="*", markersize=9, label=label, color=style["color"])
        for x, b in zip(sizes, bands):
            if b is not None:
                ax.plot([x, x], list(b), color=style["color"], linewidth=1.5)
        return
    ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=label, **style)
    band = [(x, b) for x, b in zip(sizes, bands) if b is not None]
    if band:
        bx, (lo, hi) = [x for x, _ in band], zip(*[b for _, b in band])
        ax.fill_between(bx, lo, hi, color=style["color"], alpha=0.18, linewidth=0)


def _newest(ax, sizes, values, style: dict) -> None:
    """The newest run's points over a merged series: open diamonds in the series' colour, no legend entry."""
    pts = [(x, y) for x, y in zip(sizes, values) if y is not None]
    if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, linestyle="none", marker="D", markersize=4, markerfacecolor="none",
                markeredgecolor=style["color"], markeredgewidth=1.2)

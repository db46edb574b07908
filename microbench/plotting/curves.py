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
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from microbench.gate import keys
from microbench.gate.keys import ConfigKey
from microbench.gate.load import mpi_library, run_label, run_time
from microbench.gate.metrics import metric_value
from microbench.records import Run

BANDS = {"p10-p90": ("p90", "p10"), "min-max": ("slowest", "fastest"), "none": None}
BYS = ("run", "config")


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


def _run_titles(runs: list[Run]) -> list[str]:
    """A legend title per run: its start time to the minute, to the second where two runs share a
    minute, and with the run id where they still collide (or have no time)."""
    times = [run_time(r) for r in runs]
    titles = [f"{t:%Y-%m-%d %H:%M}" if t else run_label(r) for r, t in zip(runs, times)]
    if len(set(titles)) < len(titles):
        titles = [f"{t:%Y-%m-%d %H:%M:%S}" if t else run_label(r) for r, t in zip(runs, times)]
    if len(set(titles)) < len(titles):
        titles = [f"{title} {run_label(r)}" if t else title for title, r, t in zip(titles, runs, times)]
    return titles


def build_series(runs: list[Run], benchmark: str, stat: str = "p50", band: str = "p10-p90", by: str = "run",
                 bw_metric: str = "busbw") -> list[Series]:
    """The series of one benchmark (results with no usable latency statistic are left out)."""
    groups: dict[tuple, list[tuple[Run, dict]]] = {}
    for index, run in enumerate(runs):
        for res in run.results:
            if res.get("benchmark") != benchmark or metric_value(res, "latency", stat) is None:
                continue
            key = keys.config_key(res).without_size()
            groups.setdefault((index if by == "run" else None, key), []).append((run, res))
    shown = keys.varying_options(k for _, k in groups)
    used = sorted({i for i, _ in groups if i is not None})
    titles = dict(zip(used, _run_titles([runs[i] for i in used])))
    several_runs = by == "run" and len(used) > 1
    out = []
    for (index, key), members in groups.items():
        parts = [titles[index]] if several_runs else []
        if shown:
            parts.append(keys.describe_options(key, shown))
        label_runs = len({id(r) for r, _ in members})
        if by == "config":
            parts.append(f"{label_runs} run(s)")
        series = Series(label=", ".join(parts) or _run_titles([members[0][0]])[0], key=key, runs=label_runs)
        by_size: dict[int, list[dict]] = {}
        for _, res in members:
            by_size.setdefault(res["size_bytes"], []).append(res)
        for size in sorted(by_size):
            _add_point(series, size, by_size[size], stat, band, by, bw_metric)
        out.append(series)
    out.sort(key=lambda s: s.label)
    return out


def _spread(values: list[float], band: str) -> tuple[float, float]:
    import numpy as np

    if band == "min-max":
        return min(values), max(values)
    lo, hi = np.percentile(values, [10, 90])
    return float(lo), float(hi)


def _add_point(series: Series, size: int, results: list[dict], stat: str, band: str, by: str, bw: str) -> None:
    lat = [metric_value(r, "latency", stat) for r in results]
    bws = [metric_value(r, bw, stat) for r in results]
    series.sizes.append(size)
    if by == "config":
        series.latency.append(float(statistics.median(lat)))
        good_bw = [b for b in bws if b is not None]
        series.bandwidth.append(float(statistics.median(good_bw)) if good_bw else None)
        series.latency_band.append(_spread(lat, band) if BANDS.get(band) else None)
        series.bandwidth_band.append(_spread(good_bw, band) if BANDS.get(band) and good_bw else None)
        return
    res = results[0]
    series.latency.append(lat[0])
    series.bandwidth.append(bws[0])
    hi_stat, lo_stat = BANDS[band] or (None, None)
    lo, hi = (metric_value(res, "latency", lo_stat), metric_value(res, "latency", hi_stat)) if hi_stat else (None, None)
    series.latency_band.append((lo, hi) if lo is not None and hi is not None else None)
    bw_lo, bw_hi = (metric_value(res, bw, hi_stat), metric_value(res, bw, lo_stat)) if hi_stat else (None, None)
    series.bandwidth_band.append((bw_lo, bw_hi) if bw_lo is not None and bw_hi is not None else None)


def explanation(stat: str, band: str, by: str, bw_metric: str) -> str:
    """How the figure's numbers are computed (printed under the figure)."""
    line = f"line: {stat} latency" + (" (median over runs of each run's value)" if by == "config" else "")
    if BANDS.get(band) is None:
        spread = "no band"
    elif by == "config":
        spread = f"band: {band.replace('-', '..')} over runs (launch-to-launch spread)"
    else:
        spread = "band: " + ("p10..p90 of all samples" if band == "p10-p90" else "fastest..slowest sample")
    factor = " x factor" if bw_metric == "busbw" else ""
    return (f"{line}; {spread}; {bw_metric} = S{factor} / latency from the same statistics "
            f"(S and factor as nccl-tests); GB = 1e9 B")


def draw(benchmark: str, summary: str, series: list[Series], runs: list[Run], path: str | os.PathLike,
         stat: str, band: str, by: str, bw_metric: str) -> Path:
    """Write one figure: latency (log-log) left, bandwidth right."""
    from microbench.plotting import line_style, log_value_axis, new_figure, save, size_axis

    fig = new_figure(11, 4.6)
    lat_ax, bw_ax = fig.subplots(1, 2)
    for i, s in enumerate(series):
        _curve(lat_ax, s.sizes, s.latency, s.latency_band, line_style(i), s.label)
        _curve(bw_ax, s.sizes, s.bandwidth, s.bandwidth_band, line_style(i), s.label)
    all_sizes = [x for s in series for x in s.sizes]
    for ax in (lat_ax, bw_ax):
        size_axis(ax, all_sizes)
        ax.grid(True, which="major", alpha=0.3)
    log_value_axis(lat_ax)
    lat_ax.set_ylabel(f"{stat} latency (us)")
    bw_ax.set_ylabel(f"{bw_metric} (GB/s)")
    bw_ax.set_ylim(bottom=0)
    if len(series) > 1 or series[0].label:
        lat_ax.legend(fontsize=7, loc="upper left")
    ranks = sorted({str(s.key.get("ranks")) for s in series})
    libs = sorted({mpi_library(r) for r in runs if any(res.get("benchmark") == benchmark for res in r.results)})
    fig.suptitle(f"{benchmark}: {summary}\n{'/'.join(ranks)} ranks, {', '.join(libs)}", fontsize=10)
    fig.supxlabel(explanation(stat, band, by, bw_metric), fontsize=7)
    return save(fig, path)


def _curve(ax, sizes, values, bands, style: dict, label) -> None:
    pts = [(x, y) for x, y in zip(sizes, values) if y is not None]
    if not pts:
        return
    xs, ys = zip(*pts)
    ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=label, **style)
    band = [(x, b) for x, b in zip(sizes, bands) if b is not None]
    if band:
        bx, (lo, hi) = [x for x, _ in band], zip(*[b for _, b in band])
        ax.fill_between(bx, lo, hi, color=style["color"], alpha=0.18, linewidth=0)

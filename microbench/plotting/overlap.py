"""Overlap against message size for a non-blocking benchmark, from the table's overlap columns.

Solid: OMB's overlap (%), dashed: IMB's, against message size (log). Runs and configurations are grouped as
in the latency figure (``curves``), and by the same rule (``--by``):

- one curve per run and configuration (``by="run"``): OMB's overlap averaged across ranks, the band its
  min..max across ranks; IMB's averaged across ranks;
- merged by configuration (``by="config"``, past a handful of runs): the line is the median over runs of
  each run's OMB (and IMB) average, the band p10..p90 (or min..max) of those values over runs
  (launch-to-launch spread), and the newest run's OMB average is drawn as open diamonds.

Only cache-warm results are drawn (a record that does not say counts as warm), as before. A run that
measured one configuration and size twice contributes the median of its values, once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microbench.results import keys
from microbench.results.columns import Table, per_run_medians
from microbench.results.keys import ConfigKey

#: Legend entries past this go beside the axes, where they take no room from them.
LEGEND_INSIDE = 8


@dataclass
class OverlapSeries:
    """One configuration's (and, with ``by="run"``, one run's) overlap per size (%)."""

    label: str
    key: ConfigKey  #: the configuration without size
    runs: int = 1
    sizes: list[int] = field(default_factory=list)
    omb: list[float] = field(default_factory=list)  #: OMB avg (merged: median over runs of it)
    omb_band: list[tuple[float, float] | None] = field(default_factory=list)
    imb: list[float] = field(default_factory=list)  #: IMB avg (merged: median over runs of it)
    newest: list[float | None] = field(default_factory=list)  #: merged: the newest run's OMB avg


def overlap_rows(table: Table, benchmark: str) -> np.ndarray:
    """Indices into ``table.overlap_row`` of ``benchmark``'s cache-warm rows with an OMB average."""
    rows = table.overlap_row
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    warm = table.config_mask(lambda k: k.benchmark == benchmark and k.get("cache") in (None, "warm"))
    return np.flatnonzero(warm[rows] & (table.size[rows] > 0) & np.isfinite(table.overlap["omb_avg"]))


def overlap_series(table: Table, benchmark: str, by: str = "run", band: str = "p10-p90") -> list[OverlapSeries]:
    """The overlap curves of ``benchmark`` (``by``: "run" or "config"; ``band``: the spread over runs when
    merged, "p10-p90", "min-max" or "none")."""
    from microbench.plotting.curves import _run_titles, newest_run

    at = overlap_rows(table, benchmark)
    rows = table.overlap_row[at]
    sweeps = [c.without_size() for c in table.configs]
    groups: dict[tuple, list[int]] = {}
    for i, run, config in zip(at.tolist(), table.run[rows].tolist(), table.config[rows].tolist()):
        groups.setdefault((run if by == "run" else None, sweeps[config]), []).append(i)
    shown = keys.varying_options(k for _, k in groups)
    used = sorted({r for r, _ in groups if r is not None})
    titles = dict(zip(used, _run_titles([table.runs[i] for i in used])))
    newest = newest_run(table, rows) if by == "config" else None
    out = []
    for (run, key), members in groups.items():
        members = np.asarray(members)
        member_rows = table.overlap_row[members]
        parts = [titles[run]] if by == "run" and len(used) > 1 else []
        if shown:
            parts.append(keys.describe_options(key, shown))
        runs = len(np.unique(table.run[member_rows]))
        if by == "config":
            parts.append(f"{runs} run(s)")
        series = OverlapSeries(", ".join(parts), key, runs)
        sizes = table.size[member_rows]
        for size in np.unique(sizes).tolist():
            here = members[sizes == size]
            series.sizes.append(int(size))
            if by == "config":
                _merged_point(series, table, here, band, newest)
            else:
                _run_point(series, table, here)
        out.append(series)
    out.sort(key=lambda s: s.label)
    return out


def _per_run(table: Table, at: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(run, value) per run of the overlap rows ``at`` (a run's duplicates: their median), NaN dropped."""
    values = table.overlap[name][at]
    ok = np.isfinite(values)
    rows = table.overlap_row[at][ok]
    _, run, value = per_run_medians(np.zeros(len(rows), dtype=np.int64), table.run[rows], values[ok])
    return run, value


def _run_point(series: OverlapSeries, table: Table, at: np.ndarray) -> None:
    """One run at one size: its first record (in file order) of this size, as the figure always drew it."""
    first = int(at[0])
    value = {name: float(table.overlap[name][first]) for name in ("omb_avg", "omb_min", "omb_max", "imb_avg")}
    series.omb.append(value["omb_avg"])
    lo, hi = value["omb_min"], value["omb_max"]
    series.omb_band.append((lo, hi) if np.isfinite(lo) and np.isfinite(hi) else None)
    series.imb.append(value["imb_avg"])


def _merged_point(series: OverlapSeries, table: Table, at: np.ndarray, band: str, newest: int | None) -> None:
    from microbench.plotting.curves import BANDS, _spread

    run, omb = _per_run(table, at, "omb_avg")
    series.omb.append(float(np.median(omb)))
    series.omb_band.append(_spread(omb, band) if BANDS.get(band) and len(omb) > 1 else None)
    _, imb = _per_run(table, at, "imb_avg")
    series.imb.append(float(np.median(imb)) if len(imb) else float("nan"))
    hit = np.flatnonzero(run == newest)
    series.newest.append(float(omb[hit[0]]) if len(hit) else None)


def explanation(by: str, band: str) -> str:
    """How the figure's numbers are computed (printed under it)."""
    omb = "solid: OMB max(0, 100 - 100 (overall - compute) / pure)"
    imb = "dashed: IMB 100 max(0, min(1, (pure + compute - overall) / max(pure, compute)))"
    if by == "config":
        spread = "no band" if band == "none" else f"band {band.replace('-', '..')} over runs"
        return (f"{omb}, avg across ranks; line: median over runs, {spread}; diamonds: the newest run\n"
                f"{imb}, avg across ranks, median over runs")
    return f"{omb}, avg across ranks, band min..max across ranks\n{imb}, avg across ranks"


def prepare(table: Table, benchmark: str, by: str = "run", band: str = "p10-p90"):
    """(series, heading) of ``benchmark``'s overlap figure: all it needs of the table."""
    from microbench.plotting.curves import heading

    rows = table.overlap_row[overlap_rows(table, benchmark)]
    return overlap_series(table, benchmark, by, band), heading(table, rows)


def draw(benchmark: str, table: Table, path: str | os.PathLike, by: str = "run",
         band: str = "p10-p90") -> Path | None:
    """Write ``benchmark``'s overlap figure; None when no record of it has overlap figures."""
    series, head = prepare(table, benchmark, by, band)
    return draw_series(benchmark, series, head, path, by, band)


def draw_series(benchmark: str, series: list[OverlapSeries], head, path: str | os.PathLike, by: str,
                band: str) -> Path | None:
    """Write an overlap figure from its series and ``curves.Heading``; None when there are no series."""
    from matplotlib.lines import Line2D

    from microbench.plotting import line_style, new_figure, save, size_axis

    if not series:
        return None
    fig = new_figure(7.5, 4.6)
    ax = fig.subplots(1, 1)
    for i, s in enumerate(series):
        style = line_style(i)
        ax.plot(s.sizes, s.omb, marker="o", markersize=2.5, linewidth=1.2, label=f"{s.label} OMB".strip(), **style)
        spans = [(x, b) for x, b in zip(s.sizes, s.omb_band) if b is not None]
        if spans:
            ax.fill_between([x for x, _ in spans], [b[0] for _, b in spans], [b[1] for _, b in spans],
                            color=style["color"], alpha=0.15, linewidth=0)
        ax.plot(s.sizes, s.imb, linestyle="--", linewidth=1.0, color=style["color"], label=f"{s.label} IMB".strip())
        newest = [(x, y) for x, y in zip(s.sizes, s.newest) if y is not None]
        if newest:
            ax.plot(*zip(*newest), linestyle="none", marker="D", markersize=4, markerfacecolor="none",
                    markeredgecolor=style["color"], markeredgewidth=1.2)
    handles, labels = ax.get_legend_handles_labels()
    if any(s.newest for s in series):
        handles.append(Line2D([], [], linestyle="none", marker="D", markersize=4, markerfacecolor="none",
                              markeredgecolor="black"))
        labels.append(f"newest run ({head.newest})")
    size_axis(ax, [x for s in series for x in s.sizes])
    ax.set_ylim(-2, 102)
    ax.set_ylabel("overlap (%)")
    ax.grid(True, which="major", alpha=0.3)
    if len(handles) <= LEGEND_INSIDE:
        ax.legend(handles, labels, fontsize=7, loc="best")
    else:
        fig.legend(handles, labels, fontsize=6, loc="outside right upper")
    fig.suptitle(f"{benchmark}: overlap with compute\n{', '.join(head.libraries)}", fontsize=10)
    fig.supxlabel(explanation(by, band), fontsize=7)
    return save(fig, path)

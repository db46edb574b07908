"""Latency (or bandwidth) over time: per configuration the raw points, a rolling median with its band, and
the steps found in the series.

Rolling window: ``window(n)`` runs centred on each point (at least 5, about a twentieth of the series), the
line its median and the band its p10..p90; with fewer points than two windows only the points and a line
through them are drawn. A step is a vertical dashed line in the series' colour at the run where it
starts, labelled with its ratio (after / before).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from microbench.plotting import line_style, log_value_axis, new_figure, save


@dataclass
class Line:
    label: str
    points: Sequence[tuple[dt.datetime, float]]
    steps: Sequence[tuple[dt.datetime, float]] = field(default_factory=list)  #: (start, ratio)


def window(n: int) -> int:
    """Runs in the rolling window of a series of n points (odd, at least 5)."""
    w = max(5, n // 20)
    return w + (w % 2 == 0)


def rolling(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, p10, p90) over a centred window of ``width`` points (shrunk at the ends)."""
    half = width // 2
    padded = np.pad(values, half, mode="edge")
    view = np.lib.stride_tricks.sliding_window_view(padded, width)
    lo, med, hi = np.percentile(view, [10, 50, 90], axis=1)
    return med, lo, hi


def draw(series: Sequence[Line], path: str | os.PathLike, ylabel: str, title: str,
         changes: Sequence[tuple[dt.datetime, str]] = (), note: str = "", log: bool = True) -> Path:
    """``changes``: times where the MPI library changed, marked with a dotted line and the new name."""
    import matplotlib.dates as mdates

    fig = new_figure(10, 4.8)
    ax = fig.add_subplot()
    for i, line in enumerate(series):
        _series(ax, line, line_style(i))
    for when, text in changes:
        ax.axvline(when, color="#808080", linestyle=":", linewidth=1)
        ax.annotate(text, (when, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                    va="top", ha="right", color="#606060")
    if log:
        log_value_axis(ax)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("run start (UTC)")
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(True, alpha=0.3)
    if len(series) > 8:  # a long legend goes beside the axes, where it hides no point
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    else:
        ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=10)
    if note:
        fig.supxlabel(note + "; line: rolling median, band: rolling p10..p90, dashed: a step (after/before)",
                      fontsize=7)
    return save(fig, path)


def _series(ax, line: Line, style: dict) -> None:
    if not line.points:
        return
    times, values = zip(*sorted(line.points))
    values = np.asarray(values, dtype=float)
    width = window(len(values))
    if len(values) >= 2 * width:
        ax.plot(times, values, linestyle="none", marker="o", markersize=1.5, alpha=0.35, color=style["color"])
        med, lo, hi = rolling(values, width)
        ax.fill_between(times, lo, hi, color=style["color"], alpha=0.15, linewidth=0)
        ax.plot(times, med, linewidth=1.2, label=line.label, **style)
    else:
        ax.plot(times, values, marker="o", markersize=3, linewidth=1.0, label=line.label, **style)
    for when, ratio in line.steps:
        ax.axvline(when, color=style["color"], linestyle="--", linewidth=1)
        ax.annotate(f"x{ratio:.2f}", (when, 0.02), xycoords=("data", "axes fraction"), fontsize=7,
                    color=style["color"], ha="left", va="bottom")

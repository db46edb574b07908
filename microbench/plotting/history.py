"""Latency (or bandwidth) over time: one line per (benchmark, size, configuration), one point per run."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Sequence

from microbench.plotting import line_style, log_value_axis, new_figure, save


def draw(series: Sequence[tuple[str, Sequence[tuple[dt.datetime, float]]]], path: str | os.PathLike,
         ylabel: str, title: str, changes: Sequence[tuple[dt.datetime, str]] = (), note: str = "",
         log: bool = True) -> Path:
    """``series``: (label, [(time, value)]) each; ``changes``: times where the MPI library changed, marked
    with a dotted vertical line and the new library's name."""
    import matplotlib.dates as mdates

    fig = new_figure(10, 4.8)
    ax = fig.add_subplot()
    for i, (label, points) in enumerate(series):
        if points:
            times, values = zip(*points)
            ax.plot(times, values, marker="o", markersize=3, linewidth=1.2, label=label, **line_style(i))
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
        fig.supxlabel(note, fontsize=7)
    return save(fig, path)

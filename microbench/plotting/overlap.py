"""Overlap against message size for a non-blocking benchmark: one curve per run and configuration.

Solid: OMB's overlap (avg across ranks of per-rank values; band min..max across ranks); dashed: IMB's (avg
across ranks); both in % against message size (log). The series are the latency figure's (``curves``),
so runs and configurations are told apart the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from microbench.records import Run
from microbench.results.load import mpi_library


def overlap_points(runs: list[Run], benchmark: str) -> list[tuple[str, list[int], list[dict]]]:
    """(label, sizes, overlap_pct dicts) per run that holds ``benchmark`` records with an ``overlap`` field."""
    from microbench.plotting.curves import _run_titles

    with_overlap = [r for r in runs if any(res.get("benchmark") == benchmark and isinstance(res.get("overlap"), dict)
                                           for res in r.results)]
    out = []
    for title, run in zip(_run_titles(with_overlap), with_overlap):
        by_size = {}
        for res in run.results:
            if res.get("benchmark") == benchmark and isinstance(res.get("overlap"), dict) \
                    and res.get("cache", "warm") == "warm":
                by_size.setdefault(res["size_bytes"], res["overlap"]["overlap_pct"])
        sizes = sorted(by_size)
        out.append((title if len(with_overlap) > 1 else "", sizes, [by_size[s] for s in sizes]))
    return out


def draw(benchmark: str, summary: str, runs: list[Run], path: str | os.PathLike) -> Path | None:
    """Write ``benchmark``'s overlap figure; None when no run has overlap records of it."""
    from microbench.plotting import line_style, new_figure, save, size_axis

    points = overlap_points(runs, benchmark)
    if not points:
        return None
    fig = new_figure(7.5, 4.6)
    ax = fig.subplots(1, 1)
    for i, (label, sizes, pct) in enumerate(points):
        style = line_style(i)
        ax.plot(sizes, [p["omb"]["avg"] for p in pct], marker="o", markersize=2.5, linewidth=1.2,
                label=f"{label} OMB".strip(), **style)
        ax.fill_between(sizes, [p["omb"]["min"] for p in pct], [p["omb"]["max"] for p in pct], color=style["color"],
                        alpha=0.15, linewidth=0)
        ax.plot(sizes, [p["imb"]["avg"] for p in pct], linestyle="--", linewidth=1.0, color=style["color"],
                label=f"{label} IMB".strip())
    size_axis(ax, [s for _, sizes, _ in points for s in sizes])
    ax.set_ylim(-2, 102)
    ax.set_ylabel("overlap (%)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    libs = sorted({mpi_library(r) for r in runs if any(res.get("benchmark") == benchmark for res in r.results)})
    fig.suptitle(f"{benchmark}: overlap with compute\n{', '.join(libs)}", fontsize=10)
    fig.supxlabel("solid: OMB max(0, 100 - 100 (overall - compute) / pure), avg across ranks, band min..max\n"
                  "dashed: IMB 100 max(0, min(1, (pure + compute - overall) / max(pure, compute))), avg across ranks",
                  fontsize=7)
    return save(fig, path)

"""The figure: measured latency and bandwidth curves with the distribution's weight (calls, time) overlaid."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402

from microbench.errors import UsageError, printable  # noqa: E402
from microbench.output_files import check_target, write_output  # noqa: E402
from microbench.workload.weighting import STATISTICS, Curve  # noqa: E402


def check_figure_path(path: str) -> str:
    """``path`` if a figure may be written there: a suffix matplotlib writes (``w.png``, ``w.pdf``: without one
    matplotlib would add ``.png`` and write another file than the one named), and ``output_files.check_target``."""
    form = Path(path).suffix.lower()[1:]
    known = FigureCanvasBase.get_supported_filetypes()
    if form not in known:
        raise UsageError(f"cannot write figure {printable(path)}: the name must end in one of "
                         f"{', '.join('.' + k for k in sorted(known))}")
    check_target(path, what="figure ")
    return path


def plot_weighting(path: str, weighting: dict, curves: dict[tuple[str, int], Curve], title: str,
                   compute: dict | None = None) -> None:
    """One row per benchmark the distribution uses: latency (left) and bus bandwidth (right) against
    message size, log-log, with each size's share of calls and of predicted time as bars on a right axis.
    With ``compute`` (--tflops), a last row: the iteration as compute plus exposed communication without
    overlap, with the measured overlap (when the results hold it) and with perfect overlap."""
    rows = [r for r in weighting["messages"] if r["phase"] != "setup"]
    used = sorted({_curve_key(r) for r in rows})
    if not used:
        raise UsageError("nothing to plot: no message of the distribution has a measured curve")
    total_calls = sum(r["count"] for r in rows) or 1
    total_time = weighting["time_per_iteration_us"] or 1
    nrows = len(used) + (compute is not None)
    fig, axes = plt.subplots(nrows, 2, figsize=(12, 3.6 * nrows), squeeze=False)
    if compute is not None:
        _iteration_bars(axes[-1], compute)
    for row, key in zip(axes, used):
        curve = curves[key]
        calls, times = defaultdict(float), defaultdict(float)
        for r in rows:
            if _curve_key(r) == key:
                calls[r["bytes"]] += r["count"] / total_calls
                times[r["bytes"]] += r["time_us"] / total_time
        sizes = sorted(calls)
        bandwidth = [(s, b) for s, b in zip(curve.sizes, curve.busbw_gbps) if b]
        for ax, (ys, label) in zip(row, ((list(zip(curve.sizes, curve.latency_us)), "latency (us)"),
                                          (bandwidth, "bus bandwidth (GB/s)"))):
            if ys:
                ax.plot([s for s, _ in ys], [y for _, y in ys], "o-", color="tab:blue", ms=3,
                        label=f"{key[0]}, {key[1]} ranks (measured)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
            weights = ax.twinx()
            widths = [s * 0.3 for s in sizes]
            weights.bar(sizes, [calls[s] for s in sizes], width=widths, align="edge", color="tab:orange",
                        alpha=0.6, label="share of calls")
            weights.bar(sizes, [times[s] for s in sizes], width=[-w for w in widths], align="edge",
                        color="tab:red", alpha=0.6, label="share of time")
            weights.set_ylim(0, 1)
            weights.set_ylabel("share of the iteration")
            if label.startswith("latency"):
                for hows, marker, name in ((("measured", "interpolated"), "x", "priced (measured or interpolated)"),
                                           (("below", "above"), "^", "priced (extrapolated)")):
                    points = sorted({(r["bytes"], r["latency_us"]) for r in rows
                                     if _curve_key(r) == key and r["how"] in hows})
                    if points:
                        ax.plot(*zip(*points), marker, color="black", ms=6, label=name)
            lines, names = ax.get_legend_handles_labels()
            bars, bar_names = weights.get_legend_handles_labels()
            ax.legend(lines + bars, names + bar_names, fontsize=7, loc="upper left")
    fig.suptitle(f"{title}\nlatency statistic {STATISTICS[weighting['statistic']]}; log-log interpolation "
                 "between measured sizes; bars: the distribution's share of calls and of predicted time",
                 fontsize=9)
    fig.tight_layout()
    form = Path(check_figure_path(path)).suffix.lower()[1:]
    try:
        write_output(path, lambda f: fig.savefig(f, format=form, dpi=110), what="figure ")
    finally:
        plt.close(fig)


def _curve_key(row: dict) -> tuple[str, int]:
    """The measured curve that priced a message (``weighting.weigh``'s ``curve``; rows written before it: the
    benchmark it was looked up by)."""
    return row.get("curve") or row["benchmark"], row["measured_ranks"]


def _iteration_bars(row, c: dict) -> None:
    """Left: one iteration as compute + exposed communication, per estimate (s). Right: communication's share."""
    estimates = [("no overlap", c["communication_s"])]
    if "exposed_measured_overlap_s" in c:
        estimates.append(("measured overlap", c["exposed_measured_overlap_s"]))
    estimates.append(("perfect overlap", max(0.0, c["communication_s"] - c["compute_s"])))
    names = [n for n, _ in estimates]
    exposed = [e for _, e in estimates]
    left, right = row
    left.barh(names, [c["compute_s"]] * len(names), color="tab:gray", label="compute")
    left.barh(names, exposed, left=[c["compute_s"]] * len(names), color="tab:red", label="exposed communication")
    left.set_xlabel("seconds per iteration of one device")
    left.legend(fontsize=7, loc="lower right")
    right.bar(names, [100 * e / (c["compute_s"] + e) if c["compute_s"] + e else 0 for e in exposed], color="tab:red")
    right.set_ylabel("exposed communication (% of the iteration)")
    right.set_ylim(0, 100)
    for ax in row:
        ax.grid(True, alpha=0.3)

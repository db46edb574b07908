"""The figure: measured latency and bandwidth curves with the distribution's weight (calls, time) overlaid."""

from __future__ import annotations

from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from microbench.errors import UsageError  # noqa: E402
from microbench.workload.weighting import STATISTICS, Curve  # noqa: E402


def plot_weighting(path: str, weighting: dict, curves: dict[tuple[str, int], Curve], title: str) -> None:
    """One row per benchmark the distribution uses: latency (left) and bus bandwidth (right) against
    message size, log-log, with each size's share of calls and of predicted time as bars on a right axis."""
    rows = [r for r in weighting["messages"] if r["phase"] != "setup"]
    used = sorted({(r["benchmark"], r["measured_ranks"]) for r in rows})
    if not used:
        raise UsageError("nothing to plot: no message of the distribution has a measured curve")
    total_calls = sum(r["count"] for r in rows) or 1
    total_time = weighting["time_per_iteration_us"] or 1
    fig, axes = plt.subplots(len(used), 2, figsize=(12, 3.6 * len(used)), squeeze=False)
    for row, key in zip(axes, used):
        curve = curves[key]
        calls, times = defaultdict(float), defaultdict(float)
        for r in rows:
            if (r["benchmark"], r["measured_ranks"]) == key:
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
                                     if (r["benchmark"], r["measured_ranks"]) == key and r["how"] in hows})
                    if points:
                        ax.plot(*zip(*points), marker, color="black", ms=6, label=name)
            lines, names = ax.get_legend_handles_labels()
            bars, bar_names = weights.get_legend_handles_labels()
            ax.legend(lines + bars, names + bar_names, fontsize=7, loc="upper left")
    fig.suptitle(f"{title}\nlatency statistic {STATISTICS[weighting['statistic']]}; log-log interpolation "
                 "between measured sizes; bars: the distribution's share of calls and of predicted time",
                 fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write figure {path}: {exc}") from exc
    finally:
        plt.close(fig)

"""What number a gate tool reads from a result record: a latency statistic or a bandwidth from it.

- latency (us): ``latency_us[stat]``. p10/p50/p90/p99 are percentiles of all per-iteration samples of
  all timing ranks; avg/min/max are the mean/minimum/maximum across ranks of per-rank means (OMB -f);
  fastest/slowest are the single fastest and slowest samples.
- algbw (GB/s, 1 GB = 1e9 B) = S / latency[stat], busbw = algbw x factor, with S (``algbw_bytes``) and the
  factor (``busbw_factor``) as the record states them (nccl-tests' definitions). With stat ``avg`` this
  is exactly the recorded ``algbw_gbps``/``busbw_gbps``.
- overlap (%, specs only): OMB's overlap of a non-blocking record, ``overlap.overlap_pct.omb[stat]``
  (avg, min or max across ranks; p50: the formula on medians).
- outliers (specs only): what a pairwise-link-test record (benchmark ``pairs``) flagged: its outlier links
  (cells) plus its outlier nodes (participants whose row median stands out: a slow node spoils its whole row,
  which with few nodes hides it from the cell rule); no statistic applies.
- skew (x, specs only): ``stragglers.skew``, the slowest rank's mean latency over the fastest rank's
  (microbench.run.diagnostics.stragglers); no statistic applies.

For ``pairs`` records the statistics are over the pairs, each pair's value being the p50 of its
iterations: ``max`` is the slowest link (for the bandwidth matrix, the highest per-message time).

Default stat: p50 for latency (robust to tails), avg for bandwidth (the recorded value, as nccl-tests).
A latency regression is a rise; a bandwidth regression is a fall; more outliers are worse.
"""

from __future__ import annotations

from microbench.errors import UsageError

LATENCY_STATS = ("p50", "avg", "min", "max", "p10", "p90", "p99", "fastest", "slowest")
METRICS = ("latency", "busbw", "algbw")  #: what compare and history can follow
OUTLIERS = "outliers"  #: a spec-only metric: outlier cells of a pairs record
SKEW = "skew"  #: a spec-only metric: slowest over fastest per-rank mean latency
OVERLAP = "overlap"  #: a spec-only metric: OMB's overlap (%) of a non-blocking record
UNITS = {"latency": "us", "busbw": "GB/s", "algbw": "GB/s", OUTLIERS: "flagged", SKEW: "x", OVERLAP: "%"}


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: choose from {', '.join(METRICS)}")
    return metric


def check_stat(stat: str) -> str:
    if stat not in LATENCY_STATS:
        raise UsageError(f"unknown stat {stat!r}: choose from {', '.join(LATENCY_STATS)}")
    return stat


def default_stat(metric: str) -> str:
    """p50 for latency, avg for bandwidth (what the record's algbw/busbw are computed from) and overlap."""
    return "p50" if metric == "latency" else "avg"


def threshold_what(metric: str, stat: str | None, source: str = "") -> str:
    """How reports name a judged quantity: ``p50 latency``, ``outliers``, ``busbw (from avg<source>)``."""
    if metric == "latency":
        return f"{stat} latency"
    if metric == OUTLIERS:
        return "outliers"
    if metric == OVERLAP:
        return f"{stat} overlap"
    if metric == SKEW:
        return "rank skew (slowest / fastest rank mean)"
    return f"{metric} (from {stat}{source})"


def higher_is_better(metric: str) -> bool:
    """False for latency, outliers and skew (less is better), True for bandwidth."""
    return metric not in ("latency", OUTLIERS, SKEW)


def metric_value(result: dict, metric: str, stat: str) -> float | None:
    """The metric of one result record from latency statistic ``stat``; None when the record lacks it."""
    if metric == OVERLAP:  # avg/min/max across ranks; p50: the formula on medians
        found = ((result.get("overlap") or {}).get("overlap_pct") or {}).get("omb") or {}
        value = found.get("p50_based" if stat == "p50" else stat)
        return float(value) if isinstance(value, (int, float)) else None
    if metric == OUTLIERS:
        found = result.get("outliers")
        return float(len(found) + len(result.get("node_outliers") or ())) if isinstance(found, list) else None
    if metric == SKEW:
        skew = (result.get("stragglers") or {}).get("skew")
        return float(skew) if isinstance(skew, (int, float)) else None
    latency = (result.get("latency_us") or {}).get(stat)
    if metric == "latency":
        return float(latency) if isinstance(latency, (int, float)) else None
    s_bytes = result.get("algbw_bytes")
    factor = result.get("busbw_factor") if metric == "busbw" else 1.0
    if isinstance(latency, (int, float)) and latency > 0 and isinstance(s_bytes, (int, float)) \
            and isinstance(factor, (int, float)):
        return s_bytes / (latency * 1e-6) / 1e9 * factor
    if stat == "avg" and isinstance(result.get(f"{metric}_gbps"), (int, float)):
        return float(result[f"{metric}_gbps"])
    return None


def label(metric: str, stat: str) -> str:
    """Short column label such as ``p50 latency (us)`` or ``busbw from avg (GB/s)``."""
    if metric == "latency":
        return f"{stat} latency ({UNITS[metric]})"
    return f"{metric} from {stat} ({UNITS[metric]})"


def explain(metric: str, stat: str) -> str:
    """One line saying how the metric is computed, for report headers."""
    stat_text = {
        "p10": "p10 of all samples", "p50": "p50 of all samples", "p90": "p90 of all samples",
        "p99": "p99 of all samples", "avg": "mean across ranks of per-rank mean latency",
        "min": "minimum across ranks of per-rank mean latency",
        "max": "maximum across ranks of per-rank mean latency",
        "fastest": "fastest single sample", "slowest": "slowest single sample",
    }[stat]
    if metric == "latency":
        return f"latency (us) = {stat} ({stat_text})"
    factor = " x busbw factor" if metric == "busbw" else ""
    return f"{metric} (GB/s) = S{factor} / {stat} latency ({stat_text})"

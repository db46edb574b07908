"""Per-rank and cross-rank latency summaries; algbw and busbw.

Each rank reduces its own per-iteration samples to a summary first: count, sum, min, max, its mean, and
a histogram on log-spaced bins whose edges are powers of (1 + BIN_GROWTH) microseconds, so every rank's
histogram has the same bins and they add up across ranks. The cross-rank step moves two small
allreduces and one reduce of the histogram (O(bins) per rank, bins spanning only the global min..max),
never the samples themselves.

- avg, min, max: the mean, minimum and maximum across ranks of each rank's mean latency (as OMB -f).
- p10, p50, p90, p99: nearest-rank percentiles of all per-iteration samples of all timing ranks, read
  from the merged histogram as the geometric centre of the bin, clamped to the observed min and max;
  relative error at most sqrt(1 + BIN_GROWTH) - 1 (0.499 %).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

BIN_GROWTH = 0.01
PERCENTILE_REL_ERROR = math.sqrt(1 + BIN_GROWTH) - 1
PERCENTILES = (10, 50, 90, 99)
_LOG_GROWTH = math.log1p(BIN_GROWTH)
_FLOOR_US = 1e-6  # samples are clamped to 1 ps so that log() is defined


class Reducer(Protocol):
    """The collective operations the summary needs (any backend's control plane)."""

    rank: int

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray: ...  # op: "sum" | "min" | "max"

    def reduce_to_root(self, values: np.ndarray, op: str) -> np.ndarray | None: ...


def bin_index(samples_us: np.ndarray) -> np.ndarray:
    """Global histogram bin of each sample: floor(log(x) / log(1 + BIN_GROWTH))."""
    return np.floor(np.log(np.maximum(samples_us, _FLOOR_US)) / _LOG_GROWTH).astype(np.int64)


def percentiles_from_histogram(hist: np.ndarray, lo_bin: int, vmin: float, vmax: float,
                               qs=PERCENTILES) -> dict[str, float]:
    """Nearest-rank percentiles from a merged histogram whose first bin is ``lo_bin``."""
    total = int(hist.sum())
    cum = np.cumsum(hist)
    out = {}
    for q in qs:
        target = max(1, math.ceil(q / 100 * total))
        j = int(np.searchsorted(cum, target))
        centre = math.exp((lo_bin + j + 0.5) * _LOG_GROWTH)
        out[f"p{q}"] = min(max(centre, vmin), vmax)
    return out


def summarize(samples_us: np.ndarray | None, reducer: Reducer) -> dict | None:
    """Cross-rank summary of per-iteration latencies (us); call on every rank, result on rank 0.

    ``samples_us`` is None (or empty) on ranks whose timings do not count (the passive side of a
    ping-pong). Returns the ``latency_us`` dict on rank 0 and None elsewhere.
    """
    has = samples_us is not None and len(samples_us) > 0
    if has:
        samples_us = np.asarray(samples_us, dtype=np.float64)
        mean = float(samples_us.mean())
        mins = np.array([samples_us.min(), -samples_us.max(), mean, -mean])
        sums = np.array([1.0, mean, float(len(samples_us))])
    else:
        mins = np.array([math.inf, math.inf, math.inf, math.inf])
        sums = np.zeros(3)
    gmins = reducer.allreduce(mins, "min")
    gsums = reducer.allreduce(sums, "sum")
    nranks_timing = int(gsums[0])
    if nranks_timing == 0:
        return None if reducer.rank != 0 else {}
    vmin, vmax = float(gmins[0]), float(-gmins[1])
    lo, hi = int(bin_index(np.array([vmin]))[0]), int(bin_index(np.array([vmax]))[0])
    hist = np.zeros(hi - lo + 1, dtype=np.int64)
    if has:
        idx = np.clip(bin_index(samples_us) - lo, 0, hi - lo)
        hist += np.bincount(idx, minlength=hi - lo + 1)
    merged = reducer.reduce_to_root(hist, "sum")
    if reducer.rank != 0:
        return None
    out = {
        "avg": float(gsums[1]) / nranks_timing,
        "min": float(gmins[2]),
        "max": float(-gmins[3]),
    }
    out.update(percentiles_from_histogram(merged, lo, vmin, vmax))
    out["fastest"] = vmin
    out["slowest"] = vmax
    out["samples"] = int(gsums[2])
    out["timing_ranks"] = nranks_timing
    return out


def bandwidth_gbps(nbytes: float, latency_us: float) -> float:
    """Bytes per latency as GB/s (1 GB = 1e9 bytes); 0 when the latency is 0 (or so small that it is 0 s).

    The same expression as ``results.metrics``, so a figure read back from a record equals the one computed
    from its latency, to the last bit."""
    seconds = latency_us * 1e-6
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def first_call_summary(values: list[float] | None, reducer) -> dict | None:
    """Cross-rank first-call figures (us); call on every rank, result on rank 0.

    ``values`` holds this rank's first call on each fresh buffer set (None on ranks that do not time).
    avg/min/max are over ranks of each rank's very first call (``per_rank`` lists them up to 256 ranks);
    with several fresh sets, ``max_across_ranks`` gives each set's slowest rank and their spread."""
    gathered = reducer.gather(values)
    if reducer.rank != 0:
        return None
    per_rank = {r: v for r, v in enumerate(gathered) if v is not None}
    if not per_rank:
        return None
    firsts = [v[0] for v in per_rank.values()]
    out = {"max": max(firsts), "min": min(firsts), "avg": sum(firsts) / len(firsts)}
    if len(gathered) <= 256:
        out["per_rank"] = {str(r): v[0] for r, v in per_rank.items()}
    k = len(next(iter(per_rank.values())))
    out["samples"] = k
    if k > 1:
        maxima = [max(v[j] for v in per_rank.values()) for j in range(k)]
        out["max_across_ranks"] = {"values": maxima, "min": min(maxima), "p50": float(np.median(maxima)),
                                   "max": max(maxima)}
    return out

"""Weighting: what a message distribution costs on measured latency curves of the same collectives.

Latency at a message size comes from the measured curve of the mapped benchmark: the chosen statistic
at a measured size, log-log interpolation between measured sizes, below the smallest size that size's
latency, above the largest size that size's latency scaled linearly with size (its bandwidth held);
both extrapolations are flagged. A send takes its one-way latency; its recv adds nothing (same transfer).
Where only the non-blocking twin was measured (iallreduce for allreduce), its t_pure curve prices the calls.
An all-to-all-v is priced on the alltoallv curve of its own split pattern (``alltoallv[zipf:1.2]``: records whose
``splits`` is that text), else on the uniform split's, flagged (what the skew costs is then not in the price).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from statistics import median

from microbench.benchmarks.workload_sizes import BENCHMARK_FOR
from microbench.workload.interpolation import at_size
from microbench.workload.messages import Message, message_wire

STATISTICS = {"p50": "p50 (median of all samples)", "avg": "avg (mean across ranks of per-rank means)"}

METHOD = ("log-log interpolation between measured sizes; below the smallest measured size its latency, above "
          "the largest its latency times size/largest (bandwidth held); both flagged; a recv costs nothing (its "
          "send carries the time); setup messages are priced once per run, outside the iteration")


@dataclass
class Curve:
    """A measured latency curve: one benchmark at one group size, sizes ascending."""

    benchmark: str
    ranks: int
    sizes: list[int]
    latency_us: list[float]
    busbw_gbps: list[float | None]

    def latency_at(self, size: int) -> tuple[float, str]:
        """Latency (us) at ``size`` bytes and how it was obtained: measured, interpolated, below, above."""
        return at_size(self.sizes, self.latency_us, size, log_values=True,
                       above=lambda last, value: value * size / last)  # above: the last bandwidth


def curve_name(benchmark: str | None, splits: str | None) -> str | None:
    """A curve's name: its benchmark, with the split pattern of an all-to-all-v (``alltoallv[zipf:1.2]``)."""
    return f"{benchmark}[{splits}]" if splits and benchmark else benchmark


def curves_from_results(results: list[dict], statistic: str) -> tuple[dict[tuple[str, int], Curve], list[str]]:
    """Curves per (benchmark, ranks) from result records; notes say what was merged or left out."""
    notes = []
    warm = [r for r in results if r.get("cache", "warm") == "warm"]
    if warm and len(warm) < len(results):
        notes.append(f"{len(results) - len(warm)} cold-cache records left out (warm-cache records are used)")
    lat: dict[tuple, list[float]] = defaultdict(list)
    bw: dict[tuple, list[float]] = defaultdict(list)
    for r in warm or results:
        value = (r.get("latency_us") or {}).get(statistic)
        key = (curve_name(r.get("benchmark"), r.get("splits")), r.get("ranks"), r.get("size_bytes"))
        if not (isinstance(value, (int, float)) and value > 0 and isinstance(key[1], int)
                and isinstance(key[2], int) and key[2] > 0):
            continue
        lat[key].append(float(value))
        if isinstance(r.get("busbw_gbps"), (int, float)):
            bw[key].append(float(r["busbw_gbps"]))
    repeated = sum(1 for v in lat.values() if len(v) > 1)
    if repeated:
        notes.append(f"{repeated} (benchmark, ranks, size) points were measured more than once: "
                     "the median of the records is used")
    points: dict[tuple[str, int], list[int]] = defaultdict(list)
    for bench, ranks, size in lat:
        points[(bench, ranks)].append(size)
    curves = {}
    for (bench, ranks), sizes in points.items():
        sizes.sort()
        curves[(bench, ranks)] = Curve(bench, ranks, sizes, [median(lat[(bench, ranks, s)]) for s in sizes],
                                       [median(bw[(bench, ranks, s)]) if bw[(bench, ranks, s)] else None
                                        for s in sizes])
    return curves, notes


def choose_curve(curves: dict[tuple[str, int], Curve], benchmark: str, group: int | None) -> Curve | None:
    """The curve of ``benchmark`` measured at ``group`` ranks, else at the nearest group size (larger on a tie)."""
    found = [c for (b, _), c in curves.items() if b == benchmark]
    if not found:
        return None
    if group is None:
        return max(found, key=lambda c: c.ranks)
    return min(found, key=lambda c: (abs(math.log(c.ranks / group)), -c.ranks))


def curve_for(curves: dict[tuple[str, int], Curve], m: Message, notes: set) -> tuple[str, Curve | None]:
    """The curve that prices ``m`` (its benchmark's, or the non-blocking twin's t_pure; an all-to-all-v's split's, or
    the uniform split's with a note) and the name it was looked up by."""
    bench = BENCHMARK_FOR[m.collective]
    name = curve_name(bench, m.splits or ("uniform" if bench == "alltoallv" else None))
    curve = choose_curve(curves, name, m.group_size) or choose_curve(curves, "i" + name, m.group_size)
    if curve is None and bench == "alltoallv" and m.splits not in (None, "uniform"):
        uniform = curve_name(bench, "uniform")
        curve = choose_curve(curves, uniform, m.group_size) or choose_curve(curves, "i" + uniform, m.group_size)
        if curve is not None:
            notes.add(f"alltoallv {m.splits}: no curve of that split; priced on the uniform split's (its skew is not "
                      f"in the price: measure run alltoallv --splits {m.splits})")
    return name, curve


def _bin_of(size: int) -> int:
    return size.bit_length() - 1  # [2^k, 2^(k+1))


def weigh(messages: list[Message], curves: dict[tuple[str, int], Curve], statistic: str) -> dict:
    """Predicted communication time per iteration, per collective, per size bin, and the flags behind it. Each
    priced message's row names the curve it was looked up by (``benchmark``, with an all-to-all-v's split) and the
    curve that priced it (``curve``, at ``measured_ranks``: the non-blocking twin's, or the uniform split's)."""
    rows, unpriced, notes = [], set(), set()
    for m in messages:
        # a run of the non-blocking twin alone prices the collective with its t_pure curve
        bench, curve = curve_for(curves, m, notes)
        if curve is None:
            unpriced.add(bench)
            continue
        latency, how = curve.latency_at(m.bytes)
        if m.group_size is None:
            notes.add(f"{m.collective}: group size unknown; priced on the {curve.ranks}-rank curve")
        elif curve.ranks != m.group_size and bench != "latency":
            notes.add(f"{m.collective}: measured with {curve.ranks} ranks, the workload's group has "
                      f"{m.group_size}; the {curve.ranks}-rank curve is used as measured")
        carries = m.collective != "recv"
        rows.append({**m.as_json(), "benchmark": bench, "curve": curve.benchmark, "measured_ranks": curve.ranks,
                     "latency_us": latency, "how": how,
                     "time_us": m.count * latency if carries else 0.0,
                     "moved_bytes": m.count * m.bytes if carries else 0,
                     "wire_bytes": float(message_wire(m)) * m.count
                     if m.group_size else None})
    per_iteration = [r for r in rows if r["phase"] != "setup"]
    total_time = sum(r["time_us"] for r in per_iteration)
    total_calls = sum(r["count"] for r in per_iteration)
    total_bytes = sum(r["moved_bytes"] for r in per_iteration)
    by_collective: dict[str, dict] = {}
    bins: dict[int, dict] = {}
    for r in per_iteration:
        for table, key in ((by_collective, r["collective"]), (bins, _bin_of(r["bytes"]))):
            slot = table.setdefault(key, {"calls": 0, "bytes": 0, "time_us": 0.0})
            slot["calls"] += r["count"]
            slot["bytes"] += r["moved_bytes"]
            slot["time_us"] += r["time_us"]

    def share(part, whole):
        return part / whole if whole else 0.0

    for slot in by_collective.values():
        slot["time_share"] = share(slot["time_us"], total_time)
    extrapolated = sorted({(r["collective"], r["bytes"], r["how"]) for r in rows if r["how"] in ("below", "above")})
    wire = [r["wire_bytes"] for r in per_iteration]
    return {
        "statistic": statistic,
        "method": f"latency statistic {STATISTICS[statistic]}; {METHOD}",
        "time_per_iteration_us": total_time,
        "setup_time_us": sum(r["time_us"] for r in rows if r["phase"] == "setup"),
        "collectives": by_collective,
        "bins": [{"from_bytes": 1 << k, "to_bytes": 1 << (k + 1), **slot,
                  "calls_share": share(slot["calls"], total_calls), "bytes_share": share(slot["bytes"], total_bytes),
                  "time_share": share(slot["time_us"], total_time)} for k, slot in sorted(bins.items())],
        "effective_gbps": total_bytes / total_time / 1e3 if total_time else None,
        "effective_wire_gbps": (sum(wire) / total_time / 1e3
                                if total_time and all(x is not None for x in wire) else None),
        "extrapolated": [{"collective": c, "bytes": b, "how": h} for c, b, h in extrapolated],
        "unpriced": sorted(unpriced),
        "notes": sorted(notes),
        "messages": rows,
    }

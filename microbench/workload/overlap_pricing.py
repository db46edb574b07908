"""Exposed communication: each priced message's time less the share its collective measurably hides.

The non-blocking benchmarks (``microbench run iallreduce ...``) record how much of a collective hides behind
compute at each size (``overlap.overlap_pct``; docs/overlap.md). A message of collective C at size B is
priced as before (microbench.workload.weighting) and its exposed time is time x (1 - overlap / 100), with the
overlap of iC at B: linear in log(size) between measured sizes, the end value below the smallest and above
the largest (both flagged), the curve measured at the message's group size or the nearest. The overlap
statistic follows ``--stat``: p50 reads OMB's formula on medians (``p50_based``), avg its mean across ranks.
A collective without a measured overlap curve is exposed whole (flagged), as the no-overlap bound.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import median

from microbench.workload.interpolation import at_size
from microbench.workload.weighting import choose_curve, curve_name

METHOD = ("exposed time = priced time x (1 - overlap/100), overlap of the collective's non-blocking benchmark "
          "(OMB's definition, compute = R x t_pure as measured) at the message size: linear in log(size) between "
          "measured sizes, end values outside them (flagged); no overlap where none was measured (flagged)")
_FIELD = {"p50": "p50_based", "avg": "avg"}


@dataclass
class OverlapCurve:
    """Measured overlap (%) of one collective at one group size, sizes ascending."""

    benchmark: str  #: the blocking benchmark the workload maps to (allreduce for iallreduce records)
    ranks: int
    sizes: list[int]
    overlap_pct: list[float]
    compute_ratio: float | None = None

    def overlap_at(self, size: int) -> tuple[float, str]:
        """Overlap (%) at ``size`` bytes and how it was obtained: measured, interpolated, below, above."""
        return at_size(self.sizes, self.overlap_pct, size, log_values=False, above=lambda last, value: value)


def overlap_curves(results: list[dict], statistic: str) -> dict[tuple[str, int], OverlapCurve]:
    """Curves per (blocking benchmark, ranks) from result records that carry ``overlap`` (warm cache first)."""
    with_overlap = [r for r in results if isinstance(r.get("overlap"), dict)]
    warm = [r for r in with_overlap if r.get("cache", "warm") == "warm"] or with_overlap
    points: dict[tuple, list[float]] = defaultdict(list)
    ratios: dict[tuple, set] = defaultdict(set)
    for r in warm:
        value = ((r["overlap"].get("overlap_pct") or {}).get("omb") or {}).get(_FIELD[statistic])
        name, ranks, size = curve_name(r.get("benchmark"), r.get("splits")), r.get("ranks"), r.get("size_bytes")
        if isinstance(value, (int, float)) and isinstance(name, str) and isinstance(ranks, int) and \
                isinstance(size, int) and size > 0:
            key = (name[1:] if name.startswith("i") else name, ranks)
            points[(*key, size)].append(float(value))
            ratios[key].add(r["overlap"].get("compute_ratio"))
    by_curve: dict[tuple, list[int]] = defaultdict(list)
    for bench, ranks, size in points:
        by_curve[(bench, ranks)].append(size)
    curves = {}
    for key, sizes in by_curve.items():
        sizes.sort()
        ratio = next(iter(ratios[key])) if len(ratios[key]) == 1 else None
        curves[key] = OverlapCurve(key[0], key[1], sizes, [median(points[(*key, s)]) for s in sizes], ratio)
    return curves


def apply_overlap(weighting: dict, curves: dict[tuple[str, int], OverlapCurve]) -> dict:
    """Add ``overlap_pct``, ``overlap_how`` and ``exposed_us`` to every priced message of a weighting, and
    ``exposed_per_iteration_us``, the flags and the method to the weighting; returns it."""
    unmeasured, flagged = set(), set()
    for row in weighting["messages"]:
        curve = choose_curve(curves, row["benchmark"], row.get("group_size"))
        if curve is None:
            pct, how = 0.0, "not measured"
            if row["collective"] not in ("send", "recv"):
                unmeasured.add(row["collective"])
        else:
            pct, how = curve.overlap_at(row["bytes"])
            if how in ("below", "above"):
                flagged.add((row["collective"], row["bytes"], how))
        row.update(overlap_pct=pct, overlap_how=how, exposed_us=row["time_us"] * (1 - pct / 100))
    per_iteration = [r for r in weighting["messages"] if r["phase"] != "setup"]
    weighting["exposed_per_iteration_us"] = sum(r["exposed_us"] for r in per_iteration)
    weighting["overlap"] = {
        "method": METHOD,
        "curves": {f"{b}@{n}": {"sizes": c.sizes, "overlap_pct": c.overlap_pct, "compute_ratio": c.compute_ratio}
                   for (b, n), c in sorted(curves.items())},
        "not_measured": sorted(unmeasured),
        "extrapolated": [{"collective": c, "bytes": b, "how": h} for c, b, h in sorted(flagged)],
    }
    return weighting

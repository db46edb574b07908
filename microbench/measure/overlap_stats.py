"""A size's overlap figures across ranks, for the record (``overlap``) and the OMB-style non-blocking table.

Each rank reduces its overlapped iterations to means (overall, compute, post, test, wait, us) and computes
OMB's and IMB's overlap from its own means and its own mean t_pure (microbench.measure.overlap). Rank 0 gathers
these few numbers per rank and reports avg/min/max across ranks of each, as the latency statistics; the
overall time also gets p50/p99 of all iterations of all ranks (merged histograms, microbench.measure.stats).
For comparison with the tools' own output: ``omb.of_means`` is OMB's formula on the cross-rank means (what
osu_iallreduce prints) and ``imb.at_slowest_rank`` IMB's formula at the rank with the longest overall time
(what IMB-NBC prints). ``p50_based`` is the mean across ranks of each formula on the rank's medians (overall,
compute, t_pure): on a shared machine a few descheduled iterations dominate the means.
"""

from __future__ import annotations

import numpy as np

from microbench.measure import stats
from microbench.measure.overlap import (
    COMPUTE,
    OVERALL,
    POST,
    TEST,
    WAIT,
    OverlapMeasurement,
    imb_overlap_pct,
    omb_overlap_pct,
)

#: per-rank values gathered to rank 0, in this order
_FIELDS = ("overall_us", "post_us", "compute_us", "test_us", "wait_us", "pure_us", "calibrated_us",
           "calibration_error", "omb", "imb", "omb_p50", "imb_p50")

COLUMNS = ("Size(B)", "Overall(us)", "Compute(us)", "Post(us)", "Test(us)", "Wait(us)", "Pure(us)", "Overlap(%)",
           "IMB(%)", "P50(us)", "P99(us)", "Calib(%)", "Check")
_WIDTHS = (12, 12, 12, 10, 10, 10, 11, 11, 9, 11, 11, 9, 7)


def per_rank_values(m: OverlapMeasurement) -> list[float]:
    """This rank's figures in ``_FIELDS`` order."""
    means = m.parts_us.mean(axis=0) if len(m.parts_us) else np.zeros(5)
    medians = np.median(m.parts_us, axis=0) if len(m.parts_us) else np.zeros(5)
    overall, compute = float(means[OVERALL]), float(means[COMPUTE])
    o50, c50 = float(medians[OVERALL]), float(medians[COMPUTE])
    return [overall, float(means[POST]), compute, float(means[TEST]), float(means[WAIT]), m.pure_us,
            m.calibration.measured_ns / 1e3, m.calibration.error, omb_overlap_pct(overall, compute, m.pure_us),
            imb_overlap_pct(overall, compute, m.pure_us), omb_overlap_pct(o50, c50, m.pure_p50_us),
            imb_overlap_pct(o50, c50, m.pure_p50_us)]


def _across(column: np.ndarray) -> dict:
    return {"avg": float(column.mean()), "min": float(column.min()), "max": float(column.max())}


def summarize(m: OverlapMeasurement | None, reducer, plan) -> dict | None:
    """Collective: the record's ``overlap`` object on rank 0 (None elsewhere, and where nothing was measured)."""
    overall = m.parts_us[:, OVERALL] if m is not None else None
    overall_stats = stats.summarize(overall, reducer)
    gathered = reducer.gather(per_rank_values(m) if m is not None else None)
    if reducer.rank != 0:
        return None
    rows = np.array([g for g in gathered if g is not None], dtype=np.float64)
    if not len(rows):
        return None
    col = {name: rows[:, i] for i, name in enumerate(_FIELDS)}
    means = {name: float(v.mean()) for name, v in col.items()}
    slowest = int(np.argmax(col["overall_us"]))
    figures = {name: _across(col[name]) for name in _FIELDS[1:8]}
    return {
        "kernel": m.kernel, "compute_ratio": plan.compute_ratio, "compute_target_us": m.target_us,
        "num_tests": plan.num_tests, "overall_us": overall_stats, **figures,
        "overlap_pct": {
            "omb": {**_across(col["omb"]), "of_means": omb_overlap_pct(means["overall_us"], means["compute_us"],
                                                                       means["pure_us"]),
                    "p50_based": means["omb_p50"]},
            "imb": {**_across(col["imb"]), "p50_based": means["imb_p50"],
                    "at_slowest_rank": imb_overlap_pct(col["overall_us"][slowest], col["compute_us"][slowest],
                                                       col["pure_us"][slowest])},
        },
    }


def _fmt(values) -> str:
    return "".join(str(v).rjust(w) for v, w in zip(values, _WIDTHS))


def header() -> str:
    """The non-blocking table's header (as OMB's osu_i* tables with -f, plus IMB's overlap and percentiles)."""
    return "#" + _fmt(COLUMNS)[1:]


def row(res: dict) -> str:
    """One size of a non-blocking benchmark: avg across ranks, p50/p99 of the overall time."""
    o = res["overlap"]
    check = {"pass": "pass", "fail": "FAIL", None: "-"}.get(res.get("check"), str(res.get("check")))
    pct = o["overlap_pct"]
    return _fmt([res["size_bytes"], f"{o['overall_us']['avg']:.2f}", f"{o['compute_us']['avg']:.2f}",
                 f"{o['post_us']['avg']:.2f}", f"{o['test_us']['avg']:.2f}", f"{o['wait_us']['avg']:.2f}",
                 f"{o['pure_us']['avg']:.2f}", f"{pct['omb']['avg']:.1f}", f"{pct['imb']['avg']:.1f}",
                 f"{o['overall_us']['p50']:.2f}", f"{o['overall_us']['p99']:.2f}",
                 f"{100 * o['calibration_error']['avg']:+.1f}", check])


def section_lines(opts) -> list[str]:
    """The '#' lines that say how a non-blocking table's figures are made."""
    compute = (f"{opts.compute_us:g} us" if opts.compute_us is not None else f"{opts.compute_ratio:g} x t_pure")
    tests = f"{opts.num_tests} completion tests spread through it" if opts.num_tests else "no completion tests"
    return [f"overlap: post, {opts.kernel} compute of {compute} (calibrated per size; Calib = error of the "
            f"compute alone), {tests}, wait; Pure = t_pure, post + wait back to back (the record's latency)",
            "Overlap(%) = OMB's max(0, 100 - 100 (overall - compute) / pure); IMB(%) = "
            "100 max(0, min(1, (pure + compute - overall) / max(pure, compute))); per rank, avg across ranks"]

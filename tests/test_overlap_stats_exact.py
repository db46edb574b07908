"""A size's overlap figures across ranks, exact and in-process (issue 40: these kill the mutants of
measure/overlap_stats.py that test_overlap.py's one-rank MPI run does not notice; docs/mutation-testing.md).

Three ranks are stood in for by a reducer whose gather hands back what the other ranks would send; the iteration
times are chosen so that every mean and median is exact in binary floating point."""

from __future__ import annotations

import numpy as np
import pytest

from microbench.measure import overlap_stats, stats
from microbench.measure.compute_kernels import Calibration
from microbench.measure.overlap import OverlapMeasurement, OverlapPlan, imb_overlap_pct, omb_overlap_pct
from microbench.options import RunOptions

#: (overall, post, compute, test, wait) us per iteration: means 14, 2, 7, 1, 4; medians of overall 12, compute 6
PARTS = np.array([[10.0, 1.0, 6.0, 1.0, 2.0], [12.0, 2.0, 6.0, 1.0, 4.0], [20.0, 3.0, 9.0, 1.0, 6.0]])
CAL = Calibration(target_ns=7000.0, units=10, chunks=1, measured_ns=7700.0)


def _measurement(parts=PARTS, pure=8.0, pure_p50=7.0) -> OverlapMeasurement:
    return OverlapMeasurement(parts_us=parts, pure_us=pure, pure_p50_us=pure_p50, target_us=7.0, calibration=CAL,
                              kernel={"name": "flops"}, check_errors=None)


class Ranks:
    """Rank RANK of a launch whose other ranks gather OTHERS (the timing statistics see this rank alone)."""

    size = 1

    def __init__(self, others, rank=0):
        self.others, self.rank = others, rank

    def allreduce(self, values, op):
        return np.asarray(values)

    def reduce_to_root(self, values, op):
        return np.asarray(values)

    def gather(self, value):
        return [value, *self.others]


def test_one_rank_s_values_in_field_order():
    got = overlap_stats.per_rank_values(_measurement())
    assert got == [14.0, 2.0, 7.0, 1.0, 4.0, 8.0, 7.7, CAL.error, 12.5, 12.5, 100.0 - 100.0 * 6.0 / 7.0,
                   100.0 * (1.0 / 7.0)]
    assert got[8:] == [omb_overlap_pct(14.0, 7.0, 8.0), imb_overlap_pct(14.0, 7.0, 8.0),
                       omb_overlap_pct(12.0, 6.0, 7.0), imb_overlap_pct(12.0, 6.0, 7.0)]
    assert len(overlap_stats._FIELDS) == len(got)


def test_a_rank_without_iterations_reports_zero_times():
    got = overlap_stats.per_rank_values(_measurement(parts=np.zeros((0, 5))))
    assert got == [0.0, 0.0, 0.0, 0.0, 0.0, 8.0, 7.7, CAL.error, 100.0, 100.0, 100.0, 100.0]


def _other(overall, compute, pure, omb_p50, imb_p50):
    return [overall, 1.0, compute, 0.5, 3.0, pure, 5.0, -0.25, omb_overlap_pct(overall, compute, pure),
            imb_overlap_pct(overall, compute, pure), omb_p50, imb_p50]


def test_the_summary_across_three_ranks():
    plan = OverlapPlan(compute_ratio=1.5, compute_us=None, num_tests=3, kernel="flops")
    slow = _other(40.0, 30.0, 16.0, 30.0, 20.0)  # the slowest rank (overall 40) is the middle one
    fast = _other(10.0, 4.0, 8.0, 50.0, 40.0)
    mine = overlap_stats.per_rank_values(_measurement())
    out = overlap_stats.summarize(_measurement(), Ranks([slow, None, fast]), plan)
    assert out["overall_us"] == stats.summarize(PARTS[:, 0], Ranks([]))
    assert (out["kernel"], out["compute_ratio"], out["compute_target_us"], out["num_tests"]) == ({"name": "flops"},
                                                                                                1.5, 7.0, 3)
    assert set(out) == {"kernel", "compute_ratio", "compute_target_us", "num_tests", "overall_us", "post_us",
                        "compute_us", "test_us", "wait_us", "pure_us", "calibrated_us", "calibration_error",
                        "overlap_pct"}
    rows = [mine, slow, fast]
    for k, name in enumerate(overlap_stats._FIELDS[1:8], start=1):
        column = [r[k] for r in rows]
        assert out[name] == {"avg": sum(column) / 3, "min": min(column), "max": max(column)}, name
    assert out["compute_us"] == {"avg": 41.0 / 3, "min": 4.0, "max": 30.0}
    means = {i: sum(r[i] for r in rows) / 3 for i in range(12)}
    omb = [r[8] for r in rows]
    imb = [r[9] for r in rows]
    assert out["overlap_pct"] == {
        "omb": {"avg": sum(omb) / 3, "min": min(omb), "max": max(omb),
                "of_means": omb_overlap_pct(means[0], means[2], means[5]), "p50_based": means[10]},
        "imb": {"avg": sum(imb) / 3, "min": min(imb), "max": max(imb), "p50_based": means[11],
                "at_slowest_rank": imb_overlap_pct(40.0, 30.0, 16.0)},
    }
    assert imb == [12.5, 100.0 * (6.0 / 30.0), 25.0]  # IMB's overlap at each rank: the slowest one's is its own


def test_only_rank_0_gets_the_summary_and_only_of_ranks_that_measured():
    plan = OverlapPlan(compute_ratio=1.0, compute_us=None, num_tests=0, kernel="flops")
    assert overlap_stats.summarize(_measurement(), Ranks([], rank=1), plan) is None
    assert overlap_stats.summarize(None, Ranks([None, None]), plan) is None


TABLE = [
    "#    Size(B) Overall(us) Compute(us)  Post(us)  Test(us)  Wait(us)   Pure(us) Overlap(%)   IMB(%)    P50(us)"
    "    P99(us) Calib(%)  Check",
    "        1024       14.00        7.00      2.00      1.00      4.00       8.00       12.5     12.5      12.00"
    "      20.00    +10.0   FAIL",
]


def _record(check):
    o = {"overall_us": {"avg": 14.0, "p50": 12.0, "p99": 20.0}, "compute_us": {"avg": 7.0}, "post_us": {"avg": 2.0},
         "test_us": {"avg": 1.0}, "wait_us": {"avg": 4.0}, "pure_us": {"avg": 8.0}, "calibration_error": {"avg": 0.1},
         "overlap_pct": {"omb": {"avg": 12.5}, "imb": {"avg": 12.5}}}
    return {"size_bytes": 1024, "check": check, "overlap": o}


def test_the_table_s_header_and_row_line_up():
    assert overlap_stats.header() == TABLE[0]
    assert overlap_stats.row(_record("fail")) == TABLE[1]
    def ends(line):
        return [i + 1 for i, ch in enumerate(line) if ch != " " and (i + 1 == len(line) or line[i + 1] == " ")]
    assert ends(TABLE[0])[1:] == ends(TABLE[1])  # after the header's '#', every column ends where its value does


@pytest.mark.parametrize("check, shown", [("pass", "pass"), ("fail", "FAIL"), (None, "-"), ("n/a", "n/a")])
def test_the_check_column(check, shown):
    assert overlap_stats.row(_record(check)).endswith(" " + shown)


def test_the_section_lines_say_how_the_figures_are_made():
    ratio = RunOptions(benchmarks=["iallreduce"], sizes=[8], compute_ratio=1.5, num_tests=4, kernel="stream")
    fixed = RunOptions(benchmarks=["iallreduce"], sizes=[8], compute_us=250.0, num_tests=0)
    assert overlap_stats.section_lines(ratio) == [
        "overlap: post, stream compute of 1.5 x t_pure (calibrated per size; Calib = error of the compute alone), "
        "4 completion tests spread through it, wait; Pure = t_pure, post + wait back to back (the record's latency)",
        "Overlap(%) = OMB's max(0, 100 - 100 (overall - compute) / pure); IMB(%) = "
        "100 max(0, min(1, (pure + compute - overall) / max(pure, compute))); per rank, avg across ranks"]
    assert overlap_stats.section_lines(fixed)[0].startswith("overlap: post, flops compute of 250 us (calibrated")
    assert ", no completion tests, wait;" in overlap_stats.section_lines(fixed)[0]

"""Weighting arithmetic on synthetic records of a known power law, read back through microbench.records.

allreduce, 8 ranks: p50 = 10 us * (size / 1 KiB)^0.5, avg twice that, measured at 1, 4, 16 and 64 KiB.
latency, 2 ranks: p50 = 5 us * size / 1 KiB at 1 and 2 KiB. Log-log interpolation of a power law is exact,
so every expected time below is worked out from the law by hand.
"""

import json
import math

import pytest
from fixtures.gate import synth

from microbench.records import read_results
from microbench.workload.compute import compute_vs_communication
from microbench.workload.distribution import Workload
from microbench.workload.messages import Message
from microbench.workload.model import preset
from microbench.workload.weighting import choose_curve, curves_from_results, weigh


def result(bench, size, ranks, p50, cache="warm"):
    """A result whose avg latency is twice its p50 (its bandwidths follow from the avg, as recorded)."""
    return synth.with_latency(synth.result(bench, size, p50, ranks=ranks, run_id="r1", cache=cache),
                              {"p50": p50, "avg": 2 * p50, "min": 2 * p50, "max": 2 * p50})


@pytest.fixture
def records(tmp_path):
    lines = [synth.run_line("r1", ranks=8)]
    lines += [result("allreduce", 1024 * 4 ** i, 8, 10 * 2 ** i) for i in range(4)]   # 10, 20, 40, 80 us
    lines += [result("allreduce", 1024, 8, 10), result("allreduce", 1024, 8, 40)]     # median of 10, 10, 40: 10
    lines.append(result("allreduce", 4096, 8, 9999, cache="cold"))                     # left out
    lines += [result("latency", 1024, 2, 5), result("latency", 2048, 2, 10)]
    lines.append({"type": "end", "run_id": "r1", "status": "complete", "reason": "", "results": len(lines) - 1})
    path = tmp_path / "synthetic.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return read_results([path])


MESSAGES = [
    Message("allreduce", 4096, 3, 8, "gradients"),     # measured: 20 us each
    Message("allreduce", 8192, 1, 8, "gradients"),     # interpolated: 10 * 8^0.5 = 28.2843 us
    Message("allreduce", 512, 2, 8, "gradients"),      # below 1 KiB: 10 us each
    Message("allreduce", 262144, 1, 8, "gradients"),   # above 64 KiB: 80 us * 4 = 320 us
    Message("send", 1536, 2, 2, "forward"),            # interpolated: 7.5 us each
    Message("recv", 1536, 2, 2, "forward"),            # carried by the send
    Message("broadcast", 4096, 1, 8, "setup"),         # no broadcast curve
]
TOTAL_US = 60 + 10 * math.sqrt(8) + 20 + 320 + 15


def test_curve_lookup(records):
    curves, notes = curves_from_results(records, "p50")
    curve = curves[("allreduce", 8)]
    assert curve.sizes == [1024, 4096, 16384, 65536] and curve.latency_us == [10, 20, 40, 80]
    assert curve.latency_at(4096) == (20, "measured")
    assert curve.latency_at(8192)[0] == pytest.approx(10 * math.sqrt(8)) and curve.latency_at(8192)[1] == "interpolated"
    assert curve.latency_at(100) == (10, "below")
    assert curve.latency_at(1 << 20) == (80 * 16, "above")
    assert any("cold-cache" in n for n in notes) and any("median" in n for n in notes)


def test_predicted_time_bins_and_bandwidth(records):
    curves, _ = curves_from_results(records, "p50")
    w = weigh(MESSAGES, curves, "p50")
    assert w["time_per_iteration_us"] == pytest.approx(TOTAL_US)
    assert w["collectives"]["allreduce"]["time_us"] == pytest.approx(TOTAL_US - 15)
    assert w["collectives"]["send"]["time_us"] == pytest.approx(15)
    assert w["collectives"]["recv"] == {"calls": 2, "bytes": 0, "time_us": 0.0, "time_share": 0.0}
    bins = {b["from_bytes"]: b for b in w["bins"]}
    assert sorted(bins) == [512, 1024, 4096, 8192, 262144]
    # 11 calls (the recvs count as calls), 286,720 bytes moved (recv bytes are their send's)
    assert bins[1024]["calls_share"] == pytest.approx(4 / 11)
    assert bins[4096]["bytes_share"] == pytest.approx(12288 / 286720)
    assert bins[262144]["time_share"] == pytest.approx(320 / TOTAL_US)
    assert sum(b["time_share"] for b in w["bins"]) == pytest.approx(1)
    assert w["effective_gbps"] == pytest.approx(286720 / TOTAL_US / 1e3)
    # wire: allreduce 2B*7/8 per call, send B
    wire = (3 * 4096 + 8192 + 2 * 512 + 262144) * 2 * 7 / 8 + 2 * 1536
    assert w["effective_wire_gbps"] == pytest.approx(wire / TOTAL_US / 1e3)
    assert {(e["bytes"], e["how"]) for e in w["extrapolated"]} == {(512, "below"), (262144, "above")}
    assert w["unpriced"] == ["broadcast"] and w["setup_time_us"] == 0
    assert "p50" in w["method"] and "log-log" in w["method"]


def test_avg_statistic(records):
    curves, _ = curves_from_results(records, "avg")
    assert weigh(MESSAGES, curves, "avg")["time_per_iteration_us"] == pytest.approx(2 * TOTAL_US)


def test_group_size_differences_are_stated(records):
    curves, _ = curves_from_results(records, "p50")
    w = weigh([Message("allreduce", 4096, 1, 16, "gradients"), Message("allreduce", 4096, 1, None, "trace")],
              curves, "p50")
    assert any("measured with 8 ranks" in n and "16" in n for n in w["notes"])
    assert any("group size unknown" in n for n in w["notes"])


def test_choose_curve_prefers_the_same_then_the_nearest_group(records):
    curves, _ = curves_from_results(records + [dict(r, ranks=4) for r in records if r["benchmark"] == "allreduce"],
                                    "p50")
    assert choose_curve(curves, "allreduce", 4).ranks == 4
    assert choose_curve(curves, "allreduce", 7).ranks == 8    # |log 8/7| < |log 4/7|
    assert choose_curve(curves, "allreduce", None).ranks == 8
    assert choose_curve(curves, "alltoall", 8) is None


def test_compute_against_communication():
    w = Workload(preset("19M"), "ddp", dp=8)
    # 6 * 71,459,840 params * (4 * 2048) tokens = 3,512,394,055,680 FLOP; at 100 TFLOP/s 35.1239 ms
    compute_s = 3_512_394_055_680 / 100e12
    c = compute_vs_communication(w, 2 * compute_s * 1e6, 100)
    assert c["compute_s"] == pytest.approx(compute_s)
    assert c["share_no_overlap"] == pytest.approx(2 / 3)
    assert c["share_perfect_overlap"] == pytest.approx(0.5)
    c = compute_vs_communication(w, 0.5 * compute_s * 1e6, 100)
    assert c["share_perfect_overlap"] == 0 and c["iteration_perfect_overlap_s"] == pytest.approx(compute_s)
    # tensor and pipeline parallel ranks each compute 1/(t*p) of the replica's work
    w3 = Workload(preset("1.3B"), "3d", tp=2, pp=2, microbatches=4)
    assert compute_vs_communication(w3, 1, 1)["flops_per_device"] == 6 * 1_418_596_352 * 4 * 2048 * 4 / 4


def test_figure_draws_the_curve_that_priced_each_message(tmp_path):
    """issue 42: a skewed all-to-all-v priced on the uniform split's curve and an allreduce priced on its
    non-blocking twin's are drawn on those curves (the figure looked up the names they were asked by: KeyError)."""
    from microbench.workload.figure import plot_weighting
    from microbench.workload.weighting import Curve

    sizes = [1024, 4096, 16384]
    curves = {("alltoallv[uniform]", 4): Curve("alltoallv[uniform]", 4, sizes, [10.0, 20.0, 40.0], [1.0, 2.0, 3.0]),
              ("iallreduce", 4): Curve("iallreduce", 4, sizes, [5.0, 10.0, 20.0], [1.0, 2.0, 3.0])}
    messages = [Message("alltoallv", 4096, 2, 4, "forward", splits="zipf:1.2"),
                Message("alltoallv", 8192, 2, 4, "forward", splits="zipf:1.2/T"),
                Message("allreduce", 4096, 1, 4, "gradients")]
    weighting = weigh(messages, curves, "p50")
    assert [(r["benchmark"], r["curve"]) for r in weighting["messages"]] == [
        ("alltoallv[zipf:1.2]", "alltoallv[uniform]"), ("alltoallv[zipf:1.2/T]", "alltoallv[uniform]"),
        ("allreduce", "iallreduce")]
    assert weighting["time_per_iteration_us"] == pytest.approx(2 * 20 + 2 * 20 * math.sqrt(2) + 10)
    path = tmp_path / "w.png"
    plot_weighting(str(path), weighting, curves, "fallback curves")
    assert path.stat().st_size > 1000

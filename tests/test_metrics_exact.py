"""The judged numbers' table, the expected-values table and the run selection, exact and in-process (issue 40:
these kill the mutants of results/metrics.py, results/expected.py and results/selection.py that the gate tests do
not notice; docs/mutation-testing.md)."""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import pytest

from microbench.errors import UsageError
from microbench.measure.stats import bandwidth_gbps
from microbench.results import expected, metrics, selection
from microbench.results.expected import Row


# ------------------------------------------------------------------------------ results/metrics.py
def test_the_table_s_entries():
    t = metrics.TABLE
    assert list(t) == ["latency", "busbw", "algbw", "first_call", "overlap", "outliers", "skew", "peak_share"]
    assert metrics.METRICS == ("latency", "busbw", "algbw")
    assert metrics.UNITS == {"latency": "us", "busbw": "GB/s", "algbw": "GB/s", "first_call": "us", "overlap": "%",
                             "outliers": "flagged", "skew": "x", "peak_share": "share"}
    assert metrics.SPEC_KEYS == {"max_latency_us": ("latency", "max"), "min_busbw_gbps": ("busbw", "min"),
                                 "min_algbw_gbps": ("algbw", "min"), "max_first_call_us": ("first_call", "max"),
                                 "min_overlap_pct": ("overlap", "min"), "max_outliers": ("outliers", "max"),
                                 "max_rank_skew": ("skew", "max"), "min_peak_share": ("peak_share", "min")}
    assert [n for n, m in t.items() if m.higher_is_better] == ["busbw", "algbw", "overlap", "peak_share"]
    assert {n: m.default_stat for n, m in t.items() if m.default_stat} == {"latency": "p50", "busbw": "avg",
                                                                           "algbw": "avg", "overlap": "avg"}
    assert t["overlap"].stats == ("avg", "min", "max", "p50") and t["skew"].stats == ()
    assert metrics.NUMBER_COLUMNS == ("algbw_bytes", "algbw_gbps", "busbw_gbps", "busbw_factor", "first_call_us.max",
                                      "overlap.overlap_pct.omb.avg", "overlap.overlap_pct.omb.min",
                                      "overlap.overlap_pct.omb.max", "overlap.overlap_pct.omb.p50_based", "outliers",
                                      "stragglers.skew", "peak.share", "launch.bound")


def _numbers(latency, algbw_bytes=1e6, factor=1.5, algbw=11.0, busbw=22.0, stat="p50"):
    return {f"latency_us.{stat}": np.array(latency, dtype=np.float64), "algbw_bytes": np.full(len(latency), algbw_bytes),
            "busbw_factor": np.full(len(latency), factor), "algbw_gbps": np.full(len(latency), algbw),
            "busbw_gbps": np.full(len(latency), busbw)}


def test_bandwidth_to_the_bit():
    """algbw from a latency statistic is stats.bandwidth_gbps's expression, busbw that times the factor."""
    lat = [7.0, 0.3, 123.456]
    algbw = metrics.values(_numbers(lat), "algbw", "p50")
    busbw = metrics.values(_numbers(lat), "busbw", "p50")
    assert algbw.tolist() == [bandwidth_gbps(1e6, v) for v in lat]
    assert busbw.tolist() == [bandwidth_gbps(1e6, v) * 1.5 for v in lat]
    assert algbw.dtype == np.float64


def test_a_missing_latency_falls_back_to_the_recorded_figure_at_avg_only():
    lat = [0.0, np.nan, -2.0, -0.5, 4.0]
    avg = _numbers(lat, stat="avg")
    assert metrics.values(avg, "algbw", "avg").tolist() == [11.0, 11.0, 11.0, 11.0, bandwidth_gbps(1e6, 4.0)]
    assert metrics.values(avg, "busbw", "avg").tolist() == [22.0, 22.0, 22.0, 22.0, bandwidth_gbps(1e6, 4.0) * 1.5]
    got = metrics.values(_numbers(lat), "busbw", "p50")
    assert np.isnan(got[:4]).all() and got[4] == bandwidth_gbps(1e6, 4.0) * 1.5
    # 0 bytes over 0 us is no figure either
    assert np.isnan(metrics.values(_numbers([0.0], algbw_bytes=0.0), "algbw", "p50")).all()


def test_the_columns_each_metric_reads():
    assert metrics.TABLE["busbw"].columns("p99") == ("latency_us.p99", "algbw_bytes", "algbw_gbps", "busbw_gbps",
                                                     "busbw_factor")
    assert metrics.TABLE["algbw"].columns("avg") == ("latency_us.avg", "algbw_bytes", "algbw_gbps", "busbw_gbps")
    assert metrics.latency_stats_read("busbw", "p99") == ("p99",)
    assert metrics.latency_stats_read("latency", "fastest") == ("fastest",)
    assert metrics.latency_stats_read("first_call", None) == ()
    assert metrics.TABLE["overlap"].columns("p50") == ("overlap.overlap_pct.omb.p50_based",)
    assert metrics.TABLE["latency"].reads("p90") == "latency_us.p90"
    assert metrics.TABLE["busbw"].reads("p90") == "busbw from p90"


@pytest.mark.parametrize("value, finite", [(1, True), (2.5, True), (-3.0, True), (True, False), (float("inf"), False),
                                           (float("nan"), False), (10 ** 400, False), ("1", False), (None, False)])
def test_finite_numbers(value, finite):
    assert metrics._finite(value) is finite


def test_limit_problems():
    pos = metrics.TABLE["latency"].limit_problem
    assert pos(1e-9, ()) is None and pos(5, ()) is None
    for bad in (0, -1.0, True, float("inf"), "7"):
        assert pos(bad, ()) == f"must be a positive number (got {str(bad)[:40]})"
    assert pos("x" * 50, ()) == f"must be a positive number (got {'x' * 40})"
    out = metrics.TABLE["outliers"].limit_problem
    assert out(0, ("pairs",)) is None and out(3, ("pairs",)) is None
    for bad in (-1, 1.0, True, 10 ** 400):
        assert out(bad, ("pairs",)) == f"must be a whole number of at least 0 (got {str(bad)[:40]})"
    assert out(0, ("allreduce",)) == out(0, ("pairs", "allreduce")) == out(0, ()) == \
        'applies to benchmark = "pairs" alone (the pairwise link test)'
    ratio = metrics.TABLE["skew"].limit_problem
    assert ratio(1, ()) is None and ratio(1.5, ()) is None
    for bad in (0.999, 0, float("nan"), "2", "y" * 50):
        assert ratio(bad, ()) == ("must be a number of at least 1, a larger figure over a smaller one "
                                  f"(got {str(bad)[:40]})")
    assert ratio("y" * 50, ()).endswith(f"(got {'y' * 40})")
    share = metrics.TABLE["peak_share"].limit_problem
    assert share(1, ()) is None and share(0.8, ()) is None and share(1e-12, ()) is None
    for bad in (0, -0.5, 1.0000001, float("nan"), None, "z" * 50):
        assert share(bad, ()) == ("must be a share above 0 and at most 1, e.g. 0.8 for 80 % of the path's peak "
                                  f"(got {str(bad)[:40]})")
    assert share("z" * 50, ()).endswith(f"(got {'z' * 40})")
    assert [n for n, m in metrics.TABLE.items() if m.limit_problem is pos] == ["latency", "busbw", "algbw",
                                                                              "first_call", "overlap"]


def test_launch_bound_marks():
    assert metrics.launch_bound({"launch.bound": np.array([1.0, 0.0, np.nan, 2.0])}).tolist() == [True, False, False,
                                                                                                  False]
    assert metrics.MARK_COLUMNS == ("launch.bound",) and metrics.LAUNCH_MARKED == ("latency", "busbw", "algbw")


def test_names_and_statistics():
    assert metrics.metric("skew") is metrics.TABLE["skew"]
    with pytest.raises(UsageError, match="unknown metric 'nope': choose from latency, busbw, algbw, first_call"):
        metrics.metric("nope")
    assert metrics.check_metric("algbw") == "algbw"
    with pytest.raises(UsageError, match=r"unknown metric 'skew': choose from latency, busbw, algbw$"):
        metrics.check_metric("skew")
    assert metrics.check_stat("slowest") == "slowest"
    with pytest.raises(UsageError, match="unknown stat 'p95': choose from p50, avg, min, max, p10, p90, p99, fastest"):
        metrics.check_stat("p95")
    assert [metrics.default_stat(n) for n in ("latency", "busbw", "skew")] == ["p50", "avg", None]
    assert metrics.stat_for("latency", "p99") == "p99" and metrics.stat_for("latency", None) == "p50"
    assert metrics.stat_for("overlap", "p99") == "avg" and metrics.stat_for("skew", "p99") is None
    assert metrics.higher_is_better("busbw") and not metrics.higher_is_better("latency")


def test_how_reports_name_a_number():
    assert metrics.threshold_what("latency", "p99") == "p99 latency"
    assert metrics.threshold_what("busbw", "avg", " of the baseline") == "busbw (from avg of the baseline)"
    assert metrics.threshold_what("overlap", "min") == "min overlap"
    assert metrics.threshold_what("first_call", None) == "first call (slowest rank)"
    assert metrics.threshold_what("skew", None) == "rank skew (slowest / fastest rank mean)"
    assert metrics.threshold_what("outliers", None) == "outliers"
    assert metrics.threshold_what("peak_share", None) == "busbw share of the path's peak"
    assert metrics.label("latency", "p50") == "p50 latency (us)"
    assert metrics.label("busbw", "avg") == "busbw from avg (GB/s)"
    assert metrics.explain("latency", "p10") == "latency (us) = p10 (p10 of all samples)"
    assert metrics.explain("busbw", "min") == ("busbw (GB/s) = S x busbw factor / min latency (minimum across ranks "
                                               "of per-rank mean latency)")
    assert metrics.explain("algbw", "fastest") == "algbw (GB/s) = S / fastest latency (fastest single sample)"


def test_one_record_s_numbers():
    rec = {"latency_us": {"p50": 4.0, "avg": True}, "algbw_bytes": 1000, "first_call_us": 3.0,
           "outliers": [{"pair": [0, 1]}, {"pair": [1, 2]}], "node_outliers": [{"index": 2}]}
    got = metrics.record_numbers(rec, ("latency_us.p50", "latency_us.avg", "algbw_bytes", "first_call_us.max",
                                       "peak.share", "outliers"))
    assert {k: v.tolist() for k, v in got.items() if not np.isnan(v).all()} == {
        "latency_us.p50": [4.0], "algbw_bytes": [1000.0], "outliers": [3.0]}
    assert set(got) == {"latency_us.p50", "latency_us.avg", "algbw_bytes", "first_call_us.max", "peak.share",
                        "outliers"}
    assert metrics.record_numbers({"outliers": [], "node_outliers": None}, ("outliers",))["outliers"].tolist() == [0.0]
    assert np.isnan(metrics.record_numbers({"outliers": "none"}, ("outliers",))["outliers"]).all()
    assert metrics.metric_value(rec, "latency", "p50") == 4.0
    assert metrics.metric_value(rec, "latency", "p99") is None
    assert metrics.metric_value(rec, "outliers", None) == 3.0
    assert metrics.metric_value({"latency_us": {"p50": 8.0}, "algbw_bytes": 4000}, "algbw", "p50") == \
        bandwidth_gbps(4000, 8.0)


# ------------------------------------------------------------------------------ results/expected.py
ROW = dict(id="r", platform="P", what="ring", value=370.0, source="s")


def test_the_shipped_table_loads_whole_once_into_values():
    rows = expected.rows()
    assert expected.rows() is rows  # read once per process
    with pytest.raises(AttributeError):
        rows[0].value = 1.0
    assert hash(rows[0]) == hash(Row(**{f: getattr(rows[0], f) for f in rows[0].__dataclass_fields__}))
    assert len(rows) == 18 and len({r.id for r in rows}) == 18 and rows[0].id == "h100-sxm-nvlink-wire"
    assert {r.unit for r in rows if r.what == "latency"} == {"us"} and rows[0].unit == "GB/s"


def test_the_gpu_name_of_a_run():
    assert expected.gpu_name({"device": {"name": "A"}, "torch": {"device_name": "B"}}) == "A"
    assert expected.gpu_name({"device": {"name": ""}, "torch": {"device_name": "B"}}) == "B"
    assert expected.gpu_name({"device": "A", "torch": ["B"]}) is None


def test_which_rows_apply():
    gpu = Row(**ROW, gpu="h100", hosts="one")
    assert expected.applies(gpu, {"device": {"name": "NVIDIA H100 80GB"}, "hosts": ["n0"]})
    assert expected.applies(gpu, {"device": {"name": "NVIDIA H100 80GB"}})  # no hosts named: not judged on them
    assert not expected.applies(gpu, {"device": {"name": "NVIDIA H100 80GB"}, "hosts": ["n0", "n1"]})
    assert not expected.applies(gpu, {"device": {"name": "NVIDIA A100"}, "hosts": ["n0"]})
    assert not expected.applies(gpu, {"hosts": ["n0"]})
    several = Row(**ROW, gpu="H100", hosts="several")
    assert expected.applies(several, {"device": {"name": "H100"}, "hosts": ["a", "b"]})
    assert not expected.applies(several, {"device": {"name": "H100"}, "hosts": ["a"]})
    net = Row(**ROW, network="4X NDR")
    assert expected.applies(net, {"path_peak": {"link": "mlx5_0:1 400 Gb/sec (4x ndr)"}})
    assert not expected.applies(net, {"path_peak": {"link": "100 Gbit/s"}})
    assert not expected.applies(net, {"path_peak": "4X NDR"})
    assert not expected.applies(Row(**ROW), {"hosts": ["a"]})  # a row of no GPU and no network is about nothing
    assert not expected.applies(Row(**ROW, hosts="one"), {"hosts": ["a"]})


def test_rows_for_a_benchmark(monkeypatch):
    rows = (Row(**{**ROW, "id": "any"}, gpu="X"), Row(**{**ROW, "id": "ar"}, gpu="X", benchmark="allreduce"),
            Row(**{**ROW, "id": "ag"}, gpu="X", benchmark="allgather"), Row(**{**ROW, "id": "other"}, gpu="Y"))
    monkeypatch.setattr(expected, "rows", lambda: rows)
    x = {"device": {"name": "X"}}
    assert [r.id for r in expected.rows_for(x, "allreduce")] == ["any", "ar"]
    assert [r.id for r in expected.rows_for(x)] == ["any"]


def test_a_result_over_a_row():
    ring, latency = Row(**ROW), Row(**{**ROW, "what": "latency", "value": 3.0})
    assert expected.compare(ring, busbw_gbps=296.0) == 296.0 / 370.0
    assert expected.compare(ring, busbw_gbps=0.0) == 0.0 and expected.compare(ring) is None
    assert expected.compare(latency, latency_us=4.0) == 0.75
    assert expected.compare(latency, latency_us=0.0) is None and expected.compare(latency, busbw_gbps=5.0) is None
    assert expected.describe(ring, 0.8) == "80 % of this platform's expected ring ceiling (370 GB/s, P)"
    assert expected.describe(latency, None) == "- of this platform's expected small-message latency (3 us, P)"
    assert expected.describe(Row(**{**ROW, "what": "odd"}), 1.0) == "100 % of this platform's odd (370 GB/s, P)"


# ------------------------------------------------------------------------------ results/selection.py
def _args(*argv):
    p = argparse.ArgumentParser()
    selection.add_arguments(p)
    return p.parse_args(list(argv))


def test_the_options():
    a = _args("--hosts", " n1, n0,,", "--backend", "torch", "--mpi", "Open MPI")
    s = selection.Selection.from_args(a)
    assert (s.hosts, s.backend, s.mpi) == (("n0", "n1"), "torch", "Open MPI")
    assert selection.Selection.from_args(_args()) == selection.Selection()
    assert selection.Selection.from_args(argparse.Namespace()).hosts is None


def test_a_run_s_hosts_and_mpi():
    assert selection.host_set({"hosts": ["b", "a", 3]}) == ("3", "a", "b")
    assert selection.host_set({"hosts": "a"}) == ()
    assert selection.mpi_text({"mpi": {"library_version": "  Open MPI v5.0.3 \nmore"}}) == "Open MPI v5.0.3"
    assert selection.mpi_text({"mpi": {"library_version": ""}}) == ""
    assert selection.mpi_text({"mpi": "MPICH"}) == "" and selection.mpi_text({}) == ""


RUN = {"hosts": ["n1", "n0"], "backend": "mpi", "mpi": {"library_version": "Open MPI v5.0.3\nx"}}


def test_what_a_selection_admits_and_counts():
    everything = selection.Selection()
    assert everything.admits(RUN) and everything.admits({}) and everything.admits({"orphan": True})
    assert everything.notes() == [] and everything.describe() == ""
    s = selection.Selection(hosts=("n0", "n1"), backend="mpi", mpi="open mpi V5")
    assert s.admits(RUN)
    assert not s.admits({}) and not s.admits({**RUN, "orphan": True})
    assert not s.admits({**RUN, "hosts": ["n0"]}) and not s.admits({**RUN, "hosts": None})
    assert not s.admits({**RUN, "backend": "torch"})
    assert not s.admits({**RUN, "mpi": {"library_version": "MPICH 4.2"}}) and not s.admits({**RUN, "mpi": None})
    assert s.skipped == Counter({"without a readable run line": 2, "on hosts n0": 1, "on hosts (none named)": 1,
                                 "with backend torch": 1, "with MPI MPICH 4.2": 1, "with MPI (none)": 1})
    assert s.describe() == "hosts n0,n1, backend mpi, MPI ~ 'open mpi V5'"
    assert s.notes() == ["skipped 7 run(s) outside the selection (hosts n0,n1, backend mpi, MPI ~ 'open mpi V5'): "
                         "2 without a readable run line; 1 on hosts n0; 1 on hosts (none named); 1 with backend "
                         "torch; 1 with MPI MPICH 4.2; 1 with MPI (none)"]


def test_notes_name_the_six_commonest_reasons():
    s = selection.Selection(backend="mpi")
    for k in range(8):
        for _ in range(8 - k):
            s.admits({"backend": f"b{k}"})
    assert s.notes() == ["skipped 36 run(s) outside the selection (backend mpi): 8 with backend b0; 7 with backend "
                         "b1; 6 with backend b2; 5 with backend b3; 4 with backend b4; 3 with backend b5"]
    assert selection.Selection(hosts=()).describe() == "hosts "


def test_mixture_notes():
    one = {"hosts": ["a"], "mpi": {"library_version": "Open MPI"}}
    assert selection.mixture_notes([one, one]) == []
    assert selection.mixture_notes([]) == []
    runs = [one, one, {"hosts": ["b", "a"], "mpi": {"library_version": "MPICH"}}, {}, {"hosts": ["c"]}, {"hosts": ["d"]}]
    assert selection.mixture_notes(runs) == [
        "the runs span 5 host sets: a (2 runs); a,b (1 runs); (none named) (1 runs); c (1 runs); --hosts picks one",
        "the runs span 3 MPI libraries: (none) (3 runs); Open MPI (2 runs); MPICH (1 runs); --mpi picks one"]

"""What jobs and peers write, read: NCCL Inspector files and nccl-tests -J JSON into records (``import``) and into
``workload --trace``; a job's operations beside a measured curve (report, plot); the reference table of expected
values. Fixtures: tests/fixtures/nccl (public examples, cited in its README)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from microbench.records.validate import file_problems
from microbench.results import expected, job_overlay
from microbench.results.load import load_table

from conftest import microbench, read_jsonl, results_of, run_process

NCCL = Path(__file__).parent / "fixtures" / "nccl"
INSPECTOR = NCCL / "inspector-v4.jsonl"
NCCL_TESTS = NCCL / "nccl-tests-broadcast.json"


def _import(tmp_path, tool: str, *files) -> Path:
    out = tmp_path / f"{tool}.jsonl"
    proc = run_process([sys.executable, "-m", "microbench", "import", tool, *map(str, files), "--out", str(out)])
    assert proc.returncode == 0, proc.output
    assert file_problems(out) == []
    return out


def test_inspector_records_become_results_whose_busbw_is_the_plugins(tmp_path):
    out = _import(tmp_path, "nccl-inspector", INSPECTOR)
    lines = [json.loads(line) for line in INSPECTOR.read_text().splitlines()]
    by_key = {}
    for item in lines:
        perf, n = item["coll_perf"], item["header"]["n_ranks"]
        bench = {"AllReduce": "allreduce", "ReduceScatter": "reduce_scatter"}[perf["coll"]]
        size = perf["coll_msg_size_bytes"] * (n if bench == "reduce_scatter" else 1)
        by_key.setdefault((bench, size, n), []).append(perf)
    results = results_of(out)
    assert sorted((r["benchmark"], r["size_bytes"], r["ranks"]) for r in results) == sorted(by_key)
    for r in results:
        perfs = by_key[(r["benchmark"], r["size_bytes"], r["ranks"])]
        assert r["busbw_gbps"] == pytest.approx(perfs[0]["coll_busbw_gbs"], rel=1e-5)
        assert r["latency_us"]["avg"] == pytest.approx(sum(p["coll_exec_time_us"] for p in perfs) / len(perfs))
    algo = [r["nccl_algo"] for r in results if "nccl_algo" in r]
    assert algo == [{"algorithm": "RING", "protocol": "LL", "calls": 1,
                     "source": "NCCL Inspector plugin (coll_algo, coll_proto)"}]
    run = read_jsonl(out)[0]
    assert run["source"]["tool"] == "nccl-inspector" and run["source"]["version"] == "v4.0, v4.2"


def test_a_line_that_is_no_inspector_record_is_one_error(tmp_path):
    bad = tmp_path / "x.log"
    bad.write_text(INSPECTOR.read_text().splitlines()[0] + "\n{\"coll_perf\": {}}\n")
    proc = run_process([sys.executable, "-m", "microbench", "import", "nccl-inspector", str(bad), "--out",
                        str(tmp_path / "o.jsonl")])
    assert proc.returncode == 2 and proc.stderr.strip().endswith("x.log:2: not an Inspector record (no header)")
    assert not (tmp_path / "o.jsonl").exists()


def test_nccl_tests_json_imports_with_the_figures_it_printed(tmp_path):
    out = _import(tmp_path, "nccl-tests", NCCL_TESTS)
    doc = json.loads(NCCL_TESTS.read_text())
    results = results_of(out)
    assert len(results) == 2 * len(doc["results"])
    for item in doc["results"]:  # broadcast has no in-place form in microbench: both halves, told by their time
        found = sorted((r["latency_us"]["avg"], r["busbw_gbps"]) for r in results if r["size_bytes"] == item["size"])
        printed = sorted((h["time"], h["bus_bw"]) for h in (item["out_of_place"], item["in_place"]))
        assert [t for t, _ in found] == [t for t, _ in printed]
        assert [b for _, b in found] == pytest.approx([b for _, b in printed], abs=0.006)  # printed with 2 decimals
    assert all(r["ranks"] == 2 and r["check"] == "pass" for r in results)


@pytest.mark.parametrize("trace, fmt, expected_messages", [
    (INSPECTOR, "nccl-inspector", {("allreduce", 2360832, 3), ("allreduce", 17179869184, 8),
                                   ("reduce_scatter", 17179869184, 8), ("reduce_scatter", 2097152, 32)}),
    (NCCL_TESTS, "nccl-tests-json", {("broadcast", s, 2) for s in (32768, 65536, 1048576, 134217728)}),
])
def test_workload_reads_the_same_files_as_traces(trace, fmt, expected_messages):
    proc = microbench("workload", "--trace", str(trace), "--json")
    assert proc.returncode == 0, proc.output
    found = json.loads(proc.stdout)
    assert found["trace"]["format"] == fmt
    assert {(m["collective"], m["bytes"], m["group_size"]) for m in found["messages"]} == expected_messages
    if fmt == "nccl-tests-json":  # 2 halves x (5 warmup + 20 iterations) per size and rank
        assert found["trace"]["calls"] == 2 * 4 * 2 * 25


@pytest.fixture(scope="module")
def bench_and_job(tmp_path_factory):
    """A measured 3-rank allreduce (1M..4M) and the Inspector job (one of its records: 3 ranks, 2360832 B)."""
    folder = tmp_path_factory.mktemp("overlay")
    bench = folder / "bench.jsonl"
    proc = microbench("run", "--np", "3", "allreduce", "-m", "1M:4M", "-i", "5", "-x", "1", "--out", str(bench),
                      timeout=240)
    assert proc.returncode == 0, proc.output
    job = folder / "job.jsonl"
    proc = run_process([sys.executable, "-m", "microbench", "import", "nccl-inspector", str(INSPECTOR), "--out",
                        str(job)])
    assert proc.returncode == 0, proc.output
    return bench, job


def test_the_jobs_operation_sits_between_the_curves_measured_sizes(bench_and_job):
    bench, job = bench_and_job
    points = job_overlay.job_points(load_table([str(bench), str(job)]))
    point = next(p for p in points if p.ranks == 3)
    curve = {r["size_bytes"]: r["busbw_gbps"] for r in results_of(bench)}
    lo, hi = 1 << 21, 1 << 22
    t = (math.log(2360832) - math.log(lo)) / (math.log(hi) - math.log(lo))
    assert point.curve_gbps == pytest.approx(curve[lo] + t * (curve[hi] - curve[lo]), rel=1e-9)
    assert point.how == f"between its {lo} B and {hi} B points"
    assert point.job_gbps == pytest.approx(0.555850, rel=1e-5)
    assert point.share == pytest.approx(point.job_gbps / point.curve_gbps)
    others = [p for p in points if p.ranks != 3]
    assert others and all(p.curve_gbps is None and p.share is None and p.how.startswith("no measured")
                          for p in others)


def test_the_report_and_plot_set_the_job_beside_the_curve(bench_and_job, tmp_path):
    bench, job = bench_and_job
    page = tmp_path / "r.html"
    proc = microbench("report", str(bench), str(job), "-o", str(page))
    assert proc.returncode == 0, proc.output
    html = page.read_text()
    assert "The job beside the curve" in html and "Share of the path&#x27;s peak" in html
    assert "shared memory inside one host: no peak known" in html
    proc = microbench("plot", str(bench), str(job), "-o", str(tmp_path / "fig"), "-b", "allreduce")
    assert proc.returncode == 0 and (tmp_path / "fig" / "allreduce.png").stat().st_size > 10000, proc.output
    from microbench.plotting.curves import build_series

    series = build_series(load_table([str(bench), str(job)]), "allreduce")
    assert sorted(s.job for s in series) == [False, True, True]


def test_expected_rows_apply_to_their_platform_and_compare_with_a_result():
    h100 = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "hosts": ["n0"]}
    ring = next(r for r in expected.rows_for(h100, "allreduce") if r.what == "ring")
    assert ring.value == 370.0 and "nccl-tests issue #212" in ring.source
    assert expected.describe(ring, expected.compare(ring, 303.4)) == \
        "82 % of this platform's expected ring ceiling (370 GB/s, H100 SXM, NVLink 4 (18 links, NVSwitch), one node)"
    assert {r.id for r in expected.rows_for({**h100, "hosts": ["a", "b"]}, "allreduce")} == {"h100-8x400g-ring"}
    ndr = {"hosts": ["a", "b"], "path_peak": {"link": "a mlx5_0:1 400 Gb/sec (4X NDR)"}}
    assert [r.id for r in expected.rows_for(ndr)] == ["ib-ndr-wire"]
    assert expected.rows_for({"device": {"name": "NVIDIA H200"}, "hosts": ["a", "b"]}, "allreduce") == []
    latency = next(r for r in expected.rows() if r.what == "latency")
    assert expected.compare(latency, latency_us=95.0) == pytest.approx(0.5)
    assert all(r.source and r.value > 0 for r in expected.rows())

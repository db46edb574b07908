"""Real launches of 2 and 4 MPI ranks: every benchmark, the records, the arithmetic, --check."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import microbench, mpiexec, read_jsonl, results_of

ALL = ["allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw", "reduce", "alltoall", "bibw"]

REQUIRED_RESULT_FIELDS = {
    "type", "benchmark", "backend", "size_bytes", "send_bytes", "recv_bytes", "ranks", "dtype", "iterations",
    "warmup", "latency_us", "algbw_gbps", "busbw_gbps", "check",
}
REQUIRED_RUN_FIELDS = {"type", "schema", "run_id", "command", "time_utc", "hosts", "ranks_per_host", "mpi",
                       "versions", "options", "conditions", "ranks"}


def expected_bytes_and_factor(bench: str, size: int, n: int) -> tuple[float, float]:
    """nccl-tests' S and busbw factor, written out independently of the package."""
    return {
        "allreduce": (size, 2 * (n - 1) / n),
        "allgather": (size * n, (n - 1) / n),
        "reduce_scatter": (size, (n - 1) / n),
        "alltoall": (size * n, (n - 1) / n),
        "broadcast": (size, 1.0),
        "reduce": (size, 1.0),
        "latency": (size, 1.0),
        "bw": (size, 1.0),
        "bibw": (2 * size, 1.0),
    }[bench]


def expected_io(bench: str, size: int, n: int) -> tuple[int, int]:
    return {
        "allgather": (size, size * n),
        "reduce_scatter": (size, size // n),
        "alltoall": (size * n, size * n),
    }.get(bench, (size, size))


@pytest.fixture(scope="module", params=[(2, "native"), (4, "native"), (2, "python"), (4, "python")],
                ids=["2ranks-native", "4ranks-native", "2ranks-python", "4ranks-python"])
def sweep(request, tmp_path_factory):
    n, loop = request.param
    out = tmp_path_factory.mktemp(f"sweep{n}{loop}") / "r.jsonl"
    proc = microbench("run", "--np", str(n), *ALL, "-m", "4:4K", "-i", "20", "-x", "2", "--check", "--loop", loop,
                      "--out", str(out), "--csv", str(out.with_suffix(".csv")), timeout=240)
    assert proc.returncode == 0, proc.output
    assert {r["loop"] for r in results_of(out)} == {loop}
    return n, out, proc


def test_every_benchmark_every_size_checked(sweep):
    n, out, proc = sweep
    results = results_of(out)
    sizes = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    for bench in ALL:
        got = [r["size_bytes"] for r in results if r["benchmark"] == bench]
        if bench in ("allreduce", "reduce", "reduce_scatter"):
            # float32 by default: reduce_scatter needs n elements, so 4 B (and 8 B at 4 ranks) drop out
            want = [s for s in sizes if s >= 4 * (n if bench == "reduce_scatter" else 1)]
        else:
            want = sizes
        assert got == want, bench
    assert all(r["check"] == "pass" for r in results)
    assert all(r["ranks"] == n for r in results)


def test_bandwidth_arithmetic_matches_latency(sweep):
    n, out, _ = sweep
    for r in results_of(out):
        s_bytes, factor = expected_bytes_and_factor(r["benchmark"], r["size_bytes"], n)
        avg_s = r["latency_us"]["avg"] * 1e-6
        assert r["algbw_gbps"] == pytest.approx(s_bytes / avg_s / 1e9, rel=1e-6), r["benchmark"]
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor, rel=1e-9), r["benchmark"]
        assert (r["send_bytes"], r["recv_bytes"]) == expected_io(r["benchmark"], r["size_bytes"], n), r["benchmark"]


def test_record_schema(sweep):
    n, out, _ = sweep
    lines = read_jsonl(out)
    run, end = lines[0], lines[-1]
    assert run["type"] == "run" and REQUIRED_RUN_FIELDS <= set(run)
    assert run["schema"] == 1 and run["ranks"] == n and sum(run["ranks_per_host"].values()) == n
    assert "Open MPI" in run["mpi"]["library_version"] or "MPICH" in run["mpi"]["library_version"]
    assert run["mpi"]["thread_level"] == "single"  # as granted by MPI_Query_thread, like OMB's MPI_Init
    assert {"mpi4py", "numpy", "python"} <= set(run["versions"])
    assert end == {**end, "type": "end", "status": "complete"}
    for r in lines[1:-1]:
        assert REQUIRED_RESULT_FIELDS <= set(r), set(REQUIRED_RESULT_FIELDS) - set(r)
        assert r["run_id"] == run["run_id"]
        lat = r["latency_us"]
        assert {"avg", "min", "max", "p50", "p90", "p99"} <= set(lat)
        assert lat["min"] <= lat["avg"] <= lat["max"]
        assert lat["p50"] <= lat["p90"] <= lat["p99"]
        assert lat["fastest"] <= lat["p50"] <= lat["slowest"]
        assert r["iterations"] == 20 and r["warmup"] == 2
        timing = n // 2 if r["benchmark"] in ("latency", "bw", "bibw") else n
        assert lat["timing_ranks"] == timing and lat["samples"] == 20 * timing


def test_csv_has_a_row_per_result(sweep):
    n, out, _ = sweep
    rows = out.with_suffix(".csv").read_text().splitlines()
    assert rows[0].startswith("run_id,benchmark,backend,size_bytes")
    assert len(rows) - 1 == len(results_of(out))


def test_table_is_omb_style(sweep):
    _, out, proc = sweep
    lines = proc.stdout.splitlines()
    headers = [l for l in lines if "Size(B)" in l]
    assert len(headers) == len(ALL)
    assert all(l.startswith("#") for l in headers)
    rows = [l for l in lines if l.strip() and not l.startswith("#")]
    assert len(rows) == len(results_of(out)) and all(len(l.split()) == 9 for l in rows)
    assert all(l.split()[-1] == "pass" for l in rows)


def test_corrupted_data_fails_the_check(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "64:256", "-i", "5", "-x", "1", "-c",
                      "--out", str(out), env={"MICROBENCH_TEST_CORRUPT": "1:allreduce:128"})
    assert proc.returncode == 1, proc.output
    checks = {r["size_bytes"]: r["check"] for r in results_of(out)}
    assert checks == {64: "pass", 128: "fail", 256: "pass"}
    assert "FAIL" in proc.stdout
    assert "check FAILED: allreduce 128" in proc.stderr


def test_without_check_the_column_is_empty(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "latency", "-m", "8", "-i", "10", "--out", str(out))
    assert proc.returncode == 0, proc.output
    assert [r["check"] for r in results_of(out)] == [None]


@pytest.mark.parametrize("bench", ["allreduce", "allgather", "reduce_scatter"])
def test_in_place_checks(bench, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", bench, "--in-place", "-m", "64:1K", "-i", "5", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["size_bytes"] for r in res] == [64, 128, 256, 512, 1024]
    assert all(r["benchmark"] == bench and r["in_place"] is True and r["check"] == "pass" for r in res)


@pytest.mark.parametrize("dtype,op", [("float64", "max"), ("int32", "min"), ("int8", "sum"), ("uint8", "sum"),
                                      ("float16", "sum")])
def test_dtypes_and_ops(dtype, op, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "reduce_scatter", "--dtype", dtype, "--op", op, "-m", "8:256",
                      "-i", "5", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    # every size of at least one element (reduce_scatter: one per rank), written out independently of the package
    element = np.dtype(dtype).itemsize
    sizes = [8 << k for k in range(6)]
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [
        *(("allreduce", s) for s in sizes if s >= element), *(("reduce_scatter", s) for s in sizes if s >= 2 * element)]
    assert all(r["dtype"] == dtype and r["op"] == op and r["check"] == "pass" for r in res)


def test_bfloat16_is_refused_on_mpi_with_a_reason():
    """Refused in the --np parent, before any rank starts: the one line and nothing after it (no launcher banner)."""
    proc = microbench("run", "--np", "2", "allreduce", "--dtype", "bfloat16", "-m", "8")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "microbench: error: allreduce: bfloat16 has no MPI datatype in this library; use --backend torch for bfloat16"]


def test_under_mpiexec_with_barrier_sync_and_samples(tmp_path):
    out, samples = tmp_path / "r.jsonl", tmp_path / "s.jsonl"
    proc = mpiexec(2, "run", "allreduce", "latency", "-m", "8,1K", "-i", "7", "--sync", "barrier",
                   "--samples", str(samples), "--out", str(out))
    assert proc.returncode == 0, proc.output
    run = read_jsonl(out)[0]
    assert run["launcher"] in ("openmpi", "mpich", "pmix")
    res = results_of(out)
    assert all(r["sync"] == "barrier" for r in res)
    lines = read_jsonl(samples)
    # allreduce: 2 ranks x 2 sizes; latency: only the initiating rank times: 1 x 2 sizes
    assert len(lines) == 6
    assert all(len(l["latency_us"]) == 7 for l in lines)
    for r in res:
        mine = [l for l in lines if l["benchmark"] == r["benchmark"] and l["size_bytes"] == r["size_bytes"]]
        flat = [x for l in mine for x in l["latency_us"]]
        assert r["latency_us"]["fastest"] == pytest.approx(min(flat))
        assert r["latency_us"]["slowest"] == pytest.approx(max(flat))


def test_time_budget_picks_iterations(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8,64K", "--time-budget", "0.05", "--out", str(out))
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["size_bytes"] for r in res] == [8, 65536]
    # each count fills the budget at the slowest rank's per-iteration estimate, which the record keeps: as many
    # whole iterations as fit in 0.05 s, at least 1 (the cap, 10 million, is out of reach at 2 ranks)
    for r in res:
        per_iteration = r["time_budget"]["per_iteration_s"]
        assert r["time_budget"]["seconds"] == 0.05 and per_iteration > 0
        assert r["iterations"] == max(1, int(0.05 / per_iteration)), (r["iterations"], per_iteration)
        assert r["iterations"] * per_iteration <= 0.05 + 1e-12 or r["iterations"] == 1


def test_default_counts_follow_omb(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "latency", "bw", "allreduce", "-m", "8K,16K", "--out", str(out))
    assert proc.returncode == 0, proc.output
    got = {(r["benchmark"], r["size_bytes"]): (r["iterations"], r["warmup"]) for r in results_of(out)}
    assert got == {("latency", 8192): (10000, 100), ("latency", 16384): (1000, 10),
                   ("bw", 8192): (100, 10), ("bw", 16384): (20, 2),
                   ("allreduce", 8192): (1000, 100), ("allreduce", 16384): (100, 10)}


def test_module_and_console_script_entry_points():
    import shutil
    import subprocess
    import sys

    for cmd in ([sys.executable, "-m", "microbench", "--version"], [shutil.which("microbench"), "--version"]):
        assert cmd[0], "console script not installed"
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.startswith("microbench ")


def test_progress_only_for_a_terminal(tmp_path):
    # piped output (as here, and in CI logs): no progress bar at all
    quiet = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "10")
    assert quiet.returncode == 0 and "sizes [" not in quiet.output
    # a terminal on the --np parent (simulated with MICROBENCH_PROGRESS=1): rank 0 draws one bar on stdout,
    # cleared before each table line, so the table stays intact
    shown = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "10", env={"MICROBENCH_PROGRESS": "1"})
    assert shown.returncode == 0, shown.output
    assert "sizes [" in shown.stdout and "sizes [" not in shown.stderr
    assert "/4 sizes" in shown.stdout  # one bar over 4 sizes: not one per rank
    rows = [line.split("\r")[-1] for line in shown.stdout.splitlines()]
    data = [r for r in rows if r.strip() and not r.startswith("#") and "sizes [" not in r]
    assert [int(r.split()[0]) for r in data] == [8, 16, 32, 64]


def test_sizes_from_a_workload_measure_exactly_its_sizes(tmp_path):
    import json

    workload = tmp_path / "w.json"
    workload.write_text(json.dumps({"messages": [
        {"collective": "allreduce", "bytes": 4096, "count": 10, "group_size": 2, "phase": "backward"},
        {"collective": "allreduce", "bytes": 1024, "count": 1, "group_size": 2, "phase": "backward"},
        {"collective": "allgather", "bytes": 512, "count": 4, "group_size": 2, "phase": "forward"},
        {"collective": "send", "bytes": 64, "count": 2, "group_size": 2, "phase": "pipeline"},
        {"collective": "recv", "bytes": 64, "count": 2, "group_size": 2, "phase": "pipeline"},
    ]}))
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "--sizes-from", str(workload), "-i", "5", "--out", str(out))
    assert proc.returncode == 0, proc.output
    got = sorted((r["benchmark"], r["size_bytes"]) for r in results_of(out))
    assert got == [("allgather", 512), ("allreduce", 1024), ("allreduce", 4096), ("latency", 64)]
    bad = microbench("run", "--np", "2", "--sizes-from", str(workload), "-m", "8")
    assert bad.returncode == 2 and "give one" in bad.stderr
    missing = microbench("run", "--np", "2", "bw", "--sizes-from", str(workload))
    assert missing.returncode == 2 and "has no messages for bw" in missing.stderr


def test_sizes_rounded_onto_one_element_count_give_one_record(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "5,6,7,9", "-i", "5", "--out", str(out))
    assert proc.returncode == 0, proc.output
    assert [r["size_bytes"] for r in results_of(out)] == [4, 8]
    assert "sizes rounded down to whole elements of float32 (B): 5 -> 4, 6 -> 4, 7 -> 4, 9 -> 8" in proc.stdout


def test_no_progress_bar_under_a_launcher(tmp_path):
    # Open MPI hands ranks a pseudo-terminal even when the job's output is a pipe or a file
    proc = mpiexec(2, "run", "allreduce", "-m", "8:64", "-i", "10", env={"MICROBENCH_PROGRESS": ""})
    assert proc.returncode == 0, proc.output
    assert "\r" not in proc.stdout and "sizes [" not in proc.output


@pytest.mark.parametrize("nranks", [2, 4])
def test_reduce_scatter_runs_either_mpi_call(nranks, tmp_path):
    from microbench.results.keys import config_key

    out = tmp_path / "r.jsonl"
    for call in ("block", "vector"):
        for extra in ([], ["--in-place"]):
            proc = microbench("run", "--np", str(nranks), "reduce_scatter", "-m", "64,4K", "-i", "5", "-x", "1", "-c",
                              "--reduce-scatter-call", call, *extra, "--out", str(out), timeout=180)
            assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["mpi_call"], r["in_place"], r["check"]) for r in res] == [
        (c, ip, "pass") for c in ("MPI_Reduce_scatter_block", "MPI_Reduce_scatter") for ip in (False, True)
        for _ in (64, 4096)]
    # the call is part of the configuration; a record from before the field keeps matching the block form
    assert config_key(res[0]) != config_key(res[4])
    legacy = {k: v for k, v in res[0].items() if k != "mpi_call"}
    assert config_key(legacy) == config_key(res[0])


def test_torch_has_no_vector_reduce_scatter():
    proc = microbench("run", "--np", "2", "--backend", "torch", "reduce_scatter", "--reduce-scatter-call", "vector")
    assert proc.returncode == 2
    assert "--reduce-scatter-call vector is MPI_Reduce_scatter" in proc.stderr

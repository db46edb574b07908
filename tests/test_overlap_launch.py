"""Real launches of the non-blocking benchmarks: 2 and 4 MPI ranks (native and Python loops), gloo under
torchrun and mpiexec, --check everywhere; overlap within [0, 100]; bad input refused in one line.
(Every JSONL file written here is also checked against the schema by conftest.)"""

from __future__ import annotations

import shutil

import pytest

from conftest import microbench, mpiexec, read_jsonl, results_of, run_process

NONBLOCKING = ["iallreduce", "iallgather", "ireduce_scatter", "ibroadcast", "ireduce", "ialltoall"]


def _omb(overall: float, compute: float, pure: float) -> float:
    """OMB's overlap, written out here: max(0, 100 - 100 (overall - compute) / pure), at most 100."""
    return min(100.0, max(0.0, 100.0 - 100.0 * (overall - compute) / pure))


def _assert_overlap_records(out, nranks: int, sizes: list[int], loop: str | None = None) -> list[dict]:
    res = results_of(out)
    assert sorted((r["benchmark"], r["size_bytes"]) for r in res) == sorted((b, s) for b in NONBLOCKING for s in sizes)
    for r in res:
        assert r["check"] == "pass" and r["ranks"] == nranks, r["benchmark"]
        assert loop is None or r["loop"] == loop
        o = r["overlap"]
        for definition in ("omb", "imb"):
            pct = o["overlap_pct"][definition]
            assert all(0.0 <= pct[k] <= 100.0 for k in ("avg", "min", "max", "p50_based")), r["benchmark"]
            assert pct["min"] <= pct["avg"] <= pct["max"], r["benchmark"]
        # OMB's figure on the cross-rank means (what osu_i* prints), from the record's own means
        assert o["overlap_pct"]["omb"]["of_means"] == pytest.approx(
            _omb(o["overall_us"]["avg"], o["compute_us"]["avg"], o["pure_us"]["avg"]), rel=1e-6, abs=1e-6)
        assert o["overall_us"]["timing_ranks"] == nranks and o["num_tests"] == 2
        assert o["pure_us"]["avg"] == pytest.approx(r["latency_us"]["avg"], rel=1e-9)  # t_pure is the latency
    return res


@pytest.mark.parametrize("nranks,loop", [(2, "native"), (4, "native"), (2, "python"), (2, "mpi4py")])
def test_mpi_every_nonblocking_benchmark_checked(nranks, loop, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", str(nranks), *NONBLOCKING, "-m", "64,4K", "-i", "10", "-x", "2", "-c",
                      "--num-tests", "2", "--loop", loop, "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.output
    _assert_overlap_records(out, nranks, [64, 4096], "native" if loop == "native" else "python")
    run = read_jsonl(out)[0]
    assert run["conditions"]["progress"]["thread_level"] == "single"
    assert run["conditions"]["progress"]["asynchronous"] is False
    headers = [line for line in proc.stdout.splitlines() if line.startswith("#") and "Overall(us)" in line]
    assert len(headers) == len(NONBLOCKING) and all("Overlap(%)" in h and "IMB(%)" in h for h in headers)


def test_mpi_thread_level_and_progress_variables_are_recorded(tmp_path):
    out = tmp_path / "r.jsonl"
    env = {"MICROBENCH_THREAD_LEVEL": "multiple", "OMPI_MCA_btl_tcp_progress_thread": "1"}
    proc = mpiexec(2, "run", "iallreduce", "-m", "1K", "-i", "10", "--kernel", "stream", "--compute-ratio", "2",
                   "--out", str(out), env=env)
    assert proc.returncode == 0, proc.output
    progress = read_jsonl(out)[0]["conditions"]["progress"]
    assert progress["thread_level"] == "multiple"
    assert progress["variables"]["OMPI_MCA_btl_tcp_progress_thread"] == "1" and progress["asynchronous"] is True
    (r,) = results_of(out)
    assert r["overlap"]["compute_ratio"] == 2.0 and r["overlap"]["kernel"]["bytes_per_unit"] == 24


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
@pytest.mark.parametrize("nranks", [2, 4])
def test_gloo_every_nonblocking_benchmark_checked(launcher, nranks, tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")
    out = tmp_path / "r.jsonl"
    args = ["run", "--backend", "torch", *NONBLOCKING, "-m", "64,1K", "-i", "5", "-x", "1", "-c", "--num-tests", "2",
            "--out", str(out)]
    if launcher == "torchrun":
        exe = shutil.which("torchrun")
        assert exe, "torchrun is installed with torch"
        proc = run_process([exe, f"--nproc-per-node={nranks}", "--no-python", "microbench", *args], timeout=300)
    else:
        proc = mpiexec(nranks, *args, timeout=300)
    assert proc.returncode == 0, proc.output
    res = _assert_overlap_records(out, nranks, [64, 1024], "python")
    assert all(r["torch_backend"] == "gloo" and r["call_path"] == "torch" for r in res)
    assert all(r["in_place"] is True for r in res if r["benchmark"] in ("iallreduce", "ireduce"))
    assert read_jsonl(out)[0]["conditions"]["progress"]["asynchronous"] is True  # gloo's own threads


@pytest.mark.parametrize("argv,words,status", [
    (["iallreduce", "--compute-ratio", "-0.5"], "--compute-ratio must be a finite number, 0 or more", 2),
    (["iallreduce", "--kernel", "cubic"], "--kernel", 2),
    (["iallreduce", "--num-tests", "-1"], "--num-tests must be 0 or more", 2),
    (["allgather", "--compute-us", "10"], "applies to the non-blocking benchmarks", 2),
    # the CUDA-graph loop has no non-blocking form (refused before any device is looked for)
    (["iallgather", "--backend", "torch", "--device", "cuda", "--cuda-graph"], "cannot capture the non-blocking", 2),
])
def test_bad_overlap_input_is_one_line(argv, words, status):
    proc = microbench("run", "--np", "2", *argv, "-m", "8")
    assert proc.returncode == status, proc.output
    assert proc.stderr.count("microbench: error:") == 1 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.output


def test_mpi_in_place_and_cold_cache_nonblocking(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "iallreduce", "iallgather", "ireduce_scatter", "ireduce", "--in-place",
                      "--cache", "cold", "--cache-size", "256K", "--dtype", "int32", "-m", "64,4K", "-i", "6", "-c",
                      "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert sorted((r["benchmark"], r["size_bytes"]) for r in res) == sorted(
        (b, s) for b in ("iallreduce", "iallgather", "ireduce_scatter", "ireduce") for s in (64, 4096))
    assert all(r["in_place"] is True and r["check"] == "pass" and r["cache"] == "cold" for r in res)
    assert all(r["dtype"] == "int32" and r["pool_slots"] > 1 for r in res)


def test_nonblocking_benchmarks_measure_a_workloads_sizes(tmp_path):
    import json

    workload = tmp_path / "w.json"
    workload.write_text(json.dumps({"messages": [
        {"collective": "allgather", "bytes": 3000, "count": 4, "group_size": 2, "phase": "forward"},
        {"collective": "reduce_scatter", "bytes": 4096, "count": 1, "group_size": 2, "phase": "gradients"},
    ]}))
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "iallgather", "ireduce_scatter", "--sizes-from", str(workload), "-i", "5",
                      "--out", str(out))
    assert proc.returncode == 0, proc.output
    assert sorted((r["benchmark"], r["size_bytes"]) for r in results_of(out)) == [("iallgather", 3000),
                                                                                  ("ireduce_scatter", 4096)]

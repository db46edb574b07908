"""The native (C) timing loop: build, cache, ABI guard, fallback, and agreement with the Python loop."""

from __future__ import annotations

import pytest

from conftest import microbench, read_jsonl, results_of
from microbench import native

TIMING_FIELDS = {"latency_us", "algbw_gbps", "busbw_gbps", "first_call_us", "time_utc", "wall_s", "run_id", "loop",
                 "iterations", "timer"}


@pytest.fixture(scope="module")
def mpi_lib():
    from microbench.backends.mpi import import_mpi, library

    MPI = import_mpi(initialize=False)
    return MPI, library(MPI)


def test_build_is_cached_and_checked_against_the_loaded_mpi(tmp_path, monkeypatch, mpi_lib):
    from microbench import native

    MPI, lib = mpi_lib
    monkeypatch.setenv("MICROBENCH_CACHE_DIR", str(tmp_path))
    first = native.build(lib.prefix, lib.path)
    mtime = first.stat().st_mtime_ns
    again = native.build(lib.prefix, lib.path)
    assert again == first and again.stat().st_mtime_ns == mtime  # not rebuilt
    loaded = native.load(first, MPI.Get_library_version())
    assert loaded.mb_abi_comm_size() in (4, 8)
    with pytest.raises(native.NativeUnavailable, match="another MPI"):
        native.load(first, "Some Other MPI 1.0")


def test_missing_compiler_is_a_clear_reason(tmp_path, monkeypatch, mpi_lib):
    from microbench import native

    _, lib = mpi_lib
    monkeypatch.setenv("MICROBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MICROBENCH_MPICC", "/nonexistent/mpicc")
    with pytest.raises(native.NativeUnavailable, match="MICROBENCH_MPICC"):
        native.build(lib.prefix, lib.path)


def test_auto_falls_back_to_python_with_one_notice(tmp_path):
    out = tmp_path / "r.jsonl"
    env = {"MICROBENCH_CACHE_DIR": str(tmp_path / "cache"), "MICROBENCH_MPICC": "/nonexistent/mpicc"}
    proc = microbench("run", "--np", "2", "allreduce", "latency", "-m", "8", "-i", "5", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.output
    assert proc.stderr.count("native loop unavailable") == 1
    assert "# note: native loop unavailable" in proc.stdout
    assert "loop python" in proc.stdout
    assert {r["loop"] for r in results_of(out)} == {"python"}


def test_native_demanded_but_unavailable_fails_on_every_rank(tmp_path):
    env = {"MICROBENCH_CACHE_DIR": str(tmp_path / "cache"), "MICROBENCH_MPICC": "/nonexistent/mpicc"}
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "--loop", "native", env=env)
    assert proc.returncode == 1
    errors = [l for l in proc.stderr.splitlines() if l.startswith("microbench: error:")]
    assert len(errors) == 1 and "--loop native" in errors[0]


def test_fresh_build_under_concurrent_ranks(tmp_path):
    # four ranks race for an empty cache: one builds under the lock, all load the same library
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "4", "allreduce", "-m", "8", "-i", "5", "--loop", "native", "--out", str(out),
                      env={"MICROBENCH_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.output
    assert len(list((tmp_path / "cache").glob("mbloop-*.so"))) == 1
    assert [r["loop"] for r in results_of(out)] == ["native"]


def test_loops_write_the_same_records(tmp_path):
    records = {}
    for loop in ("native", "python"):
        out = tmp_path / f"{loop}.jsonl"
        proc = microbench("run", "--np", "2", "allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw",
                          "-m", "64,1M", "-i", "10", "-x", "2", "--loop", loop, "--out", str(out))
        assert proc.returncode == 0, proc.output
        records[loop] = results_of(out)
    native, python = records["native"], records["python"]
    assert len(native) == len(python) == 12
    for a, b in zip(native, python):
        assert set(a) == set(b)
        assert {k: v for k, v in a.items() if k not in TIMING_FIELDS} == \
               {k: v for k, v in b.items() if k not in TIMING_FIELDS}
        assert set(a["latency_us"]) == set(b["latency_us"])
        assert (a["loop"], b["loop"]) == ("native", "python")


@pytest.mark.parametrize("loop", ["native", "python"])
def test_check_catches_corruption_in_both_loops(loop, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "latency", "-m", "64,128", "-i", "5", "-c", "--loop", loop, "--out", str(out),
                      env={"MICROBENCH_TEST_CORRUPT": "0:latency:128"})
    assert proc.returncode == 1, proc.output
    assert {r["size_bytes"]: r["check"] for r in results_of(out)} == {64: "pass", 128: "fail"}


def test_unwritable_cache_folder_falls_back(tmp_path):
    # /sys/kernel exists and cannot be written, even by root: a build there is impossible, not a crash
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "5", "--out", str(out),
                      env={"MICROBENCH_CACHE_DIR": "/sys/kernel"})
    assert proc.returncode == 0, proc.output
    assert proc.stderr.count("native loop unavailable") == 1 and "cannot build in the cache directory" in proc.stderr
    assert [r["loop"] for r in results_of(out)] == ["python"]


def test_timer_is_recorded(tmp_path):
    # the lean native loop reads the TSC where the CPU's is invariant; MICROBENCH_TIMER=clock turns it off;
    # with a barrier between iterations the C loop times each one with CLOCK_MONOTONIC
    tsc = native.invariant_tsc()
    for env, check, expected in (({}, [], "tsc" if tsc else "host"), ({"MICROBENCH_TIMER": "clock"}, [], "host"),
                                 ({}, ["--sync", "barrier"], "host")):
        out = tmp_path / f"r{len(env)}{len(check)}.jsonl"
        proc = microbench("run", "--np", "2", "latency", "-m", "8", "-i", "50", "--loop", "native", *check,
                          "--out", str(out), env=env)
        assert proc.returncode == 0, proc.output
        assert [r["timer"] for r in results_of(out)] == [expected]
        assert ("TSC" in read_jsonl(out)[0]["conditions"]["timer"]) == (expected == "tsc" or (tsc and not env))

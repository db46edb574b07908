"""The native (C) timing loop: build, cache, ABI guard, fallback, and agreement with the Python loop."""

from __future__ import annotations

import sys

import pytest

from microbench.measure.native import loops as native_loops
from microbench.measure.native import toolchain

from conftest import microbench, mpiexec_prefix, read_jsonl, results_of, run_process, shim_or_reason

TIMING_FIELDS = {"latency_us", "algbw_gbps", "busbw_gbps", "first_call_us", "time_utc", "wall_s", "run_id", "loop",
                 "iterations", "timer", "stragglers"}



def test_build_is_cached_and_checked_against_the_loaded_mpi(tmp_path, monkeypatch, mpi_lib):



    MPI, lib = mpi_lib
    monkeypatch.setenv("MICROBENCH_CACHE_DIR", str(tmp_path))
    first = toolchain.build(lib.prefix, lib.path)
    mtime = first.stat().st_mtime_ns
    again = toolchain.build(lib.prefix, lib.path)
    assert again == first and again.stat().st_mtime_ns == mtime  # not rebuilt
    loaded = native_loops.load(first, MPI.Get_library_version())
    assert loaded.mb_abi_comm_size() in (4, 8)
    with pytest.raises(toolchain.NativeUnavailable, match="another MPI"):
        native_loops.load(first, "Some Other MPI 1.0")


def test_missing_compiler_is_a_clear_reason(tmp_path, monkeypatch, mpi_lib):



    _, lib = mpi_lib
    monkeypatch.setenv("MICROBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MICROBENCH_MPICC", "/nonexistent/mpicc")
    with pytest.raises(toolchain.NativeUnavailable, match="MICROBENCH_MPICC"):
        toolchain.build(lib.prefix, lib.path)


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


def test_shim_is_cached_and_checked_against_the_loaded_mpi(tmp_path, monkeypatch, mpi_lib):
    MPI, _ = mpi_lib
    monkeypatch.setenv("MICROBENCH_CACHE_DIR", str(tmp_path))
    first, reason = shim_or_reason(mpi_lib)
    if first is None:
        pytest.skip(reason)
    again, _ = shim_or_reason(mpi_lib)
    assert again == first and first.name.startswith("mbcall-")
    module = native_loops.load_shim(first, MPI.Get_library_version())
    assert callable(module.bind)
    with pytest.raises(toolchain.NativeUnavailable, match="another MPI"):
        native_loops.load_shim(first, "Some Other MPI 1.0")


def test_loops_write_the_same_records(tmp_path, mpi_lib):
    records = {}
    for loop in ("native", "python", "mpi4py"):
        out = tmp_path / f"{loop}.jsonl"
        proc = microbench("run", "--np", "2", "allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw",
                          "-m", "64,1M", "-i", "10", "-x", "2", "--loop", loop, "--out", str(out))
        assert proc.returncode == 0, proc.output
        records[loop] = results_of(out)
    shim = "shim" if shim_or_reason(mpi_lib)[0] is not None else "mpi4py"
    expected = {"native": ("native", "native"), "python": ("python", shim), "mpi4py": ("python", "mpi4py")}
    native_records = records["native"]
    assert len(native_records) == 12
    for loop, recs in records.items():
        assert len(recs) == 12
        for a, b in zip(native_records, recs):
            assert set(a) == set(b)
            assert {k: v for k, v in a.items() if k not in TIMING_FIELDS | {"call_path"}} == \
                   {k: v for k, v in b.items() if k not in TIMING_FIELDS | {"call_path"}}
            assert set(a["latency_us"]) == set(b["latency_us"])
            assert set(a.get("stragglers") or ()) == set(b.get("stragglers") or ())
            assert (b["loop"], b["call_path"]) == expected[loop]


def test_python_loop_without_shim_calls_mpi4py_with_one_notice(tmp_path):
    out = tmp_path / "r.jsonl"
    env = {"MICROBENCH_CACHE_DIR": str(tmp_path / "cache"), "MICROBENCH_MPICC": "/nonexistent/mpicc"}
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "5", "--loop", "python", "--out", str(out),
                      env=env)
    assert proc.returncode == 0, proc.output
    assert proc.stderr.count("C call shim unavailable") == 1
    assert "loop python (calls through mpi4py)" in proc.stdout
    assert [(r["loop"], r["call_path"]) for r in results_of(out)] == [("python", "mpi4py")]


@pytest.mark.parametrize("loop", ["native", "python", "mpi4py"])
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


def test_timer_is_recorded(tmp_path, mpi_lib):
    # the lean native loop and the C call shim read the TSC where the CPU's is invariant; MICROBENCH_TIMER=clock
    # turns it off; with a barrier between iterations each one is timed with CLOCK_MONOTONIC
    tsc = native_loops.invariant_tsc()
    loops = ["native"] + (["python"] if shim_or_reason(mpi_lib)[0] is not None else [])
    for loop in loops:
        for env, check, expected in (({}, [], "tsc" if tsc else "host"), ({"MICROBENCH_TIMER": "clock"}, [], "host"),
                                     ({}, ["--sync", "barrier"], "host"),
                                     # fresh first calls run the loop again afterwards: they must not change it
                                     ({}, ["--sync", "barrier", "--first-call-samples", "3"], "host")):
            out = tmp_path / f"{loop}{len(env)}{len(check)}.jsonl"
            proc = microbench("run", "--np", "2", "latency", "-m", "8", "-i", "50", "--loop", loop, *check,
                              "--out", str(out), env=env)
            assert proc.returncode == 0, proc.output
            assert [r["timer"] for r in results_of(out)] == [expected]
            assert ("TSC" in read_jsonl(out)[0]["conditions"]["timer"]) == (expected == "tsc" or (tsc and not env))

LOOP_CONTRACT = r"""
import ctypes
import numpy as np
from microbench.cluster.mpi_runtime import import_mpi, library
from microbench.measure.native import loops as native_loops, toolchain

MPI = import_mpi()
lib = library(MPI)
comm = MPI.COMM_SELF
send, recv = np.ones(2, np.float32), np.zeros(2, np.float32)
calls = [native_loops.NativeCall("pingpong", comm, MPI.FLOAT, send=send, recv=recv, count=2, peer=0, initiator=True, MPI=MPI),
         native_loops.NativeCall("allreduce", comm, MPI.FLOAT, MPI.SUM, send=send, recv=recv, count=2, MPI=MPI)]
loops = {"native": native_loops.NativeLoop(native_loops.load(toolchain.build(lib.prefix, lib.path), MPI.Get_library_version()))}
try:
    shim = native_loops.load_shim(toolchain.build_shim(lib.prefix, lib.path), MPI.Get_library_version())
    loops["shim"] = native_loops.ShimPythonLoop(shim)
except toolchain.NativeUnavailable as exc:
    print("no shim:", exc)
    shim = None
for name, loop in loops.items():
    for call in calls:
        prepared = loop.prepare([call, call])
        for iters in (1, 2, 50):  # a ping-pong's last iteration is timed on its own: also the only one
            durations = loop.run(prepared, iters, start=1)
            assert durations.dtype == np.int64 and durations.shape == (iters,), (name, iters, durations)
            assert (durations > 0).all(), (name, iters, durations)
        assert recv[0] == 1.0
if shim is not None:
    buf = np.full(4, -1, np.int64)
    shim.start(buf.ctypes.data, 3)
    bound = shim.bind(ctypes.addressof(calls[1].struct))
    assert [bound() for _ in range(4)] == [None] * 4
    assert shim.stop() == 3 and (buf[:3] > 0).all() and buf[3] == -1  # stamps stop at the capacity
    assert (np.diff(buf[:3]) >= 0).all()
    bound()  # after stop(): no stamp written
    assert buf[3] == -1 and shim.stop() == 0
    for bad in ((0, 4), (buf.ctypes.data, 0)):
        try:
            shim.start(*bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"start{bad} accepted")
print("contract ok", sorted(loops))
"""


def test_loops_return_one_positive_duration_per_iteration(tmp_path, mpi_lib):
    # in one process on COMM_SELF (a ping-pong with itself): each loop's run() returns exactly `iters` durations,
    # all positive, for 1, 2 and many iterations; the shim stamps only between start() and stop(), up to capacity
    cmd, env = mpiexec_prefix(1)
    proc = run_process([*cmd, sys.executable, "-c", LOOP_CONTRACT], env={**env, "MICROBENCH_CACHE_DIR": str(tmp_path)},
                       timeout=300)
    assert proc.returncode == 0, proc.output
    expected = ["native", "shim"] if shim_or_reason(mpi_lib)[0] is not None else ["native"]
    assert f"contract ok {expected}" in proc.stdout  # a shim that should build but did not fails here

"""Soak runs: numbered, timestamped cycles; an injected corruption caught and named; SIGTERM keeps finished cycles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from microbench.errors import UsageError
from microbench.measure.testhooks import FaultHooks
from microbench.run.diagnostics.soak import summarize
from microbench.units import parse_duration

from conftest import microbench, read_jsonl


def test_durations_parse():
    assert [parse_duration(t) for t in ("90", "90s", "1.5m", "12h", "1d")] == [90, 90, 90, 43200, 86400]
    for bad in ("0", "-3", "10x", "", "m"):
        with pytest.raises(UsageError, match="--duration"):
            parse_duration(bad)


def test_a_hook_with_a_cycle_fires_in_that_cycle_only():
    hooks = FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_CORRUPT": "1:allreduce:8:2",
                                 "MICROBENCH_TEST_RAISE": "0:bw:8"})
    assert not hooks.for_cycle(1).at(1, "allreduce", 8).corrupt
    assert hooks.for_cycle(2).at(1, "allreduce", 8).corrupt
    assert all(hooks.for_cycle(k).at(0, "bw", 8).raise_now for k in (1, 2, 3))
    with pytest.raises(UsageError, match="RANK:BENCHMARK:SIZE:CYCLE"):
        FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_CORRUPT": "1:allreduce:8:0"})


def _result(cycle, avg, check="pass", at=()):
    return {"benchmark": "allreduce", "size_bytes": 8, "cache": "warm", "cycle": cycle, "check": check,
            "latency_us": {"avg": avg}, "busbw_gbps": 1 / avg,
            "check_failures": [{"label": a, "mismatches": 3} for a in at] or None}


def test_the_summary_spans_cycles_and_names_failed_ones():
    (config,) = summarize([_result(1, 2.0), _result(2, 6.0, "fail", ["rank 3"]), _result(3, 4.0)])
    assert config["cycles"] == 3 and config["checked_cycles"] == 3
    assert config["avg_latency_us"] == {"min": 2.0, "median": 4.0, "max": 6.0}
    assert config["failed_cycles"] == [{"cycle": 2, "at": ["rank 3"]}]


@pytest.mark.parametrize("args, message", [
    (["--check-every", "2"], "--check-every applies to soak runs"),
    (["--cycles", "0"], "--cycles must be at least 1"),
    (["--duration", "soon"], "--duration 'soon': expected a positive time"),
])
def test_soak_options_are_checked(args, message):
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_a_corruption_in_one_cycle_is_caught_and_named(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "4", "allreduce", "-m", "8,64", "-i", "5", "-x", "1", "--cycles", "3", "-c",
                      "--out", str(out), env={"MICROBENCH_TEST_CORRUPT": "1:allreduce:64:2"}, timeout=180)
    assert proc.returncode == 1, proc.output
    assert "check FAILED: cycle 2: allreduce 64 at rank 1" in proc.stderr
    recs = read_jsonl(out)
    results = [r for r in recs if r["type"] == "result"]
    assert [(r["cycle"], r["size_bytes"], r["check"]) for r in results] == [
        (1, 8, "pass"), (1, 64, "pass"), (2, 8, "pass"), (2, 64, "fail"), (3, 8, "pass"), (3, 64, "pass")]
    (failure,) = results[3]["check_failures"]
    assert failure["label"] == "rank 1" and failure["mismatches"] > 0
    cycles = [r for r in recs if r["type"] == "cycle"]
    assert [c["cycle"] for c in cycles] == [1, 2, 3] and all(c["started_utc"] <= c["ended_utc"] for c in cycles)
    assert [c["check_failed"] for c in cycles] == [[], [{"benchmark": "allreduce", "metric": None, "size_bytes": 64,
                                                         "cache": "warm", "at": ["rank 1"]}], []]
    (soak,) = [r for r in recs if r["type"] == "soak"]
    by_size = {c["size_bytes"]: c for c in soak["configurations"]}
    assert soak["cycles"] == [1, 2, 3] and by_size[64]["failed_cycles"] == [{"cycle": 2, "at": ["rank 1"]}]
    assert by_size[8]["failed_cycles"] == [] and by_size[8]["cycles"] == 3
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "complete"
    assert "# cycle 2 ended" in proc.stdout and "check FAILED at allreduce 64 (rank 1)" in proc.stdout
    assert "# soak summary over 3 finished cycle(s)" in proc.stdout


def test_check_every_k_checks_cycles_k_2k(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "3", "-x", "0", "--cycles", "4",
                      "--check-every", "2", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.output
    assert [(r["cycle"], r["check"]) for r in read_jsonl(out) if r["type"] == "result"] == [
        (1, None), (2, "pass"), (3, None), (4, "pass")]


def test_duration_starts_cycles_until_it_has_passed(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "3", "-x", "0", "--duration", "1s",
                      "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.output
    recs = read_jsonl(out)
    numbers = [r["cycle"] for r in recs if r["type"] == "cycle"]
    assert numbers == list(range(1, len(numbers) + 1)) and numbers
    assert [r for r in recs if r["type"] == "soak"][0]["cycles"] == numbers


def test_sigterm_keeps_every_finished_cycle(tmp_path):
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "microbench", "run", "--np", "2", "allreduce", "-m", "8:4K", "-i", "20",
           "--cycles", "10000", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count('"type":"cycle"') >= 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    recs = read_jsonl(out)
    finished = [r["cycle"] for r in recs if r["type"] == "cycle"]
    assert len(finished) >= 2 and finished == list(range(1, len(finished) + 1))
    results = [r for r in recs if r["type"] == "result"]
    for k in finished:
        assert [r["size_bytes"] for r in results if r["cycle"] == k] == [8 << i for i in range(10)]
    (soak,) = [r for r in recs if r["type"] == "soak"]
    assert soak["cycles"] == finished and all(c["cycles"] == len(finished) for c in soak["configurations"])
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "incomplete"

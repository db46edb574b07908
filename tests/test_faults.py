"""Faults end the whole job quickly, with a clear message, a non-zero exit, and the finished sizes on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import microbench

# run_process's limit for one launch: a job left hanging would wait for the watchdog's default --timeout of
# 600 s (or for the stall hook's 3600 s sleep), 10 times as long, so the test fails instead of passing late. The
# tests do not bound the time otherwise: they assert what ended the job.
QUICK = 60


def lines_are_whole_json(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("loop", ["native", "python", "mpi4py"])
def test_stalled_rank_trips_the_watchdog(loop, tmp_path):
    # rank 1 passes the barrier and then stalls, so rank 0 waits inside the timed loop's first MPI call: rank
    # 0's watchdog (a thread) can fire only if the loop released the GIL around that call. (Rank 1's own
    # watchdog would fire 2 s later, with its own rank in the message.)
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "10", "--timeout", "3", "--out", str(out),
                      "--loop", loop, env={"MICROBENCH_TEST_STALL": "1:allreduce:32"}, timeout=QUICK)
    assert proc.returncode == 1  # a run that failed: never the internal-error status (3)
    assert "rank 0: timeout: allreduce at 32 B did not finish within 3 s" in proc.stderr
    # the job ended after the stall was detected (rank 1 sleeps for an hour: only the watchdog ends the job)
    assert proc.seconds >= 3, proc.seconds
    recs = lines_are_whole_json(out)
    assert [r["size_bytes"] for r in recs if r["type"] == "result"] == [8, 16]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "failed" and "timeout" in recs[-1]["reason"]


def test_killed_rank_ends_the_job_and_keeps_finished_sizes(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "10", "--out", str(out),
                      env={"MICROBENCH_TEST_KILL": "1:allreduce:32"}, timeout=QUICK)
    assert proc.returncode != 0
    assert "timeout:" not in proc.stderr  # the launcher ended the job, not the watchdog
    recs = lines_are_whole_json(out)
    assert [r["size_bytes"] for r in recs if r["type"] == "result"] == [8, 16]
    # rank 0 got SIGTERM from the launcher and closed the run as incomplete, saying where it may come from
    assert recs[-1]["type"] == "end", recs[-1]
    assert recs[-1]["status"] == "incomplete" and "another rank that failed" in recs[-1]["reason"]


def test_raising_rank_ends_the_job(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "latency", "-m", "8:64", "-i", "10", "--out", str(out),
                      env={"MICROBENCH_TEST_RAISE": "0:latency:16"}, timeout=QUICK)
    assert proc.returncode != 0 and "timeout:" not in proc.stderr  # the error ended the job, not the watchdog
    assert "rank 0: internal error: RuntimeError: test hook" in proc.stderr
    recs = lines_are_whole_json(out)
    assert [r["size_bytes"] for r in recs if r["type"] == "result"] == [8]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "failed" and "RuntimeError" in recs[-1]["reason"]


def _start_long_sweep(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "microbench", "run", "--np", "2", "allreduce", "-m", "8:256M", "-i", "300",
           "--out", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_results(out: Path, proc: subprocess.Popen, count: int, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if out.exists() and len([l for l in out.read_text().splitlines() if '"type":"result"' in l]) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended early: {proc.communicate()}")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("no results appeared")


@pytest.mark.parametrize("how", ["SIGTERM to microbench", "SIGINT to the process group"])
def test_signal_mid_sweep_marks_the_run_incomplete(how, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = _start_long_sweep(out)
    try:
        _wait_for_results(out, proc, 3)
        if how.startswith("SIGTERM"):
            os.kill(proc.pid, signal.SIGTERM)
            name = "SIGTERM"
        else:
            os.killpg(proc.pid, signal.SIGINT)  # what a Ctrl-C in the terminal does
            name = "SIGINT"
        stdout, stderr = proc.communicate(timeout=QUICK)  # the sweep alone would run for minutes more
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + (signal.SIGTERM if name == "SIGTERM" else signal.SIGINT), proc.returncode
    assert "timeout:" not in stderr
    recs = lines_are_whole_json(out)
    results = [r for r in recs if r["type"] == "result"]
    assert len(results) >= 3
    assert [r["size_bytes"] for r in results] == [8 << i for i in range(len(results))]
    end = recs[-1]
    # Open MPI's launcher turns a Ctrl-C into SIGTERM for the ranks
    assert end["type"] == "end" and end["status"] == "incomplete", end
    assert end["reason"].split()[0] == name, end  # the signal microbench --np got, though mpiexec sends SIGTERM
    # the launcher may drop what the ranks print while it tears the job down; microbench itself says it
    assert f"microbench: {name}: the ranks close the records" in stderr


def test_timeout_must_not_be_negative():
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "--timeout", "-1", timeout=QUICK)
    assert proc.returncode == 2 and "--timeout must be 0 (off) or a finite number of positive seconds" in proc.stderr


def test_a_leftover_hook_without_testing_is_ignored_with_a_warning(tmp_path):
    # a MICROBENCH_TEST_* variable left in a shell must never fake a result
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "-i", "5", "-c", "--out", str(out),
                      env={"MICROBENCH_TEST_CORRUPT": "1:allreduce:8", "MICROBENCH_TESTING": ""}, timeout=QUICK)
    assert proc.returncode == 0, proc.output
    assert proc.stderr.count("MICROBENCH_TEST_CORRUPT ignored: test hooks act only with MICROBENCH_TESTING=1") == 1
    assert [r["check"] for r in lines_are_whole_json(out) if r["type"] == "result"] == ["pass"]


def test_a_malformed_hook_is_one_usage_error():
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", env={"MICROBENCH_TEST_KILL": "rank1"},
                      timeout=QUICK)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "microbench: error: MICROBENCH_TEST_KILL='rank1': expected RANK:BENCHMARK:SIZE or RANK:BENCHMARK:SIZE:CYCLE "
        "(e.g. 1:allreduce:32)"]


def test_a_killed_np_parent_leaves_no_rank_behind(tmp_path):
    """``run --np`` killed outright (SIGKILL, as a job's or a test's time limit does) takes its mpiexec and ranks
    with it: mpiexec runs in a session of its own (so that a Ctrl-C reaches the parent first), and is sent SIGTERM
    when the parent dies."""
    import subprocess
    import time

    out = str(tmp_path / "r.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "microbench", "run", "--np", "2", "latency", "-m", "8",
                             "-i", "100000000", "--out", out], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        ranks: list[int] = []
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [pid for pid, is_rank in _ranks_of(out) if is_rank]
            time.sleep(0.2)
        assert len(ranks) == 2, "the ranks did not start"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _ranks_of(out):
            time.sleep(0.2)
        left = _ranks_of(out)
        assert not left, f"ranks or their launcher left running after their parent was killed: {left}"
    finally:
        proc.kill()
        for pid, _ in _ranks_of(out):
            os.kill(pid, signal.SIGKILL)


def _ranks_of(out: str) -> list[tuple[int, bool]]:
    """(pid, whether it is a rank rather than the launcher) of the processes of a run writing ``out``, but its
    ``--np`` parent (their command lines name the file)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if out.encode() in cmd and b"microbench" in cmd and b"--np" not in cmd:
            found.append((int(entry), os.path.basename(cmd[0]) not in (b"prterun", b"mpiexec", b"mpirun")))
    return found

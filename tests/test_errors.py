"""Bad input ends every rank quickly with one line from rank 0; a failing rank ends the whole job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import microbench, mpiexec, mpiexec_prefix, read_jsonl, results_of, run_process

# seconds, run_process's limit for one launch: each of these ends within a few. A rank left waiting for another
# would hang until its watchdog's default --timeout of 600 s, 10 times as long, so such a test fails on QUICK.
QUICK = 60


def assert_one_error(proc, *fragments, code=2, launcher=False):
    """Exit CODE and stderr exactly one line, ``microbench: error: ...`` holding each fragment. Under ``--np`` the
    parent refuses what it can before any rank starts, so nothing follows the line; with LAUNCHER (a job the user
    started with mpiexec) the launcher's own report of the failed job may follow it, and nothing of microbench's."""
    assert proc.returncode == code, proc.output
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith("microbench: error:"), proc.stderr
    assert len(lines) == 1 or launcher, proc.stderr
    assert not any("microbench" in line for line in lines[1:]), proc.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]
    assert "Traceback" not in proc.output
    assert "timeout:" not in proc.stderr  # no rank waited for its watchdog


@pytest.mark.parametrize("args,fragments", [
    (["allreduce", "nosuch"], ["unknown benchmark 'nosuch'", "allgather"]),
    (["allreduce", "-m", "4X"], ["bad size '4X'"]),
    (["allreduce", "-m", "1M:1K"], ["MIN (1048576 B) is larger than MAX (1024 B)"]),
    (["allreduce", "--dtype", "complex"], ["invalid choice: 'complex'"]),
    (["latency", "--in-place"], ["--in-place applies to allreduce, allgather, reduce_scatter, reduce, iallreduce", "not latency"]),
    (["allreduce", "-i", "0"], ["--iterations must be at least 1"]),
])
@pytest.mark.parametrize("how", ["self-launch", "mpiexec"])
def test_bad_input_one_line_every_rank_nonzero(args, fragments, how):
    if how == "self-launch":
        proc = microbench("run", "--np", "2", *args, timeout=QUICK)
    else:
        proc = mpiexec(2, "run", *args, timeout=QUICK)
    assert_one_error(proc, *fragments, launcher=how == "mpiexec")


def test_size_too_large_for_memory_says_how_much(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8,512G", "--out", str(out), timeout=QUICK)
    assert_one_error(proc, "allreduce at 512G needs 2.0 TiB", "2 ranks x 1.0 TiB", "available", code=1)
    assert not out.exists() or results_of(out) == []


def test_benchmark_needing_two_ranks_on_one():
    proc = microbench("run", "--np", "1", "latency", "-m", "8", timeout=QUICK)
    assert_one_error(proc, "latency needs at least 2 ranks")


def test_root_outside_the_job():
    proc = microbench("run", "--np", "2", "broadcast", "--root", "5", "-m", "8", timeout=QUICK)
    assert_one_error(proc, "--root 5 is not a rank")


def test_np_differs_from_launcher():
    proc = mpiexec(2, "run", "--np", "4", "allreduce", "-m", "8", timeout=QUICK)
    assert_one_error(proc, "--np 4 but the launcher started 2 ranks", launcher=True)


def _mpmd(rank0_args, rank1_args):
    cmd, env = mpiexec_prefix(2)
    exe, rest = cmd[0], cmd[3:]  # drop "-n 2"
    mb = [sys.executable, "-m", "microbench", "run"]
    full = [exe, *rest, "-n", "1", *mb, *rank0_args, ":", "-n", "1", *mb, *rank1_args]
    return run_process(full, timeout=QUICK, env=env)


def test_options_that_differ_between_ranks():
    proc = _mpmd(["allreduce", "-m", "8:64"], ["allreduce", "-m", "8:128"])
    assert_one_error(proc, "options differ between ranks", "sizes", "rank 1", launcher=True)


def test_parse_error_on_one_rank_only_reaches_all():
    proc = _mpmd(["allreduce", "-m", "8"], ["allreduce", "-m", "8", "--nosuch-option"])
    assert_one_error(proc, "unrecognized arguments: --nosuch-option", "(on rank 1)", launcher=True)


def test_exception_on_one_rank_ends_the_job_and_keeps_finished_sizes(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "5", "--out", str(out),
                      env={"MICROBENCH_TEST_RAISE": "1:allreduce:32"}, timeout=QUICK)
    assert proc.returncode == 3  # an internal error, never read as a verdict; mpiexec passes MPI_Abort's code on
    assert "microbench: rank 1: internal error: RuntimeError: test hook" in proc.stderr
    assert "timeout:" not in proc.stderr  # the error ended the job, not rank 0's watchdog (QUICK: see above)
    sizes = [r["size_bytes"] for r in results_of(out)]
    assert sizes == [8, 16]
    # every line on disk is whole JSON; the end record says the run failed, and why (rank 1's error, not the
    # SIGTERM the launcher sent rank 0), and the note rank 1 left for rank 0 is gone
    lines = read_jsonl(out)
    assert lines[0]["type"] == "run" and lines[-1]["type"] == "end", lines[-1]
    assert lines[-1]["status"] == "failed" and lines[-1]["reason"].startswith("rank 1: RuntimeError: test hook")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


@pytest.mark.parametrize("flag", ["--out", "--csv", "--samples"])
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_unwritable_output_is_refused_before_measuring(flag, backend):
    # rank 0 alone fails this check; under torch the other rank would otherwise wait in the preflight's dtype
    # probe (an allreduce on the benchmark's group) until its watchdog, which would report a stall
    if backend == "torch":
        pytest.importorskip("torch")
    proc = microbench("run", "--np", "2", "--backend", backend, "allreduce", "-m", "8", flag,
                      "/proc/microbench/r.out", timeout=QUICK)
    assert_one_error(proc, f"{flag} /proc/microbench/r.out: cannot write there")
    assert "# allreduce" not in proc.stdout  # nothing was measured


def test_broken_pipe_ends_quietly():
    # `microbench ... | head -1` where the reader is already gone: the very first write meets a closed pipe.
    # microbench's own status (141, as SIGPIPE would give a shell) and nothing on stderr: no traceback, no
    # "Exception ignored" from the interpreter's last flush.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "microbench", "workload", "--model", "13B", "--scheme", "zero3",
                               "--dp", "8"], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=QUICK)
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == ""

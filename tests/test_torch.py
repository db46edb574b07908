"""torch.distributed: gloo at 2 and 4 ranks under torchrun and under mpiexec, every benchmark, --check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import microbench, mpiexec, read_jsonl, results_of, run_process

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")

ALL = ["allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw", "reduce", "alltoall", "bibw"]
HAS_CUDA = torch.cuda.is_available()


def torchrun(nranks: int, *args: str, timeout: float = 240, env: dict | None = None):
    exe = shutil.which("torchrun")
    assert exe, "torchrun is installed with torch"
    return run_process([exe, f"--nproc-per-node={nranks}", "--no-python", "microbench", *args], timeout=timeout,
                       env=env)


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
@pytest.mark.parametrize("nranks", [2, 4])
def test_gloo_every_benchmark_checked(launcher, nranks, tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["run", "--backend", "torch", *ALL, "-m", "8,1K", "-i", "5", "-x", "1", "--check", "--out", str(out)]
    proc = torchrun(nranks, *args) if launcher == "torchrun" else mpiexec(nranks, *args, timeout=240)
    assert proc.returncode == 0, proc.output
    run = read_jsonl(out)[0]
    assert run["backend"] == "torch" and run["torch"]["backend"] == "gloo" and run["ranks"] == nranks
    assert (run["launcher"] == "torchrun") == (launcher == "torchrun")
    assert run["torch"]["version"] == torch.__version__
    res = results_of(out)
    # float32 reduce_scatter needs n elements: 8 B drops out at 4 ranks
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [
        (b, s) for b in ALL for s in (8, 1024) if not (b == "reduce_scatter" and s < 4 * nranks)]
    assert all(r["check"] == "pass" and r["torch_backend"] == "gloo" and r["loop"] == "python" for r in res)
    # torch's all_reduce and reduce have no out-of-place form: recorded as in place
    assert all(r["in_place"] is True for r in res if r["benchmark"] in ("allreduce", "reduce"))
    assert all(r["in_place"] is False for r in res if r["benchmark"] in ("allgather", "reduce_scatter"))


@pytest.mark.parametrize("bench", ["allgather", "reduce_scatter"])
def test_gloo_in_place_follows_nccl_block_convention(bench, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "--backend", "torch", bench, "--in-place", "-m", "64,1K", "-i", "5", "-c",
                      "--out", str(out), timeout=180)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [(bench, 64), (bench, 1024)]
    assert all(r["in_place"] is True and r["check"] == "pass" for r in res)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8"])
def test_gloo_reduction_dtypes(dtype, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "--backend", "torch", "allreduce", "reduce_scatter", "--dtype", dtype,
                      "-m", "16,256", "-i", "5", "-c", "--out", str(out), timeout=180)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [(b, s) for b in ("allreduce", "reduce_scatter")
                                                                for s in (16, 256)]
    assert all(r["dtype"] == dtype and r["check"] == "pass" for r in res)


def test_torch_corruption_is_caught(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "--backend", "torch", "allgather", "-m", "64,128", "-i", "3", "-c",
                      "--out", str(out), env={"MICROBENCH_TEST_CORRUPT": "1:allgather:128"}, timeout=180)
    assert proc.returncode == 1
    assert {r["size_bytes"]: r["check"] for r in results_of(out)} == {64: "pass", 128: "fail"}


def test_missing_backend_and_device_are_refused_clearly():
    if not torch.distributed.is_nccl_available():
        proc = microbench("run", "--np", "2", "--backend", "torch", "--torch-backend", "nccl", "-m", "8")
        assert proc.returncode != 0 and "no nccl backend" in proc.stderr
        assert proc.stderr.count("microbench: error:") == 1
    if not HAS_CUDA:
        # the same refusal, in the same words and status, whether --np or a launcher started the ranks
        args = ["run", "--backend", "torch", "--device", "cuda", "-m", "8"]
        for proc in (microbench(*args[:1], "--np", "2", *args[1:]), mpiexec(2, *args)):
            assert proc.returncode == 1, proc.output
            assert "no CUDA device" in proc.stderr and proc.stderr.count("microbench: error:") == 1
    proc = microbench("run", "--np", "2", "--cuda-graph", "-m", "8")
    assert proc.returncode == 2 and "--cuda-graph" in proc.stderr


TEARDOWN = r"""
import socket, sys
import torch.distributed as dist
from microbench import cli
with socket.socket() as s:  # a free port for this one-process job's store
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
import os
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                  TORCHELASTIC_RUN_ID="teardown-test")
code = cli.main(["run", "--backend", "torch", "bw", "--in-place", "-m", "0"])
print("status", code, "process group left:", dist.is_initialized(), flush=True)
"""


def test_error_under_torchrun_leaves_no_process_group():
    """A refused run under torchrun destroys its process group before it returns its status.

    A group left for interpreter exit to tear down made torch abort (SIGABRT) about 1 launch in 8: here the
    run is made in one process under torchrun's environment and the group's state read after the error."""
    proc = run_process([sys.executable, "-c", TEARDOWN], timeout=120)
    assert "status 2 process group left: False" in proc.stdout, proc.output
    assert proc.output.count("microbench: error:") == 1 and proc.returncode == 0


def test_error_under_torchrun_exits_cleanly():
    proc = torchrun(2, "run", "--backend", "torch", "bw", "--in-place", "-m", "0")
    assert proc.returncode != 0
    assert proc.output.count("microbench: error:") == 1
    assert "terminate called" not in proc.output and "SIGABRT" not in proc.output, proc.output


def test_mpi_backend_under_torchrun_is_refused():
    proc = torchrun(2, "run", "allreduce", "-m", "8")
    assert proc.returncode != 0
    assert "needs an MPI launcher" in proc.output


# ----------------------------------------------------------------------------- GPU (skip without one)
def gpu(test):
    """A test that needs a CUDA GPU: skips without one, also where the torch group is required (CI has none)."""
    skip = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (torch.cuda.is_available() is False)")
    return pytest.mark.gpu(skip(test))


@gpu
def test_single_rank_nccl_with_cuda_events_and_graph(tmp_path):
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    # allgather is out of place, so even one rank's graph holds work (a copy); allreduce is in place: empty
    for extra in ([], ["--cuda-graph"], ["--cuda-graph", "-c"]):
        out = tmp_path / f"r{len(extra)}.jsonl"
        proc = torchrun(1, "run", "--backend", "torch", "--device", "cuda", "allgather", "allreduce", "-m", "8,1M",
                        "-i", "200", *extra, "--out", str(out))
        assert proc.returncode == 0, proc.output
        res = results_of(out)
        assert all(r["device"] == "cuda" and r["torch_backend"] == "nccl" for r in res)
        assert all(r["check"] == ("pass" if "-c" in extra else None) for r in res)
        assert all(r["timer"] == ("cuda_graph" if extra else "cuda_events") for r in res)
        if extra:  # 200 iterations: graphs of 4 replayed 50 times; under --check one-call graphs, one per iteration
            per_replay = 1 if "-c" in extra else 4
            assert all(r["cuda_graph"] == {"iterations_per_replay": per_replay, "replays": 200 // per_replay,
                                           "graphs": 1} for r in res)
        if "-c" in extra:  # paired: the gate, and how many samples began before their launch ended
            assert all(set(r["launch"]) == {"host_us_per_call", "device_us_per_call", "bound", "gate_us", "ungated",
                                            "samples"} for r in res)
        else:  # lean events or replays: the host's launch time is recorded beside the device time
            assert all(set(r["launch"]) == {"host_us_per_call", "device_us_per_call", "bound"} for r in res)
        assert read_jsonl(out)[0]["torch"]["nccl_version"]


@gpu
@pytest.mark.parametrize("buffer", ["torch", "cupy"])
def test_mpi_device_buffers_staged_or_cuda_aware(buffer, tmp_path):
    if buffer == "cupy":
        pytest.importorskip("cupy")
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "1", "--device", "cuda", "--buffer", buffer, "--stage-host", "allreduce",
                      "broadcast", "-m", "8,1M", "-i", "20", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    assert all(r["check"] == "pass" and r["device"] == "cuda" for r in results_of(out))


@gpu
def test_gpu_cold_cache_uses_the_l2(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = torchrun(1, "run", "--backend", "torch", "--device", "cuda", "--torch-backend", "gloo", "allreduce",
                    "-m", "1M", "-i", "20", "--cache", "cold", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    r = results_of(out)[0]
    assert r["cache_bytes"] == torch.cuda.get_device_properties(0).L2_cache_size


@gpu
def test_graph_replays_start_aligned(tmp_path):
    # capture, upload and a barrier come before the first timed replay: it is not an outlier
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    out, samples = tmp_path / "r.jsonl", tmp_path / "s.jsonl"
    proc = torchrun(1, "run", "--backend", "torch", "--device", "cuda", "--cuda-graph", "allgather", "-m", "8,1M",
                    "-i", "400", "--out", str(out), "--samples", str(samples))
    assert proc.returncode == 0, proc.output
    rows = [r for r in read_jsonl(samples) if r["type"] == "samples"]
    assert len(rows) == 2
    for row in rows:  # 400 iterations: 50 replays of 8, after the untimed lead replay
        rest = sorted(row["latency_us"][1:])
        assert len(row["latency_us"]) == 50
        assert row["latency_us"][0] <= rest[len(rest) // 2] + 3 * (rest[int(0.9 * len(rest))] - rest[len(rest) // 2]) + 2


@gpu
def test_paired_nccl_samples_wait_behind_the_gate(tmp_path):
    # --sync barrier: each start event is recorded after a barrier, on an idle GPU; the gate holds it while the host
    # launches, so the eager launch (tens of us) is not in the samples
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    out = tmp_path / "r.jsonl"
    proc = torchrun(1, "run", "--backend", "torch", "--device", "cuda", "--sync", "barrier", "allgather", "-m", "8,1M",
                    "-i", "200", "--out", str(out))
    assert proc.returncode == 0, proc.output
    for r in results_of(out):
        assert r["launch"]["gate_us"] > 0 and r["launch"]["samples"] == 200
        assert r["launch"]["ungated"] <= 2 and not r["launch"]["bound"], r["launch"]


@gpu
def test_two_ranks_on_one_gpu_are_refused_before_nccl(tmp_path):
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    proc = torchrun(2, "run", "--backend", "torch", "--device", "cuda", "allreduce", "-m", "8",
                    env={"CUDA_VISIBLE_DEVICES": "0"})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "share GPU" in errors[0], proc.output
    assert "Duplicate GPU" not in proc.output and "DistBackendError" not in proc.output


@gpu
def test_cold_graphs_rotate_through_the_pool(tmp_path):
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    out = tmp_path / "r.jsonl"
    proc = torchrun(1, "run", "--backend", "torch", "--device", "cuda", "--cuda-graph", "allgather", "-m", "64K",
                    "-i", "200", "--cache", "cold", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.output
    r = results_of(out)[0]
    assert r["cache"] == "cold" and r["pool_slots"] > 1 and r["cuda_graph"]["graphs"] > 1


@gpu
@pytest.mark.parametrize("buffer", ["torch", "cupy"])
@pytest.mark.parametrize("loop", ["native", "python"])
def test_mpi_device_buffers_with_a_device_flush(buffer, loop, tmp_path):
    # one rank, in place: MPI touches no device memory, so a non-CUDA-aware MPI may be told it is
    if buffer == "cupy":
        pytest.importorskip("cupy")
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "1", "--device", "cuda", "--buffer", buffer, "--in-place", "--flush",
                      "--loop", loop, "allreduce", "-m", "8,1M", "-i", "20", "--out", str(out),
                      env={"MICROBENCH_ASSUME_CUDA_AWARE": "1"})
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["flush"] for r in res] == [True, True] and all(r["call_path"] in ("native", "shim") for r in res)


@gpu
def test_staged_in_place_moves_the_device_data(tmp_path):
    # the host copy is poisoned after each fill: a pass means every staged call brought its input from the GPU
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "--device", "cuda", "--buffer", "torch", "--stage-host", "--in-place",
                      "allreduce", "allgather", "reduce_scatter", "-m", "64,1M", "-i", "10", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    assert [(r["benchmark"], r["check"]) for r in results_of(out)] == [
        (b, "pass") for b in ("allreduce", "allgather", "reduce_scatter") for _ in (64, 1 << 20)]


def test_a_preflight_failure_on_one_rank_ends_every_rank_before_the_collective_checks(tmp_path):
    # rank 0 alone checks the output; the others go on to the collective dtype probe on gloo: they must learn of
    # rank 0's error first (it used to leave them in the probe until the watchdog's 600 s)
    proc = microbench("run", "--np", "2", "--backend", "torch", "allreduce", "-m", "8", "--out",
                      "/proc/microbench/r.jsonl", timeout=120)
    assert proc.returncode == 2, proc.output
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert len(errors) == 1 and "--out /proc/microbench/r.jsonl: cannot write there" in errors[0], proc.stderr
    assert "timeout:" not in proc.stderr and "# allreduce" not in proc.stdout


def test_gloo_alltoallv_with_splits_checked(tmp_path):
    """issue 42: all_to_all_single with split sizes (and its async twin) on gloo, zipf and hot splits, checked."""
    out = tmp_path / "v.jsonl"
    for pattern in ("zipf:1.2", "hot:4"):
        proc = mpiexec(4, "run", "--backend", "torch", "alltoallv", "ialltoallv", "--splits", pattern, "-m", "1K",
                       "-i", "3", "-x", "1", "--check", "--dtype", "float32", "--out", str(out), timeout=240)
        assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["splits"]) for r in res] == [
        ("alltoallv", "zipf:1.2"), ("ialltoallv", "zipf:1.2"), ("alltoallv", "hot:4"), ("ialltoallv", "hot:4")]
    assert all(r["check"] == "pass" and r["torch_backend"] == "gloo" for r in res)
    # 256 float32 per rank: zipf:1.2 rows 135 59 36 26 (rank 0 receives 4 x 135); hot:4: 256 x 4/7 = 146.3 and
    # 256/7 = 36.6, floors 146 36 36 36 leave 2 for the remainders of 0.57 (ties: the ranks after the sender)
    assert res[0]["recv_bytes"] == 4 * 4 * 135 and res[2]["recv_bytes"] == 4 * 4 * 146


def test_sigterm_under_torchrun_leaves_no_failure_note(tmp_path):
    """torchrun passes a SIGTERM to every worker: rank 0 closes the run as incomplete and exits, and rank 1's
    collective then fails on the closed connection. That error comes from the stop, not a fault of rank 1's own:
    it must not leave ``OUT.rank1.failed`` beside the records, where nothing would ever read it."""
    out = tmp_path / "t.jsonl"
    exe = shutil.which("torchrun")
    proc = subprocess.Popen([exe, "--nproc-per-node=2", "--no-python", "microbench", "run", "--backend", "torch",
                             "allreduce", "-m", "8:256M", "-i", "300", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.read_text().count('"type":"result"') >= 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no results appeared"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"], stderr
    end = [json.loads(line) for line in out.read_text().splitlines()][-1]
    assert end["type"] == "end" and end["status"] == "incomplete" and end["reason"].startswith("SIGTERM"), end

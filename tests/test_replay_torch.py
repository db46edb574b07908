"""``microbench replay --backend torch``: each scheme's calls on gloo process groups, under mpiexec and torchrun."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import microbench, read_jsonl, run_process
from microbench.replay.schedule import calls
from microbench.workload.distribution import Workload
from microbench.workload.model import Model

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 ml_dtypes)")

MODEL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--seq", "64", "--vocab", "512"]
TINY = Model(256, 2, 4, 64, 512)
FAST = ["--warmup", "1", "--iterations", "2", "--json"]


def _summary(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("scheme,sizes,groups", [
    ("ddp", {"dp": 4}, {"dp"}),
    ("zero3", {"dp": 4}, {"dp"}),
    ("tp", {"tp": 2, "dp": 2}, {"tp", "dp"}),
    ("pp", {"pp": 2, "dp": 2}, {"pp", "dp"}),
])
def test_four_gloo_ranks_replay_each_scheme_on_its_groups(scheme, sizes, groups):
    flags = [x for k, v in sizes.items() for x in (f"--{k}", str(v))]
    out = _summary(microbench("replay", "--np", "4", "--backend", "torch", *MODEL, "--scheme", scheme, *flags,
                              *FAST))
    schedule = calls(Workload(TINY, scheme, **sizes))
    assert out["backend"] == "torch-gloo" and out["calls_per_iteration"] == len(schedule)
    assert set(out["per_group_s"]) == groups and all(v > 0 for v in out["per_group_s"].values())
    assert set(out["per_collective_s"]) == {c.collective for c in schedule}
    assert {r["what"] for r in out["comparison"]} >= {"total", *(f"group {g}" for g in groups)}


def test_two_ranks_under_torchrun_default_to_torch_and_write_a_record(tmp_path):
    exe = shutil.which("torchrun")
    assert exe, "torchrun is installed with torch"
    records = tmp_path / "replay.jsonl"
    result = run_process([exe, "--nproc-per-node=2", "--no-python", "microbench", "replay", *MODEL, "--scheme", "ddp",
                          "--dp", "2", *FAST, "--out", str(records)], timeout=240)
    out = _summary(result)
    assert out["backend"] == "torch-gloo" and out["per_collective_s"]["allreduce"] > 0
    record = read_jsonl(records)[0]
    assert record["type"] == "replay" and record["launcher"] == "torchrun" and record["mpi"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_without_a_gpu_is_one_error_line_before_any_rank_starts():
    result = microbench("replay", "--np", "2", "--backend", "torch", "--torch-backend", "gloo", "--device", "cuda",
                        *MODEL, "--scheme", "ddp", "--dp", "2")
    assert result.returncode == 2 and "torch sees no CUDA device" in result.stderr
    assert "Traceback" not in result.stderr and "prterun" not in result.stderr


@pytest.mark.parametrize("flags,message", [
    (["--device", "cuda"], "--device cuda replays with --backend torch"),
    (["--torch-backend", "gloo"], "--torch-backend applies to --backend torch"),
    (["--backend", "torch", "--torch-backend", "nccl"], "the nccl backend moves CUDA tensors"),
])
def test_backend_combinations_that_cannot_run_are_one_error_line(flags, message):
    result = microbench("replay", "--np", "2", *flags, *MODEL, "--scheme", "ddp", "--dp", "2")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("scheme", ["ddp", "zero3"])
def test_two_gloo_ranks_replay_the_data_parallel_schemes(scheme):
    out = _summary(microbench("replay", "--np", "2", "--backend", "torch", *MODEL, "--scheme", scheme, "--dp", "2",
                              *FAST))
    assert out["backend"] == "torch-gloo"
    assert out["calls_per_iteration"] == len(calls(Workload(TINY, scheme, dp=2)))
    assert set(out["per_group_s"]) == {"dp"} and out["per_group_s"]["dp"] > 0

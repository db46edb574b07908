"""``microbench replay --backend torch`` beyond the schemes (test_replay_mpi.py runs each on gloo too): torchrun, the
record, and the refusals."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import microbench, read_jsonl, run_process
from test_replay_mpi import FAST, MODEL

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")


def _summary(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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


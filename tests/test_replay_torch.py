"""``microbench replay --backend torch``: its refusals (test_replay_mpi.py runs each scheme on gloo, and ddp under
torchrun, checked)."""

from __future__ import annotations

import pytest

from conftest import microbench
from test_replay_mpi import MODEL

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")


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


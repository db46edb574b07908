"""The workload model against a real framework: torch DDP on gloo, 2 ranks, profiled, read back with
``microbench workload --trace`` and matched call for call with the model's ``--scheme ddp`` for the same shape.

The whole comparison (every framework, 2 and 4 ranks, with times) is ``scripts/bench_frameworks.py``
(docs/frameworks.md); this is its smallest case, kept in the suite, and the matching rules it relies on.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import REPO, microbench, run_process

sys.path.insert(0, str(REPO / "scripts"))
from frameworks.compare import GLOO_REDUCE_SCATTER, compare, unexplained  # noqa: E402

from microbench.workload.distribution import Workload  # noqa: E402
from microbench.workload.model import Model, parameter_tensors  # noqa: E402
from microbench.workload.schemes import build  # noqa: E402

# the output head (4096 x 64 fp32) is 1 MiB: DDP's first bucket closes on it, the rest fills the second
SHAPE = dict(hidden=64, layers=2, heads=4, seq=32, vocab=4096)
NO_TORCH = "PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)"


def msg(collective, nbytes, count, phase="trace"):
    return {"collective": collective, "bytes": nbytes, "count": count, "group_size": 2, "phase": phase}


def test_every_difference_is_named_or_unexplained():
    model = [msg("allgather", 100, 2, "forward"), msg("reduce_scatter", 200, 1, "gradients"),
             msg("allreduce", 50, 4, "recompute"), msg("allreduce", 50, 4, "forward"), msg("broadcast", 9, 1, "setup")]
    real = [msg("allgather", 100, 2), msg("allreduce", 200, 1), msg("allreduce", 50, 4), msg("send", 7, 1)]
    rows = {(r.collective, r.bytes): r for r in compare(model, real, not_in_job={"recompute": "not recomputed"})}
    assert rows[("allgather", 100)].difference == ""  # the same calls
    assert rows[("allreduce", 200)].difference == GLOO_REDUCE_SCATTER  # gloo's reduce_scatter is an allreduce
    assert rows[("allreduce", 200)].model_collective == "reduce_scatter"
    assert rows[("allreduce", 50)].difference == "recompute: not recomputed"
    assert rows[("allreduce", 50)].model_calls == 8 and rows[("allreduce", 50)].real_calls == 4
    assert [(r.collective, r.difference) for r in unexplained(list(rows.values()))] == [
        ("send", "unexplained: only in the real job")]  # the setup broadcast is no per-iteration call
    # on NCCL a reduce_scatter stays one
    assert unexplained(compare(model[:2], [msg("allgather", 100, 2), msg("reduce_scatter", 200, 1)], "nccl")) == []


def test_the_job_trains_exactly_the_modelled_tensors():
    pytest.importorskip("torch", reason=NO_TORCH)
    from frameworks.gpt import GPT

    m = Model(**SHAPE, biases="full")
    assert [tuple(p.shape) for p in GPT(m).parameters()] == [t.shape for t in parameter_tensors(m)]


def test_ddp_on_gloo_matches_the_model_call_for_call(tmp_path):
    pytest.importorskip("torch", reason=NO_TORCH)
    torchrun = shutil.which("torchrun") or str(REPO / "no-torchrun")
    shape = [f"--{k}={v}" for k, v in SHAPE.items()]
    job = run_process([torchrun, "--standalone", "--nproc-per-node=2", str(REPO / "scripts/frameworks/torch_job.py"),
                       "--scheme", "ddp", *shape, "--micro-batch=1", "--warmup=2", "--profiled=2", "--timed=1",
                       "--out", str(tmp_path)], timeout=240)
    assert job.returncode == 0, job.output
    traces = sorted(str(p) for p in tmp_path.glob("trace_rank*.json"))
    assert len(traces) == 2
    read = microbench("workload", "--trace", *traces, "--trace-group-size", "2", "--trace-iterations", "2", "--json")
    assert read.returncode == 0, read.output
    real = json.loads(read.stdout)
    assert real["trace"]["ranks"] == 2 and real["trace"]["calls_per_rank"]["min"] == 4  # 2 buckets x 2 iterations
    modelled = build(Workload(Model(**SHAPE, biases="full"), "ddp", dp=2, dtype="fp32"))
    rows = compare([m.as_json() for m in modelled.messages], real["messages"])
    assert not unexplained(rows), rows
    # exact: the same two allreduces, no named difference needed (DDP on gloo issues what NCCL would)
    head = 4096 * 64 * 4
    assert [(r.collective, r.bytes, r.real_calls, r.difference) for r in rows] == [
        ("allreduce", head, 1, ""), ("allreduce", modelled.workload.params * 4 - head, 1, "")]

"""One rank of a real DeepSpeed ZeRO job (stage 1, 2 or 3) on the CPU accelerator's gloo, logged and profiled.

Run under torchrun (one process per rank) with ``DS_ACCELERATOR=cpu``: ``deepspeed.initialize`` with ZeRO at
``--stage``, fp32, DeepSpeed's defaults otherwise, and the comms logger on. After ``--warmup`` iterations the
logger is reset (``deepspeed.comm.reset_log``), ``--profiled`` iterations run under the logger and
``torch.profiler``, and rank 0 prints ``deepspeed.comm.log_summary()`` (the table users read; the script reads it
back with ``microbench workload --trace --trace-format deepspeed``). The logger is then switched off (it makes
every call blocking) for ``--timed`` iterations and as many compute-only ones (the plain model on this rank).

    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node 2 scripts/frameworks/deepspeed_job.py --stage 1 --out D
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from frameworks.gpt import GPT, batch, loss_of  # noqa: E402
from frameworks.job_args import add_job_arguments, model_of  # noqa: E402
from frameworks.torch_job import LR, plain_step, timed  # noqa: E402


def config(stage: int, micro_batch: int) -> dict:
    """DeepSpeed's defaults except the stage, the batch and the comms logger (fp32: no fp16/bf16 section)."""
    return {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "torch_adam": True}},
            "comms_logger": {"enabled": True, "verbose": False, "prof_all": True, "debug": False}}


def main() -> None:
    import deepspeed
    import deepspeed.comm as ds_comm

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--stage", type=int, choices=(1, 2, 3), required=True)
    add_job_arguments(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    deepspeed.init_distributed(dist_backend="gloo")
    rank = ds_comm.get_rank()
    m = model_of(args)
    torch.manual_seed(0)
    engine, _, _, _ = deepspeed.initialize(model=GPT(m), config=config(args.stage, args.micro_batch))
    tokens = batch(m, args.micro_batch, seed=rank)

    def step(t: torch.Tensor) -> None:
        engine.backward(loss_of(engine(t), t))
        engine.step()

    from torch.profiler import ProfilerActivity, profile

    timed(step, tokens, args.warmup, barrier=False)
    ds_comm.reset_log()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        timed(step, tokens, args.profiled, barrier=False)
    out = Path(args.out)
    prof.export_chrome_trace(str(out / f"trace_rank{rank}.json"))
    ds_comm.log_summary()
    sys.stdout.flush()
    ds_comm.configure(enabled=False)
    iterations = timed(step, tokens, args.timed, barrier=True)
    torch.manual_seed(0)
    local = GPT(m)
    optimizer = torch.optim.AdamW(local.parameters(), lr=LR)
    compute = timed(lambda t: plain_step(local, optimizer, t), tokens, args.warmup + args.timed, barrier=True)
    (out / f"timing_rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "world": ds_comm.get_world_size(), "iteration_s": iterations,
         "compute_only_s": compute[args.warmup:], "profiled_iterations": args.profiled}))
    ds_comm.barrier()


if __name__ == "__main__":
    main()

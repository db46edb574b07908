"""One rank of a real PyTorch training job on gloo, profiled: DDP, FSDP2, tensor or pipeline parallelism.

Run under torchrun (one process per rank), it trains the GPT of ``gpt.py`` on random tokens for
``--warmup`` iterations, then ``--profiled`` iterations under ``torch.profiler`` (the Kineto trace a user
records: ``trace_rank<r>.json``), then ``--timed`` iterations each after a barrier and as many
compute-only iterations (the same model, batch and optimizer on this rank alone, no framework: what the
iteration costs without communication; none for tensor parallelism, whose ranks compute a t-th of it), and writes ``timing_rank<r>.json`` (seconds).

    torchrun --standalone --nproc-per-node 2 scripts/frameworks/torch_job.py --scheme ddp --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from frameworks.gpt import GPT, batch, loss_of  # noqa: E402
from frameworks.job_args import add_job_arguments, model_of  # noqa: E402

LR = 1e-4


def plain_step(model: torch.nn.Module, optimizer, tokens: torch.Tensor) -> None:
    """One iteration of an ordinary training loop: forward, loss, backward, optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    loss_of(model(tokens), tokens).backward()
    optimizer.step()


def ddp(model: torch.nn.Module, args):
    """torch.nn.parallel.DistributedDataParallel with its defaults (bucket_cap_mb=25, first bucket 1 MiB)."""
    from torch.nn.parallel import DistributedDataParallel

    wrapped = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=LR)
    return lambda tokens: plain_step(wrapped, optimizer, tokens)


def fsdp2(model: torch.nn.Module, args):
    """FSDP2: ``fully_shard`` on every block, then on the root (the embeddings, final norm and head)."""
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    return lambda tokens: plain_step(model, optimizer, tokens)


def tp(model: torch.nn.Module, args):
    """Tensor parallelism with DTensor (``parallelize_module``), Megatron-LM's layout: QKV and MLP-in
    column-parallel, attention-out and MLP-out row-parallel, the word embedding vocabulary-parallel
    (row-wise), the output head column-parallel with its logits left sharded for ``loss_parallel``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.layers:
        parallelize_module(block, mesh, {"attn.qkv": ColwiseParallel(), "attn.out": RowwiseParallel(),
                                         "mlp.in": ColwiseParallel(), "mlp.out": RowwiseParallel()})
    parallelize_module(model, mesh, {
        "embed.word": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def step(tokens: torch.Tensor) -> None:
        with loss_parallel():
            plain_step(model, optimizer, tokens)

    return step


class Stage(torch.nn.Module):
    """One pipeline stage of the GPT: the embeddings on the first, the final norm and head on the last."""

    def __init__(self, model: torch.nn.Module, index: int, stages: int):
        super().__init__()
        per = len(model.layers) // stages
        self.embed = model.embed if index == 0 else None
        self.layers = torch.nn.ModuleList(model.layers[index * per:(index + 1) * per])
        last = index == stages - 1
        self.final_ln, self.lm_head = (model.final_ln, model.lm_head) if last else (None, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.final_ln(x)) if self.lm_head is not None else x


def pp(model: torch.nn.Module, args):
    """Pipelining with ``torch.distributed.pipelining``: one stage per rank (L / p blocks each), GPipe over
    ``--microbatches`` microbatches of ``--micro-batch`` sequences each."""
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    rank, stages = dist.get_rank(), dist.get_world_size()
    stage = Stage(model, rank, stages)
    schedule = ScheduleGPipe(PipelineStage(stage, rank, stages, torch.device("cpu")), args.microbatches,
                             loss_fn=lambda logits, target: F.cross_entropy(logits.flatten(0, 1), target.flatten()))
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)

    def step(tokens: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        batch_tokens = tokens.repeat(args.microbatches, 1)
        if rank == 0:
            schedule.step(batch_tokens)
        elif rank == stages - 1:
            schedule.step(target=batch_tokens.roll(-1, dims=1))
        else:
            schedule.step()
        optimizer.step()

    return step


def stage_compute(stage: Stage, m, args):
    """One pipeline rank's compute without communication: its stage's forward and backward of every
    microbatch (GPipe's order), on the tokens (first stage) or on activations of the right shape, and its step."""
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)

    def step(tokens: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        outputs = []
        for _ in range(args.microbatches):
            x = tokens if stage.embed is not None else torch.randn(*tokens.shape, m.hidden, requires_grad=True)
            outputs.append(stage(x))
        for y in outputs:
            if stage.lm_head is not None:
                loss_of(y, tokens).backward()
            else:
                y.backward(torch.ones_like(y))
        optimizer.step()

    return step


SCHEMES = {"ddp": ddp, "fsdp2": fsdp2, "tp": tp, "pp": pp}


def timed(step, tokens: torch.Tensor, iterations: int, barrier: bool) -> list[float]:
    """Wall seconds of each iteration (after a barrier, so every rank starts together)."""
    out = []
    for _ in range(iterations):
        if barrier:
            dist.barrier()
        start = time.perf_counter()
        step(tokens)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scheme", choices=sorted(SCHEMES), required=True)
    add_job_arguments(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    m = model_of(args)
    torch.manual_seed(0)
    step = SCHEMES[args.scheme](GPT(m), args)
    # data-parallel ranks train on their own batch; tensor-parallel ranks share one
    tokens = batch(m, args.micro_batch, seed=0 if args.scheme in ("tp", "pp") else rank)
    from torch.profiler import ProfilerActivity, profile

    timed(step, tokens, args.warmup, barrier=False)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        timed(step, tokens, args.profiled, barrier=False)
    out = Path(args.out)
    prof.export_chrome_trace(str(out / f"trace_rank{rank}.json"))
    iterations = timed(step, tokens, args.timed, barrier=True)
    compute = []
    torch.manual_seed(0)
    if args.scheme == "pp":  # this rank's stage alone, every microbatch forward then backward, nothing sent
        compute = timed(stage_compute(Stage(GPT(m), rank, dist.get_world_size()), m, args), tokens,
                        args.warmup + args.timed, barrier=True)
    elif args.scheme != "tp":  # a tensor-parallel rank computes a t-th of the model: no plain replica matches it
        local = GPT(m)
        optimizer = torch.optim.SGD(local.parameters(), lr=LR)
        compute = timed(lambda t: plain_step(local, optimizer, t), tokens, args.warmup + args.timed, barrier=True)
    (out / f"timing_rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "world": dist.get_world_size(), "iteration_s": iterations,
         "compute_only_s": compute[args.warmup:], "profiled_iterations": args.profiled}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

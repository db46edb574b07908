"""The options every framework job takes: the model's shape, the batch, and how many iterations of each kind."""

from __future__ import annotations

import argparse

from microbench.workload.model import Model


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=4, help="pipeline microbatches per iteration (pp only)")
    p.add_argument("--warmup", type=int, default=2, help="iterations before profiling (DDP rebuilds its buckets "
                                                          "after the first)")
    p.add_argument("--profiled", type=int, default=2, help="iterations under torch.profiler")
    p.add_argument("--timed", type=int, default=5, help="timed iterations, and as many compute-only ones")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--out", required=True, help="folder for the traces and timings")


def model_of(args) -> Model:
    """The workload model's description of the job's GPT (real GPT biases: 13h vectors per layer)."""
    return Model(args.hidden, args.layers, args.heads, args.seq, args.vocab, biases="full")

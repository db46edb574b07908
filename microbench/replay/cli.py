"""Replay one training iteration's communication on real communicators, with its compute, and time it.

  microbench replay --np 4 --model 125M --scheme ddp --dp 4
  microbench replay --np 4 --hidden 512 --layers 2 --heads 8 --scheme tp --tp 2 --dp 2 --tflops 0.05 --json
  mpiexec -n 4 microbench replay --model 13B --layers 1 --seq 256 --scheme zero3 --dp 4 --iterations 5
  microbench replay --np 2 --trace rank0.log rank1.log --trace-format nccl

The calls are the workload model's (``microbench workload``) for the scheme, setup excluded, or a trace's;
issued back to back on the layout's communicators (Megatron rank order: TP, then PP, then DP) through the
benchmark table's entries and the backends' primitives (``replay/dispatch.py``) from one buffer pool, with
``--tflops`` compute placed between them (``replay/schedule.py``). Launched like ``run``: with ``--np N`` outside a
launcher this process checks the arguments and starts N ranks (``cluster.launch.start_ranks``); every rank runs
``replay/driver.py``. Per figure, the slowest rank's, and the median over the timed iterations.
"""

from __future__ import annotations

import argparse

from microbench.cluster import launch
from microbench.replay import arguments
from microbench.replay.compare import THRESHOLD
from microbench.units import positive_number
from microbench.workload import parallel_arguments
from microbench.workload.cli import add_parallel_arguments, add_trace_arguments
from microbench.workload.distribution import SCHEMES
from microbench.workload.model import DEFAULT_SEQ, DEFAULT_VOCAB, MODEL_NAMES


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``microbench replay``, in groups as ``--help`` shows them."""
    _add_model(p)
    add_trace_arguments(p.add_argument_group("trace (instead of a model: its calls on all ranks)"))
    _add_compute_and_prediction(p)
    _add_backend(p)
    _add_run(p)


def _add_model(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and layout (as microbench workload)")
    g.add_argument("--model", choices=list(MODEL_NAMES),
                   help="a GPT-NeoX configuration of the paper, or a published shape (llama3-8b, llama3-70b, "
                        "mixtral-8x7b, deepseek-v3)")
    g.add_argument("--hidden", type=int, metavar="H", help="hidden size h (with --layers --heads, no --model)")
    g.add_argument("--layers", type=int, metavar="L",
                   help="transformer layers L; with --model, replay only L of its layers (the per-layer "
                        "pattern plus the embedding and output layers), for models larger than the machine")
    g.add_argument("--heads", type=int, metavar="A", help="attention heads a")
    g.add_argument("--seq", type=int, metavar="S", help=f"sequence length s (default {DEFAULT_SEQ})")
    g.add_argument("--vocab", type=int, metavar="V", help=f"vocabulary V (default {DEFAULT_VOCAB})")
    g.add_argument("--scheme", choices=SCHEMES, default="ddp", help="how the model is trained (default ddp)")
    add_parallel_arguments(g)
    parallel_arguments.add_shape_arguments(p.add_argument_group("a custom Llama-style or mixture-of-experts model"))
    parallel_arguments.add_parallel_arguments(p.add_argument_group("expert and context parallelism (moe, cp)"))


def _add_compute_and_prediction(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("compute")
    g.add_argument("--tflops", type=positive_number, metavar="X",
                   help="achieved TFLOP/s per device: run 6*params*tokens/(t*p) FLOP of compute per iteration "
                        "at that rate between the calls (the calibrated host kernel), and as many compute-only "
                        "iterations, for the exposed communication (needs a model)")
    g = p.add_argument_group("prediction")
    g.add_argument("--results", nargs="+", metavar="RUN.jsonl",
                   help="price the prediction on these records' curves (microbench run --out) instead of the "
                        "same launch's per-call latencies")
    g.add_argument("--stat", choices=("p50", "avg"), default="p50",
                   help="with --results, the latency statistic (default p50)")
    g.add_argument("--threshold", type=positive_number, default=THRESHOLD, metavar="F",
                   help=f"attribute the gap of rows whose replayed/predicted is off 1 by more than F "
                        f"(default {THRESHOLD})")


def _add_backend(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backend (as microbench run)")
    g.add_argument("--backend", choices=("mpi", "torch"),
                   help="mpi: mpi4py communicators split from the world (default under mpiexec/srun); torch: "
                        "torch.distributed process groups (default under torchrun)")
    g.add_argument("--torch-backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend; auto: nccl with --device cuda, else gloo")
    g.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the buffer pool lives (cuda: --backend torch, one GPU per local rank)")


def _add_run(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--np", type=int, metavar="N", help="start N local ranks under the installed MPI's mpiexec")
    g.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed iterations first, the first reported on its own as the cold iteration (default 1)")
    g.add_argument("--iterations", type=int, default=3, metavar="N", help="timed iterations (default 3)")
    g.add_argument("--check", action="store_true",
                   help="after the timed iterations, run one iteration's calls once more with known data and "
                        "check that each moved what its collective defines on the group the schedule names; "
                        "the record carries every rank's log of the calls issued (exit 1 on a wrong result)")
    g.add_argument("--json", action="store_true", help="print JSON instead of a table")
    g.add_argument("--out", metavar="FILE.jsonl",
                   help="append a 'replay' record (the summary, prediction and comparison, with where and under "
                        "which conditions it ran) to this JSON Lines file, for check and the report; missing "
                        "folders are made (as run --out)")


def main(args) -> int:
    """The ``replay`` verb: on every rank the driver; alone with ``--np N``, check the arguments and start N ranks."""
    if launch.is_np_parent(args.np):
        return launch.start_ranks(args._argv, args.np, lambda: _check_before_ranks(args))
    from microbench.replay import driver

    return driver.replay(args, arguments.workload(args))


def _check_before_ranks(args) -> None:
    """What the ``--np`` parent refuses before a rank exists: the workload, the layout on N ranks, the
    ``--results`` curves, the backend, and what a torch rank on this host would refuse."""
    workload = arguments.workload(args)
    schedule, _, layout = arguments.schedule(args, workload, args.np)
    arguments.curves(args, layout)
    arguments.check_memory(schedule, args.np)
    if arguments.backend(args, None) == "torch":
        arguments.check_torch_here(args)



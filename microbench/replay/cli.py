"""Replay one training iteration's communication on real communicators and time it.

  microbench replay --np 4 --model 125M --scheme ddp --dp 4
  microbench replay --np 4 --hidden 512 --layers 2 --heads 8 --scheme tp --tp 2 --dp 2 --json
  mpiexec -n 4 microbench replay --model 1.3B --scheme zero3 --dp 4 --iterations 5

The calls are the workload model's (``microbench workload``) for the scheme, setup excluded, issued in
phase order back to back on the layout's communicators (Megatron rank order: TP, then PP, then DP), from
one pooled host buffer, on MPI. Each timed iteration starts after a barrier; its wall time is the slowest
rank's. Per collective kind and per group: seconds inside the calls (and their waits), slowest rank.
Figures are medians over the timed iterations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from microbench.cluster import launch
from microbench.cluster.world import init_world, require_mpi
from microbench.errors import UsageError
from microbench.replay.execute import Executor, split
from microbench.replay.layout import Layout
from microbench.replay.schedule import OVERLAP_RULE, calls
from microbench.workload.cli import add_parallel_arguments
from microbench.workload.distribution import SCHEMES, Workload
from microbench.workload.model import DEFAULT_SEQ, DEFAULT_VOCAB, PRESETS, Model, preset


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and layout (as microbench workload)")
    g.add_argument("--model", choices=list(PRESETS), help="a GPT-NeoX configuration of the paper")
    g.add_argument("--hidden", type=int, metavar="H", help="hidden size h (with --layers --heads, no --model)")
    g.add_argument("--layers", type=int, metavar="L",
                   help="transformer layers L; with --model, replay only L of its layers (the per-layer "
                        "pattern plus the embedding and output layers), for models larger than the machine")
    g.add_argument("--heads", type=int, metavar="A", help="attention heads a")
    g.add_argument("--seq", type=int, metavar="S", help=f"sequence length s (default {DEFAULT_SEQ})")
    g.add_argument("--vocab", type=int, metavar="V", help=f"vocabulary V (default {DEFAULT_VOCAB})")
    g.add_argument("--scheme", choices=SCHEMES, default="ddp", help="how the model is trained (default ddp)")
    add_parallel_arguments(g)
    g = p.add_argument_group("run")
    g.add_argument("--np", type=int, metavar="N", help="start N local ranks under the installed MPI's mpiexec")
    g.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed iterations first (default 1)")
    g.add_argument("--iterations", type=int, default=3, metavar="N", help="timed iterations (default 3)")
    g.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _model(args) -> Model:
    dims = (args.hidden, args.layers, args.heads)
    if args.model:
        if args.hidden is not None or args.heads is not None:
            raise UsageError("give --model or --hidden --layers --heads, not both (--layers K with --model "
                             "replays K of its layers)")
        full = preset(args.model, args.seq, args.vocab)
        if args.layers is None:
            return full
        if not 1 <= args.layers <= full.layers:
            raise UsageError(f"--layers must be between 1 and {full.layers} for --model {args.model}")
        return dataclasses.replace(full, layers=args.layers)
    if all(v is not None for v in dims):
        return Model(args.hidden, args.layers, args.heads, args.seq or DEFAULT_SEQ, args.vocab or DEFAULT_VOCAB)
    raise UsageError("give --model NAME, or all of --hidden --layers --heads")


def _workload(args) -> Workload:
    if args.warmup < 0 or args.iterations < 1:
        raise UsageError("--warmup must be at least 0 and --iterations at least 1")
    w = Workload(_model(args), args.scheme, args.dp, args.tp, args.pp, args.micro_batch, args.microbatches,
                 args.dtype)
    w.validate()
    return w


def main(args) -> int:
    """Entry point on every rank (and in the ``--np`` parent)."""
    workload = _workload(args)  # bad input fails before any rank starts
    if args.np is not None and not launch.discover().under_launcher:
        if args.np < 1:
            raise UsageError(f"--np must be at least 1 (got {args.np})")
        Layout(workload.tp, workload.pp, workload.dp).check(args.np)
        return launch.self_launch(args._argv, args.np)
    world = init_world()
    require_mpi(world, "microbench replay")
    MPI = world.MPI
    layout = Layout(workload.tp, workload.pp, workload.dp)
    layout.check(world.nranks)
    schedule = calls(workload)
    executor = Executor(MPI, split(MPI, MPI.COMM_WORLD, layout, world.rank), schedule)
    try:
        for _ in range(args.warmup):
            MPI.COMM_WORLD.Barrier()
            executor.iteration()
        timed = []
        for _ in range(args.iterations):
            MPI.COMM_WORLD.Barrier()
            timed.append(executor.iteration())
    finally:
        executor.close()
    summary = _summary(MPI, timed, workload, schedule)
    if world.rank == 0:
        print(json.dumps(summary, indent=2) if args.json else _table(summary), flush=True)
    world.close()
    return 0


def _slowest(MPI, value: float) -> float:
    return MPI.COMM_WORLD.allreduce(value, op=MPI.MAX)


def _summary(MPI, timed, workload: Workload, schedule) -> dict:
    """Medians over the timed iterations of the slowest rank's seconds (collective on every rank)."""
    kinds = sorted({c.collective for c in schedule})
    groups = sorted({c.group for c in schedule})
    wall = [_slowest(MPI, t.wall_s) for t in timed]
    per_collective = {k: statistics.median(_slowest(MPI, t.per_collective_s.get(k, 0.0)) for t in timed)
                      for k in kinds}
    per_group = {g: statistics.median(_slowest(MPI, t.per_group_s.get(g, 0.0)) for t in timed) for g in groups}
    return {
        "model": workload.model.describe(), "scheme": workload.scheme, "layers_replayed": workload.model.layers,
        "model_layers": PRESETS[workload.model.name][0] if workload.model.name else workload.model.layers,
        "dp": workload.dp, "tp": workload.tp, "pp": workload.pp, "dtype": workload.dtype,
        "calls_per_iteration": len(schedule), "bytes_per_iteration": sum(c.bytes for c in schedule),
        "iterations": len(timed), "wall_s": statistics.median(wall), "wall_min_s": min(wall),
        "wall_max_s": max(wall), "per_collective_s": per_collective, "per_group_s": per_group,
        "rules": [OVERLAP_RULE, "wall: median over timed iterations of the slowest rank's iteration time; per "
                  "collective and group: median of the slowest rank's seconds inside those calls and their waits"],
    }


def _table(s: dict) -> str:
    part = (f" ({s['layers_replayed']} of its {s['model_layers']} layers replayed)"
            if s["layers_replayed"] != s["model_layers"] else "")
    lines = [f"replay: {s['model']}{part}, scheme {s['scheme']} (dp {s['dp']}, tp {s['tp']}, pp {s['pp']}, {s['dtype']})",
             f"  {s['calls_per_iteration']} calls, {s['bytes_per_iteration']} B per iteration per rank",
             f"  iteration wall {s['wall_s'] * 1e3:.3f} ms (median of {s['iterations']}; "
             f"min {s['wall_min_s'] * 1e3:.3f}, max {s['wall_max_s'] * 1e3:.3f})"]
    lines += [f"  {k:<16} {v * 1e3:10.3f} ms" for k, v in s["per_collective_s"].items()]
    lines += [f"  group {g:<10} {v * 1e3:10.3f} ms" for g, v in s["per_group_s"].items()]
    return "\n".join(lines)

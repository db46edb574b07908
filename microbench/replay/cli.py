"""Replay one training iteration's communication on real communicators, with its compute, and time it.

  microbench replay --np 4 --model 125M --scheme ddp --dp 4
  microbench replay --np 4 --hidden 512 --layers 2 --heads 8 --scheme tp --tp 2 --dp 2 --tflops 0.05 --json
  mpiexec -n 4 microbench replay --model 13B --layers 1 --seq 256 --scheme zero3 --dp 4 --iterations 5
  microbench replay --np 2 --trace rank0.log rank1.log --trace-format nccl

The calls are the workload model's (``microbench workload``) for the scheme, setup excluded, or a trace's;
issued back to back on the layout's communicators (Megatron rank order: TP, then PP, then DP) from one
buffer pool, with ``--tflops`` compute placed between them (``replay/schedule.py``). Order in the launch:
the first iteration (cold: its calls are the first of their sizes), the other warm-up iterations, the
per-call latencies of every distinct call (``replay/calibrate.py``), then the timed iterations and as many
compute-only ones. Each timed iteration starts after a barrier; per figure, the slowest rank's, and the
median over the timed iterations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

from microbench.cluster import launch
from microbench.cluster.world import init_world, require_mpi
from microbench.errors import RunError, UsageError
from microbench.replay import calibrate, predict
from microbench.replay.compare import THRESHOLD, comparison
from microbench.replay.execute import Executor, IterationTimes
from microbench.replay.layout import Layout
from microbench.replay.schedule import COMPUTE_RULE, OVERLAP_RULE, Call, calls, from_messages, largest_bytes, steps
from microbench.workload.cli import _positive_float, add_parallel_arguments, add_trace_arguments
from microbench.workload.distribution import SCHEMES, Workload
from microbench.workload.model import DEFAULT_SEQ, DEFAULT_VOCAB, PRESETS, Model, preset

MEASURE_RULES = [
    "wall: per timed iteration the slowest rank's wall time, median over timed iterations",
    "per collective, group and call: the slowest rank's seconds inside those calls (an overlapped call: its post "
    "and its share of the wait that completes it), median over timed iterations",
    "exposed communication: median wall of the timed iterations minus median wall of the compute-only "
    "iterations (the same compute slices, no calls), slowest rank",
]


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
    add_trace_arguments(p.add_argument_group("trace (instead of a model: its calls on all ranks)"))
    g = p.add_argument_group("compute")
    g.add_argument("--tflops", type=_positive_float, metavar="X",
                   help="achieved TFLOP/s per device: run 6*params*tokens/(t*p) FLOP of compute per iteration "
                        "at that rate between the calls (the calibrated host kernel), and as many compute-only "
                        "iterations, for the exposed communication (needs a model)")
    g = p.add_argument_group("prediction")
    g.add_argument("--results", nargs="+", metavar="RUN.jsonl",
                   help="price the prediction on these records' curves (microbench run --out) instead of the "
                        "same launch's per-call latencies")
    g.add_argument("--stat", choices=("p50", "avg"), default="p50",
                   help="with --results, the latency statistic (default p50)")
    g.add_argument("--threshold", type=_positive_float, default=THRESHOLD, metavar="F",
                   help=f"attribute the gap of rows whose replayed/predicted is off 1 by more than F "
                        f"(default {THRESHOLD})")
    g = p.add_argument_group("backend (as microbench run)")
    g.add_argument("--backend", choices=("mpi", "torch"),
                   help="mpi: mpi4py communicators split from the world (default under mpiexec/srun); torch: "
                        "torch.distributed process groups (default under torchrun)")
    g.add_argument("--torch-backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend; auto: nccl with --device cuda, else gloo")
    g.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the buffer pool lives (cuda: --backend torch, one GPU per local rank)")
    g = p.add_argument_group("run")
    g.add_argument("--np", type=int, metavar="N", help="start N local ranks under the installed MPI's mpiexec")
    g.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed iterations first, the first reported on its own as the cold iteration (default 1)")
    g.add_argument("--iterations", type=int, default=3, metavar="N", help="timed iterations (default 3)")
    g.add_argument("--json", action="store_true", help="print JSON instead of a table")
    g.add_argument("--out", metavar="FILE.jsonl",
                   help="append a 'replay' record (the summary, prediction and comparison, with where and under "
                        "which conditions it ran) to this JSON Lines file, for check and the report")


def _model(args) -> Model | None:
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
    if args.trace and not any(v is not None for v in dims):
        return None
    raise UsageError("give --model NAME, or all of --hidden --layers --heads, or --trace FILE")


def _workload(args) -> Workload | None:
    if args.warmup < 1 or args.iterations < 1:
        raise UsageError("--warmup and --iterations must be at least 1 (the first iteration is the cold one)")
    model = _model(args)
    if model is None:
        if args.tflops:
            raise UsageError("--tflops needs a model (--model or --hidden --layers --heads) for the compute time")
        return None
    if args.trace:
        raise UsageError("give a model or --trace, not both")
    w = Workload(model, args.scheme, args.dp, args.tp, args.pp, args.micro_batch, args.microbatches, args.dtype)
    w.validate()
    return w


def _check_backend(args, launcher: str | None) -> str:
    """The backend to use (mpi or torch), refusing combinations that cannot run."""
    backend = args.backend or ("torch" if launcher == "torchrun" else "mpi")
    if backend == "mpi":
        if args.device == "cuda":
            raise UsageError("--device cuda replays with --backend torch (device tensors); the MPI replay uses host "
                             "buffers")
        if args.torch_backend != "auto":
            raise UsageError("--torch-backend applies to --backend torch")
        if launcher == "torchrun":
            raise UsageError("torchrun starts torch.distributed ranks: use --backend torch there")
    elif args.torch_backend == "nccl" and args.device != "cuda":
        raise UsageError("the nccl backend moves CUDA tensors: add --device cuda, or use --torch-backend gloo")
    return backend


def _issuer(args, backend: str, world, layout: Layout, schedule: list[Call]):
    """This rank's issuer (collective: every rank builds its groups; an error on any rank ends every rank)."""
    from microbench.cluster.agree import raise_if_any

    issuer, error = None, None
    try:
        if backend == "mpi":
            from microbench.replay.issue_mpi import MpiIssuer

            issuer = MpiIssuer(world.MPI, world.MPI.COMM_WORLD, layout, world.rank, largest_bytes(schedule))
        else:
            from microbench.replay.issue_torch import TorchIssuer

            issuer = TorchIssuer(world, layout, world.rank, largest_bytes(schedule), args.torch_backend, args.device)
    except (UsageError, RunError) as exc:
        error = exc
    raise_if_any(world.reducer, error)
    return issuer


def _schedule(args, workload: Workload | None, world: int) -> tuple[list[Call], list[str], Layout]:
    if workload is not None:
        layout = Layout(workload.tp, workload.pp, workload.dp)
        layout.check(world)
        return calls(workload), [], layout
    from microbench.workload.traces import read_traces

    trace = read_traces(args.trace, args.trace_format, args.trace_group_size, args.trace_partial)
    schedule, notes = from_messages(trace.messages(args.trace_iterations), world)
    if not schedule:
        raise UsageError(f"no collective calls to replay in {', '.join(args.trace)}")
    return schedule, [*notes, *trace.notes], Layout(dp=world)


def _curves(args, layout: Layout):
    """The pricer on ``--results`` curves and its notes (None when the same launch prices the calls)."""
    if not args.results:
        return None
    from microbench.records import read_results
    from microbench.workload.weighting import curves_from_results

    results = read_results(args.results)
    if not results:
        raise UsageError(f"no result records in {', '.join(args.results)}")
    curves, notes = curves_from_results(results, args.stat)
    pricer, pricing_notes = predict.from_curves(curves, layout)
    return pricer, notes, pricing_notes


def main(args) -> int:
    """Entry point on every rank (and in the ``--np`` parent)."""
    workload = _workload(args)  # bad input fails before any rank starts
    if args.np is not None and not launch.discover().under_launcher:
        if args.np < 1:
            raise UsageError(f"--np must be at least 1 (got {args.np})")
        _curves(args, _schedule(args, workload, args.np)[2])
        _check_out(args.out)
        if _check_backend(args, None) == "torch":  # the same node as the ranks: refuse what they would refuse
            from microbench.cluster import torch_runtime

            torch_runtime.resolve_backend(args.torch_backend, args.device)
            if args.device == "cuda" and not torch_runtime.import_torch()[0].cuda.is_available():
                raise UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        return launch.self_launch(args._argv, args.np)
    backend = _check_backend(args, launch.discover().launcher)
    world = init_world()
    if backend == "mpi":
        require_mpi(world, "microbench replay")
    MPI = world.MPI
    schedule, notes, layout = _schedule(args, workload, world.nranks)
    curves = _curves(args, layout)
    records, run_id, hosts = _open_records(args, world)
    issuer = _issuer(args, backend, world, layout, schedule)
    compute_s = 0.0
    kernel = None
    if args.tflops:
        from microbench.replay.compute import SliceKernel, iteration_compute_s

        compute_s = iteration_compute_s(workload, args.tflops)
    plan = steps(schedule, compute_s)
    if compute_s:
        kernel = SliceKernel(plan)
    executor = Executor(issuer, plan, kernel)
    try:
        issuer.barrier()
        first = executor.iteration()
        for _ in range(args.warmup - 1):
            issuer.barrier()
            executor.iteration()
        latencies = calibrate.measure(issuer, layout, world.rank, schedule)
        timed, compute_only = [], []
        for _ in range(args.iterations):
            issuer.barrier()
            timed.append(executor.iteration())
        for _ in range(args.iterations if compute_s else 0):
            issuer.barrier()
            compute_only.append(executor.iteration(compute_only=True))
        summary = _summary(issuer, workload, schedule, first, timed, compute_only, latencies)
        pricer = curves[0] if curves else predict.from_latencies(latencies)
        predicted = _predicted(issuer, predict.predict(plan, pricer))
    finally:
        issuer.close()
    summary["notes"] = notes
    summary["compute"] = ({"tflops_per_device": args.tflops, "seconds_per_iteration": compute_s,
                           "rule": COMPUTE_RULE, **kernel.describe()} if kernel else None)
    summary["backend"] = issuer.backend
    context = {"overlapped_groups": sorted({c.group for c in schedule if c.overlapped}),
               "group_counts": {k: len(layout.groups(k)) for k in ("tp", "pp", "dp")},
               "groups": sorted({c.group for c in schedule}), "compute": bool(compute_s),
               "ranks_per_host": max(hosts.ranks_per_host.values()),
               "cores": os.cpu_count() or 1}  # the host's, not this rank's binding
    summary["prediction"] = {
        "source": (f"--results {' '.join(args.results)} ({args.stat})" if curves
                   else "the same launch's isolated per-call latencies"),
        "rule": predict.PREDICTION_RULE, **predicted,
        "notes": [*(curves[1] if curves else []), *sorted(curves[2] if curves else [])]}
    summary["comparison"] = comparison(predicted, summary, context, args.threshold)
    summary["comparison_threshold"] = args.threshold
    if records is not None:
        from microbench.records.build import replay_record
        from microbench.records.writer import json_line

        records.write(json_line(replay_record(run_id=run_id, argv=args._argv, backend=issuer.backend, layout=hosts,
                                              mpi=_mpi_record(MPI), summary=summary)))
        records.close()
    if world.rank == 0:
        print(json.dumps(summary, indent=2) if args.json else _table(summary), flush=True)
    world.close()
    return 0


def _check_out(path: str | None) -> None:
    """Refuse an --out whose folder is missing or not writable before any rank starts."""
    from pathlib import Path

    if path is None:
        return
    folder = Path(path).parent
    if not folder.is_dir() or not os.access(folder, os.W_OK) or Path(path).is_dir():
        raise UsageError(f"cannot write --out {path}: its folder is missing or not writable, or it is a folder")


def _open_records(args, world):
    """Collective: rank 0 opens ``--out`` (an error there ends every rank with its message), a run id is shared,
    and every rank's host gathered. Returns (the file or None, run id, ``cluster.world.Layout``)."""
    import uuid

    from microbench.cluster import facts
    from microbench.cluster.agree import raise_if_any
    from microbench.cluster.world import gather_layout

    records, error = None, None
    if world.rank == 0 and args.out:
        from microbench.records.writer import AppendFile

        try:
            records = AppendFile(args.out)
        except OSError as exc:
            error = UsageError(f"cannot write --out {args.out}: {exc.strerror or exc}")
    raise_if_any(world.reducer, error)
    run_id = world.reducer.bcast(uuid.uuid4().hex[:12] if world.rank == 0 else None, root=0)
    return records, run_id, gather_layout(world.reducer, facts.versions(), "")


def _mpi_record(MPI) -> dict | None:
    from microbench.cluster.mpi_runtime import library

    return library(MPI).as_record() if MPI is not None else None


def _predicted(issuer, p: predict.Prediction) -> dict:
    """The slowest rank's predicted figures (collective on every rank; every rank has the same calls)."""
    return {"iteration_s": issuer.world_max(p.iteration_s), "communication_s": issuer.world_max(p.communication_s),
            "compute_s": p.compute_s, "exposed_s": issuer.world_max(p.exposed_s),
            "per_collective_s": {k: issuer.world_max(v) for k, v in sorted(p.per_collective_s.items())},
            "per_group_s": {k: issuer.world_max(v) for k, v in sorted(p.per_group_s.items())},
            "outside_s": {k: issuer.world_max(v) for k, v in sorted(p.outside_s.items())},
            "priced": dict(sorted(p.priced.items()))}


def _median_slowest(issuer, values: list[float]) -> float:
    return statistics.median(issuer.world_max(v) for v in values)


def _summary(issuer, workload, schedule, first: IterationTimes, timed: list[IterationTimes],
             compute_only: list[IterationTimes], latencies: dict) -> dict:
    """The slowest rank's figures, medians over the timed iterations (collective on every rank)."""
    kinds = sorted({c.collective for c in schedule})
    groups = sorted({c.group for c in schedule})
    keys = sorted({(c.collective, c.group, c.bytes) for c in schedule})
    wall = [issuer.world_max(t.wall_s) for t in timed]
    compute_wall = _median_slowest(issuer, [t.wall_s for t in compute_only]) if compute_only else 0.0
    median_wall = statistics.median(wall)
    counts = {k: sum(1 for c in schedule if (c.collective, c.group, c.bytes) == k) for k in keys}
    overlapped = {(c.collective, c.group, c.bytes) for c in schedule if c.overlapped}
    per_call = []
    for key in keys:
        inside = _median_slowest(issuer, [t.per_call_s.get(key, 0.0) for t in timed])
        lat = latencies.get(key)
        per_call.append({"collective": key[0], "group": key[1], "bytes": key[2], "calls": counts[key],
                         "overlapped": key in overlapped,
                         "replayed_s": inside,
                         "isolated_s_per_call": issuer.world_max(lat.isolated_s) if lat else None,
                         "concurrent_s_per_call": issuer.world_max(lat.concurrent_s) if lat else None,
                         "nonblocking_s_per_call": (issuer.world_max(lat.nonblocking_s)
                                                    if lat and lat.nonblocking_s is not None else None)})
    out = {
        "workload": None, "iterations": len(timed),
        "calls_per_iteration": len(schedule), "bytes_per_iteration": sum(c.bytes for c in schedule),
        "first_iteration_s": issuer.world_max(first.wall_s),
        "wall_s": median_wall, "wall_min_s": min(wall), "wall_max_s": max(wall),
        "compute_only_s": compute_wall if compute_only else None,
        "exposed_communication_s": median_wall - compute_wall,
        "exposed_share": (median_wall - compute_wall) / median_wall if median_wall > 0 else 0.0,
        "per_collective_s": {k: _median_slowest(issuer, [t.per_collective_s.get(k, 0.0) for t in timed])
                             for k in kinds},
        "per_group_s": {g: _median_slowest(issuer, [t.per_group_s.get(g, 0.0) for t in timed]) for g in groups},
        "per_call": per_call,
        "rules": [OVERLAP_RULE, *MEASURE_RULES, calibrate.__doc__.split("\n\n")[1].replace("\n", " ")],
    }
    if workload is not None:
        out["workload"] = {
            "model": workload.model.describe(), "scheme": workload.scheme, "layers_replayed": workload.model.layers,
            "model_layers": PRESETS[workload.model.name][0] if workload.model.name else workload.model.layers,
            "dp": workload.dp, "tp": workload.tp, "pp": workload.pp, "dtype": workload.dtype,
            "micro_batch": workload.micro_batch, "microbatches": workload.microbatches}
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _table(s: dict) -> str:
    w = s["workload"]
    if w:
        part = (f" ({w['layers_replayed']} of its {w['model_layers']} layers replayed)"
                if w["layers_replayed"] != w["model_layers"] else "")
        head = (f"replay: {w['model']}{part}, scheme {w['scheme']} (dp {w['dp']}, tp {w['tp']}, pp {w['pp']}, "
                f"{w['dtype']}), backend {s['backend']}")
    else:
        head = f"replay: trace, backend {s['backend']}"
    lines = [head, f"  {s['calls_per_iteration']} calls, {s['bytes_per_iteration']} B per iteration per rank",
             f"  iteration wall {_ms(s['wall_s'])} ms (median of {s['iterations']}; min {_ms(s['wall_min_s'])}, "
             f"max {_ms(s['wall_max_s'])}); first (cold) iteration {_ms(s['first_iteration_s'])} ms"]
    if s["compute"]:
        lines.append(f"  compute-only iteration {_ms(s['compute_only_s'])} ms "
                     f"({s['compute']['tflops_per_device']} TFLOP/s); exposed communication "
                     f"{_ms(s['exposed_communication_s'])} ms ({s['exposed_share']:.1%} of the iteration)")
    lines += [f"  {k:<16} {_ms(v):>10} ms" for k, v in s["per_collective_s"].items()]
    lines += [f"  group {g:<10} {_ms(v):>10} ms" for g, v in s["per_group_s"].items()]
    lines += [f"  note: {n}" for n in s["notes"]]
    pred = s["prediction"]
    lines += [f"# predicted from {pred['source']}; ratio = replayed / predicted",
              f"  {'':<18} {'predicted ms':>13} {'replayed ms':>12} {'ratio':>7}  attributed to"]
    for row in s["comparison"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(f"  {row['what']:<18} {_ms(row['predicted_s']):>13} {_ms(row['replayed_s']):>12} {ratio:>7}  "
                     + "; ".join(row["explained_by"]))
    lines += [f"  note: {n}" for n in pred["notes"]]
    return "\n".join(lines)

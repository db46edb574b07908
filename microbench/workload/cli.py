"""Message-size distributions of LLM training (Anthony et al. 2024, Eq. 1-5, and how frameworks cut them
into calls), or of a real trace, and what they cost on measured curves.

  microbench workload --model 1.3B --scheme zero3 --dp 8
  microbench workload --model 13B --scheme 3d --tp 8 --pp 4 --dp 2 --microbatches 8 --json
  microbench workload --model 1.3B --scheme tp --tp 8 --seq 512,1024,2048,4096
  microbench workload --trace nccl.log --trace-iterations 10 --results run.jsonl
  microbench workload --trace rank*.pt.trace.json.gz --trace-iterations 5
  microbench workload --model 13B --scheme zero3 --dp 8 --results run.jsonl --tflops 150 --figure w.png
  (with iallreduce/iallgather/... records in run.jsonl: exposed communication from their measured overlap)
"""

from __future__ import annotations

import argparse
import dataclasses
from fractions import Fraction

from microbench.benchmarks.workload_sizes import MAPPING_RULE
from microbench.errors import UsageError, printable
from microbench.records.jsonout import dump_strict
from microbench.workload import tables
from microbench.workload.compute import RULE as COMPUTE_RULE
from microbench.workload.compute import compute_vs_communication, per_device_communication_us
from microbench.workload.distribution import (
    MEGATRON_CORE_SCHEMES,
    SCHEMES,
    TRAINING_DTYPES,
    Workload,
    parallel_dimension,
)
from microbench.workload.messages import WIRE_RULES, total_wire
from microbench.workload import parallel_arguments
from microbench.workload.model import DEFAULT_SEQ, DEFAULT_VOCAB, MODEL_NAMES, Model, preset
from microbench.workload.overlap_pricing import METHOD as OVERLAP_METHOD
from microbench.workload.overlap_pricing import apply_overlap, overlap_curves
from microbench.workload.schemes import build
from microbench.workload.traces import FORMATS, read_traces


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, not {text!r}")
    return values


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
    return value


def add_parallel_arguments(g) -> None:
    """The layout and precision of training (-dp, -tp, -pp, micro-batches, dtype): workload's and replay's."""
    g.add_argument("--dp", type=int, default=1, metavar="D", help="data-parallel size d (default 1)")
    g.add_argument("--tp", type=int, default=1, metavar="T", help="tensor-parallel size t (default 1)")
    g.add_argument("--pp", type=int, default=1, metavar="P", help="pipeline size p (default 1)")
    g.add_argument("--micro-batch", type=int, default=4, metavar="B", help="micro-batch b (default 4)")
    g.add_argument("--microbatches", type=int, default=1, metavar="M",
                   help="pipeline microbatches per iteration (default 1)")
    g.add_argument("--dtype", choices=TRAINING_DTYPES, default="bf16", help="training precision (default bf16)")


def add_trace_arguments(g) -> None:
    """Reading messages from logs and traces (--trace and its options): workload's and replay's."""
    g.add_argument("--trace", nargs="+", metavar="FILE",
                   help="read the messages from logs or traces (plain or gzip; several: one per rank, or a job's "
                        "logs, ranks of the same name being the same rank)")
    g.add_argument("--trace-format", choices=FORMATS, help="the traces' format (detected when not given)")
    g.add_argument("--trace-iterations", type=int, default=1, metavar="N",
                   help="training iterations the trace covers: counts are divided by it (default 1)")
    g.add_argument("--trace-group-size", type=int, metavar="N",
                   help="group size of calls whose trace records none (DeepSpeed logs, NCCL profiler events, "
                        "PyTorch 2.0-era annotations, symmetric-memory ops)")
    g.add_argument("--trace-partial", action="store_true",
                   help="read a truncated trace as far as it goes (said in the notes) instead of refusing it")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (Eq. 1)")
    g.add_argument("--model", choices=list(MODEL_NAMES),
                   help="a GPT-NeoX configuration of the paper, or a published shape (llama3-8b, llama3-70b, "
                        "mixtral-8x7b, deepseek-v3; docs/workload.md cites each)")
    g.add_argument("--hidden", type=int, metavar="H", help="hidden size h (with --layers --heads, no --model)")
    g.add_argument("--layers", type=int, metavar="L", help="transformer layers L")
    g.add_argument("--heads", type=int, metavar="A", help="attention heads a")
    g.add_argument("--seq", type=_positive_ints, metavar="S[,S...]",
                   help="sequence length s (default 2048); several values sweep it")
    g.add_argument("--vocab", type=int, metavar="V", help="vocabulary V (default 50304)")
    parallel_arguments.add_shape_arguments(p.add_argument_group("a custom Llama-style or mixture-of-experts model"))
    g = p.add_argument_group("training")
    g.add_argument("--scheme", choices=SCHEMES, help="how the model is trained (default ddp)")
    add_parallel_arguments(g)
    g.add_argument("--node-size", type=int, default=8, metavar="K",
                   help="ranks per node, for ZeRO++'s hpZ and qgZ groups (default 8)")
    parallel_arguments.add_parallel_arguments(p.add_argument_group("expert and context parallelism (moe, cp)"))
    add_trace_arguments(p.add_argument_group("trace (instead of a scheme)"))
    g = p.add_argument_group("cost on measured curves")
    g.add_argument("--results", nargs="+", metavar="RUN.jsonl", help="records of microbench run --out")
    g.add_argument("--stat", choices=("p50", "avg"), default="p50", help="latency statistic (default p50)")
    g.add_argument("--figure", metavar="FILE.png", help="latency and bandwidth curves with the weights overlaid")
    g.add_argument("--tflops", type=_positive_float, metavar="X",
                   help="achieved TFLOP/s per device: compute time beside communication")
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print JSON instead of tables")


#: the largest value of each shape option: far beyond any trained model (about 100 layers, hidden 25,600, a million
#: GPUs), small enough that the message lists (about 8 KB a layer) and the arithmetic stay bounded
SHAPE_BOUNDS = {"hidden": 1 << 20, "layers": 10_000, "heads": 1 << 16, "vocab": 1 << 24, "dp": 1 << 20,
                "tp": 1 << 20, "pp": 1 << 20, "micro_batch": 1 << 20, "microbatches": 1 << 20, "node_size": 1 << 20}
MAX_SEQ = 1 << 24


def _check_shape(args) -> None:
    """Every shape option within ``SHAPE_BOUNDS``, before anything is built (--layers 99999999999 grew to GBs)."""
    for name, bound in SHAPE_BOUNDS.items():
        value = getattr(args, name, None)
        if value is not None and value > bound:
            raise UsageError(f"--{name.replace('_', '-')} {value} is beyond {bound}, the most workload models")
    if args.seq and max(args.seq) > MAX_SEQ:
        raise UsageError(f"--seq {max(args.seq)} is beyond {MAX_SEQ}, the most workload models")
    parallel_arguments.check_bounds(args)


def _model(args) -> Model | None:
    dims = {k: getattr(args, k) for k in ("hidden", "layers", "heads")}
    seq = args.seq[0] if args.seq else None
    shape = parallel_arguments.shape_fields(args)
    if args.model:
        if any(v is not None for v in dims.values()) or shape:
            raise UsageError("give --model or --hidden --layers --heads (and the shape options), not both")
        return preset(args.model, seq, args.vocab)
    if all(v is not None for v in dims.values()):
        return Model(dims["hidden"], dims["layers"], dims["heads"], DEFAULT_SEQ if seq is None else seq,
                     DEFAULT_VOCAB if args.vocab is None else args.vocab, **shape)
    if any(v is not None for v in dims.values()) or args.seq or args.vocab is not None:
        raise UsageError("a custom model needs all of --hidden --layers --heads")
    return None


def _check_combinations(args, model: Model | None) -> None:
    if args.trace is None and model is None:
        raise UsageError("give --model NAME, or --hidden --layers --heads, or --trace FILE")
    if args.trace and args.scheme:
        raise UsageError("--scheme builds a modelled distribution; with --trace the messages come from the trace")
    if args.trace is None and (args.trace_format or args.trace_group_size or args.trace_iterations != 1
                               or args.trace_partial):
        raise UsageError("--trace-format, --trace-iterations, --trace-group-size and --trace-partial need "
                         "--trace FILE")
    if args.trace_iterations < 1 or (args.trace_group_size is not None and args.trace_group_size < 1):
        raise UsageError("--trace-iterations and --trace-group-size must be at least 1")
    sweep = args.seq and len(args.seq) > 1
    if sweep and (args.trace or args.results or args.tflops or args.figure):
        raise UsageError("a --seq sweep lists volumes only: give one --seq with --trace, --results, --tflops or --figure")
    if (args.figure or args.tflops) and not args.results:
        raise UsageError("--figure and --tflops need --results (measured curves) to predict communication time")
    if args.tflops and model is None:
        raise UsageError("--tflops needs a model (--model or --hidden --layers --heads) for the compute time")


def _workload(args, model: Model) -> Workload:
    return Workload(model, args.scheme or "ddp", args.dp, args.tp, args.pp, args.micro_batch, args.microbatches,
                    args.dtype, args.node_size, **parallel_arguments.workload_fields(args))


def _distribution_json(dist) -> dict:
    w, check = dist.workload, dist.check()
    return {
        "model": {"name": w.model.name, "hidden": w.model.hidden, "layers": w.model.layers,
                  "heads": w.model.heads, "seq": w.model.seq, "vocab": w.model.vocab,
                  **({"family": w.model.family, "kv_heads": w.model.kv_heads or w.model.heads,
                      "ffn": w.model.ffn_hidden, "experts": w.model.experts, "top_k": w.model.top_k,
                      "expert_ffn": w.model.expert_ffn_hidden if w.model.experts else None,
                      "shared_experts": w.model.shared_experts, "dense_layers": w.model.dense_layers,
                      "source": w.model.source} if w.model.family != "gpt-neox" else {})},
        "scheme": w.scheme, "parallel": {"dp": w.dp, "tp": w.tp, "pp": w.pp,
                                         **({"cp": w.cp, "ep": w.ep, "etp": w.expert_tp, "expert_dp": w.expert_dp,
                                             "cp_comm": w.cp_comm, "routing": w.routing.text,
                                             "capacity_factor": w.capacity_factor}
                                            if w.scheme in MEGATRON_CORE_SCHEMES else {})},
        "micro_batch": w.micro_batch, "microbatches": w.microbatches, "dtype": w.dtype,
        "params": w.params,
        "volume": {"elements": tables.number(dist.volume_elements), "bytes": tables.number(dist.volume_bytes),
                   "equation": dist.equation},
        "messages": [m.as_json() for m in dist.messages],
        "check": {"message_bytes": tables.number(check["message_bytes"]),
                  "equation_bytes": tables.number(check["equation_bytes"]),
                  "departures": [{"reason": d["reason"], "bytes": tables.number(d["bytes"])}
                                 for d in check["departures"]],
                  "excluded_phases": {k: tables.number(v) for k, v in check["excluded_phases"].items()},
                  "residual_bytes": tables.number(check["residual_bytes"])},
        "assumptions": dist.assumptions,
    }


def _sweep(args, model: Model) -> int:
    points = []
    for s in args.seq:
        dist = build(_workload(args, dataclasses.replace(model, seq=s)))
        by_collective: dict[str, Fraction] = {}
        by_dimension: dict[str, Fraction] = {}
        for m in dist.messages:
            if m.phase != "setup":
                wire = total_wire([m])
                by_collective[m.collective] = by_collective.get(m.collective, 0) + wire
                dim = parallel_dimension(m, dist.workload.scheme)
                by_dimension[dim] = by_dimension.get(dim, 0) + wire
        points.append({**_distribution_json(dist), "seq": s,
                       "by_collective": {k: tables.number(v) for k, v in by_collective.items()},
                       "by_dimension": {k: tables.number(v) for k, v in by_dimension.items()}})
    if args.json:
        dump_strict({"sweep": points})
    else:
        w = _workload(args, model)
        head = [f"# workload: {model.name or 'custom model'} (L={model.layers}, h={model.hidden}, a={model.heads}, "
                f"V={model.vocab}), scheme {w.scheme}: d={w.dp} t={w.tp} p={w.pp}, micro-batch {w.micro_batch}, "
                f"{w.microbatches} microbatch(es), {w.dtype}"]
        print("\n".join(head + tables.sweep_lines(points) + tables.assumption_lines(points[-1]["assumptions"])))
    return 0


def _from_trace(args, model: Model | None):
    """The trace's messages, its JSON and table, and its assumptions."""
    trace = read_traces(args.trace, args.trace_format, args.trace_group_size, args.trace_partial)
    messages = trace.messages(args.trace_iterations)
    assumptions = [f"count is calls per rank (the mean over the {len(trace.ranks)} rank(s) in the trace) "
                   f"divided by --trace-iterations ({args.trace_iterations})", WIRE_RULES, *trace.notes]
    out = {"trace": trace.summary(), "messages": [m.as_json() for m in messages]}
    workload = _workload(args, model) if model else None
    return messages, workload, assumptions, out, tables.trace_lines(trace, messages, args.trace_iterations)


def _from_model(args, model: Model):
    """The modelled distribution's messages, its JSON and table, and its assumptions."""
    dist = build(_workload(args, model))
    return dist.messages, dist.workload, dist.assumptions, _distribution_json(dist), tables.distribution_lines(dist)


def _cost(args, messages, workload: Workload | None, assumptions: list[str], out: dict, lines: list[str]) -> None:
    """Weighting on the measured curves, compute against communication, and the figure, into out and lines."""
    from microbench.records import read_results
    from microbench.workload.weighting import curves_from_results, weigh

    results = read_results(args.results)
    if not results:
        raise UsageError(f"no result records in {', '.join(args.results)}")
    curves, notes = curves_from_results(results, args.stat)
    weighting = weigh(messages, curves, args.stat)
    weighting["notes"] = notes + weighting["notes"]
    overlaps = overlap_curves(results, args.stat)
    if overlaps:
        apply_overlap(weighting, overlaps)
        assumptions.append(OVERLAP_METHOD)
    out["weighting"] = weighting
    assumptions += [MAPPING_RULE, weighting["method"]]
    lines += tables.weighting_lines(weighting, ", ".join(args.results))
    if args.tflops:
        out["compute"] = _compute(args, weighting, workload)
        assumptions.append(COMPUTE_RULE)
        lines += tables.compute_lines(out["compute"])
    if args.figure:
        from microbench.workload.figure import plot_weighting

        title = ", ".join(args.trace) if args.trace else f"{workload.model.describe()}, {workload.scheme}"
        plot_weighting(args.figure, weighting, curves, title, out.get("compute"))
        lines.append(f"# figure written to {args.figure}")


def _compute(args, weighting: dict, workload: Workload) -> dict:
    """Compute beside one device's communication: the two bounds, and the measured overlap where recorded."""
    def per_device(field: str) -> float:
        if args.trace:  # a trace's counts are per process already
            return sum(r[field] for r in weighting["messages"] if r["phase"] != "setup")
        return per_device_communication_us(weighting, workload, field)

    exposed = per_device("exposed_us") if "exposed_per_iteration_us" in weighting else None
    return compute_vs_communication(workload, per_device("time_us"), args.tflops, exposed)


def main(args) -> int:
    _check_shape(args)
    model = _model(args)
    _check_combinations(args, model)
    if args.figure:  # before any work: a name matplotlib would change, or a link planted on it
        from microbench.workload.figure import check_figure_path

        check_figure_path(args.figure)
    if args.seq and len(args.seq) > 1:
        return _sweep(args, model)
    messages, workload, assumptions, out, lines = _from_trace(args, model) if args.trace else _from_model(args, model)
    if args.results:
        _cost(args, messages, workload, assumptions, out, lines)
    out["assumptions"] = assumptions
    if args.json:
        dump_strict(out)
    else:
        print("\n".join(printable(line) for line in lines + tables.assumption_lines(assumptions)))  # a line each
    return 0

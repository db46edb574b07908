"""What the replay's arguments ask for: the workload, the calls and layout, the backend, the pricing curves.

Each refuses, in one line (``UsageError``), what cannot run; the ``--np`` parent calls them before any rank
exists, and every rank calls them again.
"""

from __future__ import annotations

import dataclasses

from microbench.errors import UsageError
from microbench.replay import predict
from microbench.replay.layout import Layout
from microbench.replay.schedule import Call, calls, from_messages, layout_of
from microbench.workload import parallel_arguments
from microbench.workload.distribution import Workload
from microbench.workload.model import DEFAULT_SEQ, DEFAULT_VOCAB, Model, preset


def model(args) -> Model | None:
    """The model the arguments name (None: a trace is replayed instead)."""
    dims = (args.hidden, args.layers, args.heads)
    parallel_arguments.check_bounds(args)
    shape = parallel_arguments.shape_fields(args)
    if args.model:
        if args.hidden is not None or args.heads is not None or shape:
            raise UsageError("give --model or --hidden --layers --heads, not both (--layers K with --model "
                             "replays K of its layers)")
        full = preset(args.model, args.seq, args.vocab)
        if args.layers is None:
            return full
        if not 1 <= args.layers <= full.layers:
            raise UsageError(f"--layers must be between 1 and {full.layers} for --model {args.model}")
        return dataclasses.replace(full, layers=args.layers, dense_layers=min(full.dense_layers, args.layers))
    if all(v is not None for v in dims):
        return Model(args.hidden, args.layers, args.heads, args.seq or DEFAULT_SEQ, args.vocab or DEFAULT_VOCAB,
                     **shape)
    if args.trace and not any(v is not None for v in dims):
        return None
    raise UsageError("give --model NAME, or all of --hidden --layers --heads, or --trace FILE")


def workload(args) -> Workload | None:
    """The workload model's training setup (None: a trace is replayed), checked."""
    if args.warmup < 1 or args.iterations < 1:
        raise UsageError("--warmup and --iterations must be at least 1 (the first iteration is the cold one)")
    chosen = model(args)
    if chosen is None:
        if args.tflops:
            raise UsageError("--tflops needs a model (--model or --hidden --layers --heads) for the compute time")
        return None
    if args.trace:
        raise UsageError("give a model or --trace, not both")
    w = Workload(chosen, args.scheme, args.dp, args.tp, args.pp, args.micro_batch, args.microbatches, args.dtype,
                 **parallel_arguments.workload_fields(args))
    w.validate()
    return w


def backend(args, launcher: str | None) -> str:
    """The backend to use (mpi or torch), refusing combinations that cannot run."""
    chosen = args.backend or ("torch" if launcher == "torchrun" else "mpi")
    if chosen == "mpi":
        if args.device == "cuda":
            raise UsageError("--device cuda replays with --backend torch (device tensors); the MPI replay uses host "
                             "buffers")
        if args.torch_backend != "auto":
            raise UsageError("--torch-backend applies to --backend torch")
        if launcher == "torchrun":
            raise UsageError("torchrun starts torch.distributed ranks: use --backend torch there")
    elif args.torch_backend == "nccl" and args.device != "cuda":
        raise UsageError("the nccl backend moves CUDA tensors: add --device cuda, or use --torch-backend gloo")
    return chosen


def schedule(args, chosen: Workload | None, ranks: int) -> tuple[list[Call], list[str], Layout]:
    """One rank's calls per iteration, the notes on them, and the layout of ``ranks`` ranks they run on."""
    if chosen is not None:
        layout = layout_of(chosen)
        layout.check(ranks)
        return calls(chosen), [], layout
    from microbench.workload.traces import read_traces

    trace = read_traces(args.trace, args.trace_format, args.trace_group_size, args.trace_partial)
    replayed, notes = from_messages(trace.messages(args.trace_iterations), ranks)
    if not replayed:
        raise UsageError(f"no collective calls to replay in {', '.join(args.trace)}")
    return replayed, [*notes, *trace.notes], Layout(dp=ranks)


#: the share of this host's available memory the ranks' pools may take (the rest: MPI, torch, the OS)
MEMORY_HEADROOM = 0.8


def check_memory(schedule: list[Call], local_ranks: int) -> None:
    """Refuse a replay whose buffer pools cannot fit in this host's available memory, before any rank starts:
    each rank's pool holds at most its largest call's send data and the data a group of every rank receives."""
    from microbench.cluster.facts import mem_available_bytes
    from microbench.units import format_bytes

    largest = max((c.bytes for c in schedule), default=0)
    need = largest * (1 + local_ranks) * local_ranks
    available = mem_available_bytes()
    if available is not None and need > available * MEMORY_HEADROOM:
        raise UsageError(f"the replay's largest call ({format_bytes(largest)}) needs up to {format_bytes(need)} of "
                       f"buffer memory on this host ({local_ranks} ranks) but {format_bytes(available)} is available; "
                       "replay fewer layers (--layers) or a smaller trace")


def curves(args, layout: Layout):
    """The pricer on ``--results`` curves and its notes (None when the same launch prices the calls)."""
    if not args.results:
        return None
    from microbench.records import read_results
    from microbench.workload.weighting import curves_from_results

    results = read_results(args.results)
    if not results:
        raise UsageError(f"no result records in {', '.join(args.results)}")
    found, notes = curves_from_results(results, args.stat)
    pricer, pricing_notes = predict.from_curves(found, layout)
    return pricer, notes, pricing_notes


def check_torch_here(args) -> None:
    """What a torch rank on this host would refuse: a backend this torch lacks, CUDA without a device."""
    from microbench.cluster import torch_runtime

    torch_runtime.resolve_backend(args.torch_backend, args.device)
    if args.device == "cuda" and not torch_runtime.import_torch()[0].cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")

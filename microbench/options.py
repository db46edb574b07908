"""What a run measures: the options every rank must share, and the size plan of a benchmark at a size.

``RunOptions`` is built from the command line on every rank (its digest is compared across ranks).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import microbench
from microbench.benchmarks.dtypes import OPS, DType, get_dtype
from microbench.benchmarks.table import BISECT, COLLECTIVES, DEFAULT_BENCHMARKS, PAIRS, Collective, get_collective
from microbench.errors import UsageError
from microbench.units import parse_duration, parse_size, parse_sizes

DEFAULT_SIZES = "1:1M"


@dataclass
class RunOptions:
    """Everything that decides what a run measures (identical on every rank)."""

    benchmarks: list[str]
    sizes: list[int]
    iterations: int | None = None
    warmup: int | None = None
    time_budget: float | None = None
    dtype: str | None = None
    op: str = "sum"
    check: bool = False
    in_place: bool = False
    sync: str = "none"
    window: int = 64
    root: int = 0
    huge_pages: str = "system"
    backend: str = "mpi"
    loop: str = "auto"
    out: str | None = None
    csv: str | None = None
    samples: str | None = None
    cache: str = "warm"
    cache_size: int | None = None
    max_memory: int = 1 << 30
    flush: bool = False
    first_call_samples: int = 1
    timeout: float = 600.0
    sizes_from: str | None = None  #: a workload JSON whose message sizes replace -m, per benchmark
    sizes_by_benchmark: dict[str, list[int]] | None = None
    pairs: bool = False  #: run the pairwise link test
    pair_sizes: tuple[int, int] = (8, 1 << 20)  #: (latency size, bandwidth size) of the pairwise test
    serial: bool = False
    pair_repeats: int = 2  #: passes over the pairwise test's schedule (issue 39: flag what stands out in most)
    torch_backend: str = "auto"  #: gloo | nccl | mpi | ucc | auto (nccl on CUDA, else gloo)
    device: str = "cpu"  #: cpu | cuda
    buffer: str = "numpy"  #: numpy | cupy | torch: what holds the buffers the transport moves
    stage_host: bool = False  #: MPI without CUDA support: copy device buffers through the host (timed)
    cuda_graph: bool = False
    nccl_connect: str = "runtime"  #: runtime (NCCL's default) | eager (NCCL_RUNTIME_CONNECT=0 before the communicator)
    nccl_algo: bool = False  #: record NCCL's algorithm and protocol per size (its TUNING debug lines)
    gpus_per_node: int | None = None
    reduce_scatter_call: str = "block"  #: MPI: block (MPI_Reduce_scatter_block) or vector (MPI_Reduce_scatter)
    compute_ratio: float | None = None  #: non-blocking: compute R x t_pure (default 1 when --compute-us is not given)
    compute_us: float | None = None  #: non-blocking: compute this many us at every size
    num_tests: int = 0  #: non-blocking: completion tests spread through the compute
    kernel: str = "flops"  #: non-blocking: flops | stream | gemm (--kernel auto: gemm for torch on CUDA, else flops)
    # diagnostics (docs/diagnostics.md): bisection, soak cycles, straggler columns
    bisect: bool = False  #: run the bisection (microbench run bisect)
    bisect_benchmark: str = "allreduce"  #: the collective bisection measures
    bisect_size: int = 1 << 20  #: bytes per rank of each bisection measurement
    cycles: int | None = None  #: soak: repeat everything this many times
    duration: float | None = None  #: soak: start cycles until this many seconds have passed
    check_every: int | None = None  #: soak: check the data (as -c) in every K-th cycle
    straggler_columns: bool = False  #: the table shows skew and the slowest and fastest rank

    def sizes_for(self, benchmark: str) -> list[int]:
        """The sizes one benchmark sweeps (the workload's, with --sizes-from)."""
        if self.sizes_by_benchmark is not None:
            return self.sizes_by_benchmark.get(benchmark, [])
        return self.sizes

    @classmethod
    def from_args(cls, args) -> "RunOptions":
        """The options of ``microbench run``, checked (a UsageError names the first bad one)."""
        by_benchmark = _workload_sizes(args)
        benchmarks, named = _benchmark_names(args.benchmarks or list(DEFAULT_BENCHMARKS))
        pairs = PAIRS in named
        sizes = sorted({x for v in by_benchmark.values() for x in v}) if by_benchmark else \
            parse_sizes(args.sizes or DEFAULT_SIZES)
        pair_sizes = (min(sizes), max(sizes)) if args.sizes else (8, 1 << 20)
        if args.serial and not pairs:
            raise UsageError("--serial applies to the pairwise link test (microbench run pairs)")
        repeats = getattr(args, "pair_repeats", None)
        if repeats is not None and not pairs:
            raise UsageError("--pair-repeats applies to the pairwise link test (microbench run pairs)")
        if repeats is not None and not 1 <= repeats <= 100:
            raise UsageError(f"--pair-repeats must be from 1 to 100 (got {repeats})")
        _check_values(args, benchmarks)
        buffer = _resolve_buffer(args)
        cache_size = parse_size(args.cache_size) if args.cache_size else None
        max_memory = parse_size(args.max_memory)
        return cls(benchmarks=benchmarks, sizes=sizes, iterations=args.iterations, warmup=args.warmup,
                   time_budget=args.time_budget, dtype=args.dtype, op=args.op, check=args.check,
                   in_place=args.in_place, sync=args.sync, window=args.window, root=args.root,
                   huge_pages=args.huge_pages, backend=args.backend, loop=args.loop, out=args.out, csv=args.csv,
                   samples=args.samples, cache=args.cache, cache_size=cache_size, max_memory=max_memory,
                   flush=args.flush, first_call_samples=args.first_call_samples, timeout=args.timeout,
                   pairs=pairs, pair_sizes=pair_sizes, serial=args.serial,
                   pair_repeats=repeats if repeats is not None else 2, sizes_from=args.sizes_from,
                   sizes_by_benchmark=by_benchmark, torch_backend=args.torch_backend, device=args.device,
                   buffer=buffer, stage_host=args.stage_host, cuda_graph=args.cuda_graph,
                   nccl_connect=getattr(args, "nccl_connect", "runtime"), gpus_per_node=args.gpus_per_node,
                   nccl_algo=getattr(args, "nccl_algo", False),
                   reduce_scatter_call=args.reduce_scatter_call,
                   **_diagnostic_options(args, BISECT in named), **_overlap_options(args, benchmarks))

    def digest_fields(self) -> dict:
        """What must agree across ranks (all options, plus the microbench version)."""
        return {**asdict(self), "microbench_version": microbench.__version__}


def _workload_sizes(args) -> dict[str, list[int]] | None:
    """--sizes-from: the workload's message sizes per benchmark (and its benchmarks, when none are named)."""
    if not args.sizes_from:
        return None
    if args.sizes:
        raise UsageError("-m/--sizes and --sizes-from both choose the sizes; give one")
    from microbench.benchmarks.workload_sizes import sizes_for_benchmarks

    by_benchmark = sizes_for_benchmarks(args.sizes_from)
    if not args.benchmarks:
        args.benchmarks = [b for b in COLLECTIVES if b in by_benchmark]
    for name in args.benchmarks:  # a non-blocking benchmark measures its blocking twin's sizes
        key = name.lower().replace("-", "_")
        if key in COLLECTIVES and COLLECTIVES[key].nonblocking and key[1:] in by_benchmark:
            by_benchmark.setdefault(key, by_benchmark[key[1:]])
    missing = [b for b in args.benchmarks if b not in by_benchmark and b not in (PAIRS, BISECT)]
    if missing:
        raise UsageError(f"the workload {args.sizes_from} has no messages for {', '.join(missing)}")
    return by_benchmark


def _benchmark_names(names: list[str]) -> tuple[list[str], set[str]]:
    """(canonical benchmark names in order, once each; which of pairs and bisect were named)."""
    if names == ["all"]:
        names = list(COLLECTIVES)
    benchmarks, named = [], set()
    for name in names:
        if name.lower() in (PAIRS, BISECT):
            named.add(name.lower())
            continue
        coll = get_collective(name)
        if coll.name not in benchmarks:
            benchmarks.append(coll.name)
    return benchmarks, named


def _diagnostic_options(args, bisect: bool) -> dict:
    """The bisection, soak and straggler-column options, checked."""

    bisect_coll = get_collective(args.bisect_benchmark)
    if bisect_coll.point_to_point:
        raise UsageError(f"--bisect-benchmark {bisect_coll.name} is point to point; bisection measures a collective "
                         f"(allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce)")
    if bisect and args.backend != "mpi":
        raise UsageError("bisect splits MPI communicators: it needs --backend mpi")
    for flag, value in (("--cycles", args.cycles), ("--check-every", args.check_every)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1 (got {value})")
    duration = parse_duration(args.duration) if args.duration is not None else None
    if args.check_every is not None and args.cycles is None and duration is None:
        raise UsageError("--check-every applies to soak runs: add --cycles N or --duration T")
    return {"bisect": bisect, "bisect_benchmark": bisect_coll.name, "bisect_size": _bisect_size(args, bisect),
            "cycles": args.cycles, "duration": duration, "check_every": args.check_every,
            "straggler_columns": args.straggler_columns}


def _bisect_size(args, bisect: bool) -> int:
    """Bytes per rank of each bisection measurement: --bisect-size, else the one size of -m, else 1 MiB."""
    if args.bisect_size is not None:
        if bisect and args.sizes and len(args.benchmarks or []) == 1:
            raise UsageError("-m and --bisect-size both choose bisect's size; give one")
        return parse_size(args.bisect_size)
    if not (bisect and args.sizes):
        return 1 << 20
    sizes = parse_sizes(args.sizes)
    if len(sizes) != 1:
        raise UsageError(f"bisect measures one size and -m {args.sizes} names {len(sizes)}: give one size "
                         "(-m 64K) or bisect's own with --bisect-size")
    return sizes[0]


def _check_values(args, benchmarks: list[str]) -> None:
    """Ranges and combinations of the numeric and per-benchmark options."""
    if args.dtype:
        get_dtype(args.dtype)
    if args.op not in OPS:
        raise UsageError(f"unknown op {args.op!r}: choose from {', '.join(OPS)}")
    for flag, value in (("--iterations", args.iterations), ("--window", args.window)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1 (got {value})")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more (got {args.warmup})")
    if args.time_budget is not None and not 0 < args.time_budget < math.inf:
        raise UsageError(f"--time-budget must be a finite number of positive seconds (got {args.time_budget})")
    if args.time_budget is not None and args.iterations is not None:
        raise UsageError("--time-budget and --iterations both choose the iteration count; give one")
    if args.in_place:
        cannot = [b for b in benchmarks if not COLLECTIVES[b].in_place_ok]
        if cannot:
            can = [c.name for c in COLLECTIVES.values() if c.in_place_ok]
            raise UsageError(f"--in-place applies to {', '.join(can[:-1])} and {can[-1]}, not {', '.join(cannot)}")
    if args.root < 0:
        raise UsageError(f"--root must be a rank (got {args.root})")
    if args.first_call_samples < 1:
        raise UsageError(f"--first-call-samples must be at least 1 (got {args.first_call_samples})")
    if not 0 <= args.timeout < math.inf:
        raise UsageError(f"--timeout must be 0 (off) or a finite number of positive seconds (got {args.timeout})")


def _overlap_options(args, benchmarks: list[str]) -> dict:
    """--compute-ratio, --compute-us, --num-tests and --kernel, checked (they apply to non-blocking benchmarks)."""
    given = [f for f, v in (("--compute-ratio", args.compute_ratio), ("--compute-us", args.compute_us),
                            ("--num-tests", args.num_tests or None), ("--kernel", args.kernel)) if v is not None]
    if given and not any(COLLECTIVES[b].nonblocking for b in benchmarks):
        raise UsageError(f"{given[0]} applies to the non-blocking benchmarks "
                         f"({', '.join(c.name for c in COLLECTIVES.values() if c.nonblocking)})")
    if args.compute_ratio is not None and args.compute_us is not None:
        raise UsageError("--compute-ratio and --compute-us both set the compute time; give one")
    for flag, value in (("--compute-ratio", args.compute_ratio), ("--compute-us", args.compute_us)):
        if value is not None and not 0 <= value < math.inf:
            raise UsageError(f"{flag} must be a finite number, 0 or more (got {value})")
    if args.num_tests < 0:
        raise UsageError(f"--num-tests must be 0 or more (got {args.num_tests})")
    cuda_torch = args.backend == "torch" and args.device == "cuda"
    kernel = args.kernel if args.kernel not in (None, "auto") else ("gemm" if cuda_torch else "flops")
    if kernel == "gemm" and not cuda_torch:
        raise UsageError("--kernel gemm runs on the GPU: it needs --backend torch --device cuda")
    if kernel in ("flops", "stream") and cuda_torch:
        raise UsageError(f"--kernel {kernel} is a host kernel; torch on CUDA overlaps with a GEMM (--kernel gemm)")
    if args.cuda_graph and any(COLLECTIVES[b].nonblocking for b in benchmarks):
        raise UsageError("--cuda-graph cannot capture the non-blocking benchmarks (their completion is tested "
                         "from the host)")
    ratio = args.compute_ratio if args.compute_ratio is not None else (None if args.compute_us is not None else 1.0)
    return {"compute_ratio": ratio, "compute_us": args.compute_us, "num_tests": args.num_tests, "kernel": kernel}


def _resolve_buffer(args) -> str:
    """--buffer, checked against --backend and --device (default: numpy on the CPU, torch tensors on CUDA)."""
    if args.backend == "torch":
        if args.loop in ("native", "mpi4py"):
            raise UsageError(f"--loop {args.loop} times MPI calls; the torch backend uses the Python loop")
        if args.buffer not in (None, "torch"):
            raise UsageError("--backend torch moves torch tensors; --buffer applies to the MPI backend")
        if args.stage_host:
            raise UsageError("--stage-host applies to the MPI backend with device buffers")
        if args.reduce_scatter_call != "block":
            raise UsageError("--reduce-scatter-call vector is MPI_Reduce_scatter; torch.distributed has only the "
                             "block form (reduce_scatter_tensor)")
        buffer = "torch"
    else:
        if args.torch_backend != "auto":
            raise UsageError("--torch-backend applies to --backend torch")
        buffer = args.buffer or ("numpy" if args.device == "cpu" else "torch")
        if args.device == "cpu" and buffer != "numpy":
            raise UsageError(f"--buffer {buffer} holds device memory: add --device cuda")
        if args.device == "cuda" and buffer == "numpy":
            raise UsageError("--buffer numpy is host memory: use --buffer cupy or torch with --device cuda")
        if args.stage_host and args.device != "cuda":
            raise UsageError("--stage-host copies device buffers through the host: it needs --device cuda")
    if args.cuda_graph and not (args.backend == "torch" and args.device == "cuda"):
        raise UsageError("--cuda-graph captures torch.distributed calls on CUDA: add --backend torch --device cuda")
    if args.cuda_graph and args.torch_backend not in ("auto", "nccl"):
        raise UsageError(f"--cuda-graph captures NCCL's kernels; torch's {args.torch_backend} backend runs on the host "
                         f"and cannot be captured in a CUDA graph: use --torch-backend nccl (or auto)")
    if args.cuda_graph and args.time_budget is not None:
        raise UsageError("--time-budget sizes the timed iterations from the eager warmup, whose launch costs are not "
                         "what a graph replay pays: give --cuda-graph a count with -i instead")
    nccl = args.backend == "torch" and (args.torch_backend == "nccl" or (args.torch_backend == "auto"
                                                                        and args.device == "cuda"))
    if getattr(args, "nccl_algo", False) and not nccl:
        raise UsageError("--nccl-algo reads NCCL's own output: it needs --backend torch --device cuda")
    if getattr(args, "nccl_connect", "runtime") != "runtime" and not nccl:
        raise UsageError("--nccl-connect applies to the NCCL backend (--backend torch --device cuda)")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node must be at least 1 (got {args.gpus_per_node})")
    return buffer


@dataclass
class SizePlan:
    """The buffers and byte counts of one benchmark at one requested size."""

    size_bytes: int  #: effective message size (a whole number of elements)
    count: int
    send_count: int
    recv_count: int
    io_send_bytes: int
    io_recv_bytes: int


def plan_size(coll: Collective, size: int, nranks: int, dtype: DType, in_place: bool) -> SizePlan | None:
    """Round ``size`` down to whole elements (and to n blocks for reduce_scatter); None if nothing is left."""
    count = size // dtype.itemsize
    count -= count % coll.count_multiple(nranks)
    if count == 0:
        return None
    counts = coll.in_place_counts if (in_place and coll.in_place_counts) else coll.buffer_counts
    send_count, recv_count = counts(count, nranks)
    io_send, io_recv = (coll.io_counts or coll.buffer_counts)(count, nranks)
    return SizePlan(count * dtype.itemsize, count, send_count, recv_count, io_send * dtype.itemsize,
                    io_recv * dtype.itemsize)


def dtype_for(opts: RunOptions, coll: Collective) -> DType:
    """The element type a benchmark runs with (--dtype, else the benchmark's default)."""
    return get_dtype(opts.dtype or coll.default_dtype)


def counts_for(opts: RunOptions, coll: Collective, size_bytes: int) -> tuple[int, int]:
    """(iterations, warmup) at one size: -i/-x where given, else the benchmark's OMB defaults."""
    iterations, warmup = coll.counts.at(size_bytes)
    return (iterations if opts.iterations is None else opts.iterations,
            warmup if opts.warmup is None else opts.warmup)


def cache_passes(opts: RunOptions) -> list[str]:
    """The cache modes each size is measured in, in order (the first call is timed in the first)."""
    return ["warm", "cold"] if opts.cache == "both" else [opts.cache]

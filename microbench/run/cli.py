"""Measure benchmarks over a message-size sweep (OMB-style options).

Benchmarks: allreduce, allgather, reduce_scatter, broadcast, latency, bw (the default six), and
reduce, alltoall, bibw, alltoallv (unequal splits: --splits), and the non-blocking iallreduce, iallgather,
ireduce_scatter, ibroadcast, ireduce, ialltoall, ialltoallv (t_pure and its overlap with compute,
docs/overlap.md); 'all' runs every one. 'pairs' is the
pairwise link test: latency and bandwidth
between every pair of hosts (of ranks, on one host), scheduled as a round-robin tournament. 'bisect' finds
the node that slows a collective in O(log N) rounds (docs/diagnostics.md). Under mpiexec,
srun or torchrun the ranks the launcher started are used; alone, --np N starts N local ranks with the
mpiexec of the installed MPI.

Sizes are bytes per rank as docs/definitions.md defines them (allgather/alltoall: each rank's block;
reduce_scatter: each rank's input; alltoallv: what the busiest rank sends in all). Latency is in
microseconds, bandwidth in GB/s (1e9 B/s): algbw = S / avg latency and busbw = algbw x factor, as nccl-tests
defines S and the factor.
"""

from __future__ import annotations

import argparse
import os

from microbench.benchmarks.dtypes import DTYPES, OPS
from microbench.cluster import launch
from microbench.errors import UsageError
from microbench.measure.buffers import HUGE_PAGE_POLICIES


def main(args) -> int:
    """The ``run`` verb: on every rank the driver; alone with ``--np N``, start N ranks under mpiexec.

    The ``--np`` parent imports only what checks the options before it starts the ranks."""
    if launch.is_np_parent(args.np):
        return launch.start_ranks(args._argv, args.np, lambda: _check_before_ranks(args))
    from microbench.run import driver

    return driver.run(args, args._argv)


def _check_before_ranks(args) -> None:
    """The ``--np`` parent's checks: the options, the test hooks, and what the ranks would refuse on this host."""
    from microbench.measure.testhooks import FaultHooks
    from microbench.options import RunOptions
    from microbench.run import preflight

    most = local_rank_bound()
    if args.np > most and not args.oversubscribe:
        raise UsageError(f"--np {args.np} is more than {most} ranks, {RANKS_PER_CPU} per CPU this process may use "
                         f"(at least {MIN_LOCAL_RANKS}): pass --oversubscribe to start them anyway")
    opts = RunOptions.from_args(args)
    if opts.bisect:  # the ranks of --np share this host: bisection's nodes are its ranks
        from microbench.run.diagnostics.bisection import check_node_count

        check_node_count(args.np, "rank")
    FaultHooks.from_env(warn=False).check_usable(opts.timeout)
    preflight.validate_for_ranks(opts, args.np, args.np)
    preflight.preflight_local(opts)


RANKS_PER_CPU, MIN_LOCAL_RANKS = 4, 16  #: --np beyond both needs --oversubscribe (each rank costs ~40 MB)


def local_rank_bound() -> int:
    """The most ranks ``--np`` starts without ``--oversubscribe``: 4 per CPU this process may use, at least 16."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(MIN_LOCAL_RANKS, RANKS_PER_CPU * cpus)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``microbench run``, in groups as ``--help`` shows them."""
    _add_sweep(p)
    _add_measured(p)
    _add_overlap(p)
    _add_cache(p)
    _add_transport(p)
    g = p.add_argument_group("faults")
    g.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="end the whole job when one size takes longer than this, naming the benchmark and size "
                        "that stalled (default 600; 0 turns the watchdog off)")
    _add_diagnostics(p)
    _add_output(p)


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("benchmarks", nargs="*", metavar="BENCH",
                   help="benchmarks to run (default: allreduce allgather reduce_scatter broadcast latency bw; "
                        "'all' adds reduce, alltoall, bibw and the non-blocking i<name> ones); 'pairs' is the "
                        "pairwise link test, 'bisect' the search for a slow node")
    g = p.add_argument_group("sweep")
    g.add_argument("-m", "--sizes", metavar="SIZES",
                   help="message sizes: MIN:MAX doubling, K/M/G suffixes (powers of 2), comma lists; "
                        "e.g. 8:1M or 8,4K,1M (default 1:1M; pairs: latency at the smallest, bandwidth at the "
                        "largest, default 8 and 1M)")
    g.add_argument("--sizes-from", metavar="FILE.json",
                   help="measure exactly the message sizes of a workload (microbench workload --json), per benchmark; "
                        "with no BENCH, the benchmarks the workload uses")
    g.add_argument("-i", "--iterations", type=int, metavar="N",
                   help="timed iterations at every size (default as OMB: latency 10000/1000, bw 100/20, "
                        "collectives 1000/100, the second above 8 KiB)")
    g.add_argument("-x", "--warmup", type=int, metavar="N",
                   help="untimed warmup iterations at every size (default as OMB: 100/10, bw 10/2)")
    g.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="instead of -i: choose each size's iteration count to take about this long")
    g.add_argument("--np", type=int, metavar="N",
                   help="start N local ranks with the mpiexec of the installed MPI (when not under a launcher); "
                        "at most 4 per CPU (at least 16) unless --oversubscribe")
    g.add_argument("--oversubscribe", action="store_true",
                   help="let --np start more than 4 ranks per CPU")


def _add_measured(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what is measured")
    g.add_argument("--dtype", choices=list(DTYPES), metavar="TYPE",
                   help=f"element type ({', '.join(DTYPES)}); default float32 for reductions, uint8 otherwise")
    g.add_argument("--op", default="sum", choices=list(OPS), help="reduction operation (default sum)")
    g.add_argument("-c", "--check", action="store_true",
                   help="validate received data after every timed iteration (untimed); exit 1 if any size fails")
    g.add_argument("--in-place", action="store_true", help="in-place allreduce, allgather, reduce_scatter")
    g.add_argument("--root", type=int, default=0, metavar="RANK", help="root of broadcast and reduce (default 0)")
    g.add_argument("--splits", metavar="PATTERN",
                   help="alltoallv's split over destinations: uniform (default), zipf:S (destination j weighs "
                        "1/(j+1)^S), hot:K (destination 0 weighs K, the others 1) or file:PATH (a histogram over "
                        "experts, or an n x n matrix of weights); /T after any: transposed (a MoE combine); "
                        "docs/definitions.md")
    g.add_argument("-W", "--window", type=int, default=64, metavar="N",
                   help="messages in flight per iteration for bw and bibw (default 64, as osu_bw)")
    g.add_argument("--sync", choices=("none", "barrier"), default="none",
                   help="none: back-to-back iterations (default); barrier: OMB's barrier between "
                        "iterations, outside the timing")
    g.add_argument("--huge-pages", choices=HUGE_PAGE_POLICIES, default="system",
                   help="transparent huge pages for buffers: system (kernel default, as a C benchmark's "
                        "malloc), on (madvise), off (never); recorded with results (default system)")
    g.add_argument("--serial", action="store_true",
                   help="pairs: measure one pair at a time instead of N/2 disjoint pairs per round")
    g.add_argument("--pair-repeats", type=int, metavar="R",
                   help="pairs: passes over every pair (default 2); a link or node is flagged only where it stands "
                        "out in the median matrix and in a majority of the passes")


def _add_overlap(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("non-blocking benchmarks (overlap with compute, docs/overlap.md)")
    g.add_argument("--compute-ratio", type=float, metavar="R",
                   help="compute for R x t_pure (the mean across ranks of post + wait back to back) between post "
                        "and wait (default 1, as OMB)")
    g.add_argument("--compute-us", type=float, metavar="T", help="compute for T microseconds at every size instead")
    g.add_argument("--num-tests", type=int, default=0, metavar="K",
                   help="spread K completion tests (MPI_Test, is_completed()) through the compute, timed apart "
                        "(default 0)")
    g.add_argument("--kernel", choices=("auto", "flops", "stream", "gemm"),
                   help="the compute: flops (compute-bound, in registers), stream (memory-bandwidth-bound triad "
                        "over twice the LLC), gemm (torch on CUDA); auto: gemm for torch on CUDA, else flops")


def _add_cache(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cache and first call")
    g.add_argument("--cache", choices=("warm", "cold", "both"), default="warm",
                   help="warm: the same buffers every iteration (default); cold: each iteration uses buffers out "
                        "of the last-level cache (a rotation pool of at least twice its size, as IMB -off_cache); "
                        "both: a warm and a cold record per size")
    g.add_argument("--cache-size", metavar="SIZE", help="cache size cold mode works against (default: the "
                   "last-level cache from sysfs)")
    g.add_argument("--max-memory", default="1G", metavar="SIZE",
                   help="bound on each rank's cold-cache pool (default 1G); a bounded pool that cannot evict is noted")
    g.add_argument("--flush", action="store_true",
                   help="also write a buffer of twice the cache size, then a barrier, before every iteration (untimed)")
    g.add_argument("--first-call-samples", type=int, default=1, metavar="K",
                   help="time the first call at each size on K fresh buffer sets (default 1)")


def _add_transport(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("transport and devices")
    g.add_argument("--backend", choices=("mpi", "torch"), default="mpi",
                   help="mpi: mpi4py on the MPI mpi4py loaded (default); torch: torch.distributed")
    g.add_argument("--torch-backend", choices=("gloo", "nccl", "mpi", "ucc", "auto"), default="auto",
                   help="torch.distributed backend; auto: nccl with --device cuda, else gloo")
    g.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where buffers live (cuda: one GPU per local rank)")
    g.add_argument("--buffer", choices=("numpy", "cupy", "torch"),
                   help="MPI backend: what holds the buffers (default numpy on the CPU, torch on CUDA); "
                        "device buffers need a CUDA-aware MPI or --stage-host")
    g.add_argument("--stage-host", action="store_true",
                   help="MPI without CUDA support: copy device buffers to the host and back around each call "
                        "(inside the timing; records say staged)")
    g.add_argument("--cuda-graph", action="store_true",
                   help="torch on CUDA: replay the timed iterations from a captured CUDA graph")
    g.add_argument("--nccl-connect", choices=("runtime", "eager"), default="runtime",
                   help="NCCL: runtime (NCCL's default since 2.22: an algorithm's connections are made at the first "
                        "call that selects it, so that size's first call carries them) or eager "
                        "(NCCL_RUNTIME_CONNECT=0: every connection made with the communicator, before any call); "
                        "recorded in the run's conditions")
    g.add_argument("--nccl-algo", action="store_true",
                   help="NCCL: record the algorithm and protocol NCCL chose for each size (ring, tree, NVLS...; LL, "
                        "LL128, Simple), read from its TUNING debug lines (NCCL 2.20 and later; a line per call, "
                        "which costs small messages a little); not with NCCL_DEBUG or NCCL_DEBUG_FILE already set")
    g.add_argument("--gpus-per-node", type=int, metavar="N",
                   help="GPUs per node for the local-rank -> GPU mapping (default: all visible)")
    g.add_argument("--reduce-scatter-call", choices=("block", "vector"), default="block",
                   help="MPI backend: block is MPI_Reduce_scatter_block (as nccl-tests and torch; default), vector is "
                        "MPI_Reduce_scatter with n equal counts (as OMB's osu_reduce_scatter); recorded as mpi_call")
    g.add_argument("--loop", choices=("auto", "native", "python", "mpi4py"), default="auto",
                   help="timed loop for MPI: native (C, built with the MPI's mpicc at first use and cached); "
                        "python (the loop in Python, each iteration one call into microbench's C call shim, "
                        "built likewise, which stamps the time each call ended into a buffer read after the loop; "
                        "mpi4py where it cannot be "
                        "built); mpi4py (the Python loop calling mpi4py, "
                        "what an mpi4py program pays per call); auto: native where it builds, else mpi4py "
                        "with a notice (default auto)")


def _add_output(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="FILE.jsonl", help="append JSON Lines records (flushed after each size)")
    g.add_argument("--csv", metavar="FILE", help="append one CSV row per size")
    g.add_argument("--samples", metavar="FILE",
                   help="also write every rank's raw per-iteration latencies (JSON Lines, gathered to rank 0)")


def _add_diagnostics(p: argparse.ArgumentParser) -> None:
    """Soak cycles, bisection and the straggler columns (docs/diagnostics.md)."""
    g = p.add_argument_group("diagnostics: soak runs, bisection, stragglers")
    g.add_argument("--cycles", type=int, metavar="N",
                   help="soak: run everything the command names N times, each cycle numbered and timestamped")
    g.add_argument("--duration", metavar="T",
                   help="soak: start new cycles until T has passed (seconds, or 90s, 30m, 12h); the cycle running "
                        "then finishes")
    g.add_argument("--check-every", type=int, metavar="K",
                   help="soak: validate received data (as -c) in every K-th cycle (cycles K, 2K, ...)")
    g.add_argument("--bisect-benchmark", default="allreduce", metavar="BENCH",
                   help="bisect: the collective each round measures (default allreduce)")
    g.add_argument("--bisect-size", metavar="SIZE",
                   help="bisect: its message size, bytes per rank (default: the one size of -m, else 1M)")
    g.add_argument("--straggler-columns", action="store_true",
                   help="add Skew (slowest over fastest rank mean), Slowest and Fastest (rank or host) to the table; "
                        "the records always carry them")

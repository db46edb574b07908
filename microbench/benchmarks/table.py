"""One declarative entry per benchmark: what it calls, its buffers, its bandwidth, its role, its check data.

A benchmark is added here and nowhere else in the run path: the backends offer the primitive its
``build`` calls (and, for the native loop, mbloop.c the call kind); docs/adding-a-benchmark.md walks through
adding one. The entry is also the one place that says how a collective is called: the replay issues its calls
through these entries and the backends' primitives, and ``mpi_call`` names the MPI function. Definitions
(docs/definitions.md):

- message size (``size_bytes``): allreduce, reduce, broadcast, latency, bw, bibw: the buffer each rank
  sends; allgather and alltoall: each rank's contribution to each peer (as OMB); reduce_scatter: each
  rank's input buffer, split n ways (as OMB).
- algbw = S / t, with S from ``algbw_bytes`` (nccl-tests' S: the total for allgather and alltoall);
  busbw = algbw x ``busbw_factor(n)``, written out in ``busbw_formula``; t the per-iteration latency.
- latency per iteration: the call's time; half the round trip for ``latency``; the window's time
  divided by the window for ``bw`` and ``bibw``; for the non-blocking benchmarks (``nonblocking``) post and
  wait back to back (t_pure), their overlap with compute in the record's ``overlap`` (docs/overlap.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from microbench.benchmarks import checkdata as cd
from microbench.benchmarks.base import COLLECTIVE_COUNTS, LATENCY_COUNTS, STREAM_COUNTS, Buffers, Context, Counts
from microbench.errors import UsageError

POISON = cd.POISON


@dataclass(frozen=True)
class Collective:
    """A benchmark as data: everything the engine, the stats, the records and the check need to know."""

    name: str
    summary: str
    #: the backend primitive ``build`` calls (a transport's capabilities are stated per primitive)
    primitive: str
    reduces: bool
    default_dtype: str
    #: (count, nranks) -> (send elements, recv elements) per rank; count = size_bytes / itemsize
    buffer_counts: Callable[[int, int], tuple[int, int]]
    #: nranks -> busbw / algbw, and the same written out for tables and docs (in n, the rank count)
    busbw_factor: Callable[[int], float]
    busbw_formula: str
    #: (size_bytes, nranks) -> S, the bytes algbw divides by the latency
    algbw_bytes: Callable[[int, int], float]
    build: Callable[[Any, Buffers, Context], Callable[[], None]]
    fill: Callable[[Buffers, Context, int], None]
    verify: Callable[[Buffers, Context, int], int]
    counts: Counts = COLLECTIVE_COUNTS
    point_to_point: bool = False
    #: point to point: -W/--window messages in flight per iteration
    windowed: bool = False
    #: the pairwise link test measures its "latency" or "bandwidth" matrix with this benchmark
    pair_metric: str | None = None
    in_place_ok: bool = False
    min_ranks: int = 1
    #: nranks -> the element count must be a multiple of this
    count_multiple: Callable[[int], int] = field(default=lambda n: 1)
    #: window -> how many reported latencies one timed iteration holds (2 for a round trip)
    per_iteration: Callable[[int], float] = field(default=lambda window: 1)
    #: in-place variant: buffer counts when --in-place (send buffer absent)
    in_place_counts: Callable[[int, int], tuple[int, int]] | None = None
    #: (count, nranks) -> (send, recv) elements as recorded (the operation's input and output per
    #: rank, whatever buffers serve them); defaults to buffer_counts
    io_counts: Callable[[int, int], tuple[int, int]] | None = None
    #: the benchmark has a root rank (--root)
    rooted: bool = False
    #: a non-blocking collective: ``build`` returns a backends.nonblocking.NonBlocking and each size also
    #: measures its overlap with compute (microbench.measure.overlap)
    nonblocking: bool = False
    #: the MPI function(s) an iteration calls (recorded as ``mpi_call``); reduce_scatter: the block form, which
    #: ``--reduce-scatter-call vector`` replaces with MPI_Reduce_scatter (``measure.backends.mpi``)
    mpi_call: str | None = None
    #: directions the recorded busbw counts (2 for a bidirectional benchmark): its path's peak is this many
    #: times the link's peak per direction (microbench.cluster.path_peak)
    directions: int = 1

    def check_max_value(self, op: str, nranks: int) -> int:
        """Largest value a checked iteration writes (the dtype must hold it exactly)."""
        return cd.check_max_value(self.reduces, op, nranks)


def _send_unless_in_place(b: Buffers, c: Context):
    return None if c.in_place else b.send


ALLREDUCE = Collective(
    name="allreduce",
    summary="MPI_Allreduce / all_reduce: every rank ends with the reduction of all buffers",
    primitive="allreduce", mpi_call="MPI_Allreduce",
    reduces=True, default_dtype="float32",
    buffer_counts=lambda count, n: (count, count),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: 2 * (n - 1) / n, busbw_formula="2(n-1)/n",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.allreduce(_send_unless_in_place(b, c), b.recv, c.op),
    fill=cd.reduction_fill, verify=cd.allreduce_verify,
    in_place_ok=True,
)

REDUCE = Collective(
    name="reduce",
    summary="MPI_Reduce / reduce: the root ends with the reduction of all buffers",
    primitive="reduce", mpi_call="MPI_Reduce",
    reduces=True, default_dtype="float32",
    buffer_counts=lambda count, n: (count, count),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: 1.0, busbw_formula="1",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.reduce(_send_unless_in_place(b, c), b.recv, c.op, c.root),
    fill=cd.reduction_fill, verify=cd.reduce_verify,
    in_place_ok=True, rooted=True,
)

ALLGATHER = Collective(
    name="allgather",
    summary="MPI_Allgather / all_gather: every rank ends with every rank's block",
    primitive="allgather", mpi_call="MPI_Allgather",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count * n),
    in_place_counts=lambda count, n: (0, count * n),
    busbw_factor=lambda n: (n - 1) / n, busbw_formula="(n-1)/n",
    algbw_bytes=lambda size, n: size * n,
    build=lambda be, b, c: be.allgather(_send_unless_in_place(b, c), b.recv),
    fill=cd.allgather_fill, verify=cd.allgather_verify,
    in_place_ok=True,
)

REDUCE_SCATTER = Collective(
    name="reduce_scatter",
    summary="MPI_Reduce_scatter_block / reduce_scatter: each rank ends with one n-th of the reduction",
    primitive="reduce_scatter", mpi_call="MPI_Reduce_scatter_block",
    reduces=True, default_dtype="float32",
    buffer_counts=lambda count, n: (count, count // n),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: (n - 1) / n, busbw_formula="(n-1)/n",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.reduce_scatter(_send_unless_in_place(b, c), b.recv, c.op),
    fill=cd.reduction_fill, verify=cd.reduce_scatter_verify,
    in_place_ok=True, count_multiple=lambda n: n,
)

BROADCAST = Collective(
    name="broadcast",
    summary="MPI_Bcast / broadcast: the root's buffer reaches every rank",
    primitive="broadcast", mpi_call="MPI_Bcast",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count, 0),
    io_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0, busbw_formula="1",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.broadcast(b.send, c.root),
    fill=cd.broadcast_fill, verify=cd.broadcast_verify,
    rooted=True,
)

ALLTOALL = Collective(
    name="alltoall",
    summary="MPI_Alltoall / all_to_all: each rank sends a distinct block to every rank",
    primitive="alltoall", mpi_call="MPI_Alltoall",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count * n, count * n),
    busbw_factor=lambda n: (n - 1) / n, busbw_formula="(n-1)/n",
    algbw_bytes=lambda size, n: size * n,
    build=lambda be, b, c: be.alltoall(b.send, b.recv),
    fill=cd.alltoall_fill, verify=cd.alltoall_verify,
)

LATENCY = Collective(
    name="latency",
    summary="ping-pong (osu_latency): half the round trip of a blocking send/recv between rank pairs",
    primitive="pingpong", mpi_call="MPI_Send/MPI_Recv",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0, busbw_formula="1",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.pingpong(b.send, b.recv, c.peer, c.initiator),
    fill=cd.p2p_fill, verify=cd.p2p_verify,
    counts=LATENCY_COUNTS, point_to_point=True, pair_metric="latency", min_ranks=2,
    per_iteration=lambda window: 2,
)

BW = Collective(
    name="bw",
    summary="windowed unidirectional bandwidth (osu_bw): a window of non-blocking sends, then an ack",
    primitive="stream", mpi_call="MPI_Isend/MPI_Irecv",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0, busbw_formula="1",
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.stream(b.send, b.recv, b.ack, c.peer, c.initiator, c.window, False),
    fill=cd.p2p_fill, verify=cd.stream_verify,
    counts=STREAM_COUNTS, point_to_point=True, windowed=True, pair_metric="bandwidth", min_ranks=2,
    per_iteration=lambda window: window,
)

BIBW = Collective(
    name="bibw",
    summary="windowed bidirectional bandwidth (osu_bibw): both ranks of a pair send a window at once",
    primitive="stream", mpi_call="MPI_Isend/MPI_Irecv",
    reduces=False, default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0, busbw_formula="1",
    algbw_bytes=lambda size, n: 2 * size,
    build=lambda be, b, c: be.stream(b.send, b.recv, b.ack, c.peer, c.initiator, c.window, True),
    fill=cd.p2p_fill, verify=cd.p2p_verify,
    counts=STREAM_COUNTS, point_to_point=True, windowed=True, min_ranks=2,
    per_iteration=lambda window: window, directions=2,
)


def nonblocking_mpi_call(blocking: str) -> str:
    """The MPI function that posts a blocking one non-blocking: MPI_Allreduce -> MPI_Iallreduce."""
    return f"MPI_I{blocking[4].lower()}{blocking[5:]}"


def _nonblocking(blocking: Collective, call: str, build: Callable) -> Collective:
    """The non-blocking twin of a collective: same buffers, sizes and check data; primitive i<primitive>."""
    return replace(blocking, name="i" + blocking.name, primitive="i" + blocking.primitive, build=build,
                   summary=f"{call}(async_op=True): posted, overlapped with compute, waited; t_pure and its "
                           f"overlap (OMB's and IMB's definitions)",
                   nonblocking=True, mpi_call=nonblocking_mpi_call(blocking.mpi_call))


IALLREDUCE = _nonblocking(ALLREDUCE, "MPI_Iallreduce / all_reduce",
                          lambda be, b, c: be.iallreduce(_send_unless_in_place(b, c), b.recv, c.op))
IREDUCE = _nonblocking(REDUCE, "MPI_Ireduce / reduce",
                       lambda be, b, c: be.ireduce(_send_unless_in_place(b, c), b.recv, c.op, c.root))
IALLGATHER = _nonblocking(ALLGATHER, "MPI_Iallgather / all_gather",
                          lambda be, b, c: be.iallgather(_send_unless_in_place(b, c), b.recv))
IREDUCE_SCATTER = _nonblocking(REDUCE_SCATTER, "MPI_Ireduce_scatter_block / reduce_scatter",
                               lambda be, b, c: be.ireduce_scatter(_send_unless_in_place(b, c), b.recv, c.op))
IBROADCAST = _nonblocking(BROADCAST, "MPI_Ibcast / broadcast", lambda be, b, c: be.ibroadcast(b.send, c.root))
IALLTOALL = _nonblocking(ALLTOALL, "MPI_Ialltoall / all_to_all", lambda be, b, c: be.ialltoall(b.send, b.recv))

COLLECTIVES: dict[str, Collective] = {
    c.name: c for c in (ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, LATENCY, BW, REDUCE, ALLTOALL, BIBW,
                        IALLREDUCE, IALLGATHER, IREDUCE_SCATTER, IBROADCAST, IREDUCE, IALLTOALL)
}

#: The blocking benchmarks, in order (every one but the non-blocking ``i*`` collectives).
BLOCKING = tuple(name for name, c in COLLECTIVES.items() if not c.nonblocking)

#: blocking primitive -> the MPI function its call makes (``Collective.mpi_call``; the non-blocking ones are
#: their twins' I-form, ``nonblocking_mpi_call``)
MPI_CALLS: dict[str, str] = {c.primitive: c.mpi_call for c in COLLECTIVES.values() if not c.nonblocking}

#: What ``microbench run`` with no benchmark list runs (the six core benchmarks).
PAIRS, BISECT = "pairs", "bisect"  #: the names of the pairwise link test and of bisection (run diagnostics)
DEFAULT_BENCHMARKS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw")


def benchmark_key(name: str, also: tuple[str, ...] = ()) -> str:
    """A benchmark's canonical name (case, '-' and '_' do not matter); ``also``: further names accepted.

    An unknown name is a usage error listing the choices."""
    key = name.lower().replace("-", "_")
    if key not in COLLECTIVES and key not in also:
        raise UsageError(f"unknown benchmark {name!r}: choose from {', '.join([*COLLECTIVES, *also])}")
    return key


def posted_twin(blocking: Collective) -> Collective:
    """The entry that posts ``blocking`` non-blocking (allreduce -> iallreduce); KeyError when the table has none."""
    return COLLECTIVES["i" + blocking.name]


def get_collective(name: str) -> Collective:
    """Look up a benchmark by name; an unknown name is a usage error listing the choices."""
    return COLLECTIVES[benchmark_key(name)]


def pair_metric_benchmark(metric: str) -> Collective:
    """The benchmark the pairwise link test measures ``metric`` ("latency" or "bandwidth") with."""
    return next(c for c in COLLECTIVES.values() if c.pair_metric == metric)


def pair_of(rank: int, nranks: int) -> tuple[int | None, bool]:
    """Point-to-point partner of ``rank``: ranks i and i + n/2 form a pair (as osu_multi_lat).

    Returns (peer, initiator); peer is None for the odd rank out.
    """
    half = nranks // 2
    if rank < half:
        return rank + half, True
    if rank < 2 * half:
        return rank - half, False
    return None, False


def participates(coll: Collective, ctx: Context) -> bool:
    """Whether this rank's timings enter the statistics (p2p: only the initiating side of each pair)."""
    if coll.point_to_point:
        return ctx.peer is not None and ctx.initiator
    return True

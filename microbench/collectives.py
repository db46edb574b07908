"""One declarative entry per benchmark: buffer sizes, bandwidth factors, roles, call, check values.

A benchmark is added here and nowhere else (backends offer the primitives the ``build`` functions
use). Definitions, as in the README:

- message size (``size_bytes``): allreduce, reduce, broadcast, latency, bw, bibw: the buffer each rank
  sends; allgather and alltoall: each rank's contribution to each peer (as OMB); reduce_scatter: each
  rank's input buffer, split n ways (as OMB).
- algbw = S / t, with S from ``algbw_bytes`` (nccl-tests' S: the total for allgather and alltoall);
  busbw = algbw x ``busbw_factor(n)``; t the per-iteration latency.
- latency per iteration: the call's time; half the round trip for ``latency``; the window's time
  divided by the window for ``bw`` and ``bibw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from microbench.errors import UsageError

#: Poison written into receive buffers before a checked iteration; valid data is never 0.
POISON = 0


@dataclass(frozen=True)
class Context:
    """What a rank needs to build and check one benchmark call."""

    rank: int
    nranks: int
    op: str = "sum"
    root: int = 0
    in_place: bool = False
    window: int = 64
    peer: int | None = None  #: point-to-point partner, None when this rank sits out
    initiator: bool = False  #: point-to-point: this rank starts the ping-pong / sends the window
    #: in-place reduce_scatter leaves this rank's result at its own block (NCCL, torch) rather than the first (MPI)
    result_at_rank: bool = False


@dataclass(frozen=True)
class Buffers:
    """The arrays one iteration uses (numpy views on host memory)."""

    send: np.ndarray | None
    recv: np.ndarray | None
    ack: np.ndarray | None = None


@dataclass(frozen=True)
class Collective:
    """A benchmark as data: everything the engine, the stats and the check need to know."""

    name: str
    summary: str
    reduces: bool
    default_dtype: str
    #: (count, nranks) -> (send elements, recv elements) per rank; count = size_bytes / itemsize
    buffer_counts: Callable[[int, int], tuple[int, int]]
    #: nranks -> busbw / algbw
    busbw_factor: Callable[[int], float]
    #: (size_bytes, nranks) -> S, the bytes algbw divides by the latency
    algbw_bytes: Callable[[int, int], float]
    build: Callable[[Any, Buffers, Context], Callable[[], None]]
    fill: Callable[[Buffers, Context, int], None]
    verify: Callable[[Buffers, Context, int], int]
    point_to_point: bool = False
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


# ---------------------------------------------------------------- check data
# Values stay within 1..62 (data) or 1..n+1 (sums), so every dtype from int8 to float64 holds them
# exactly; the check refuses rank counts whose sums would not fit (see check_limit).


def _data(src: int, it: int, n: int, offset: int = 0, salt: int = 0) -> np.ndarray:
    idx = np.arange(offset, offset + n, dtype=np.int64)
    return (src * 7 + salt * 13 + it * 3 + idx) % 61 + 1


def _reduction_input(rank: int, nranks: int, it: int, count: int, op: str, offset: int = 0) -> np.ndarray:
    idx = np.arange(offset, offset + count, dtype=np.int64)
    mine = (idx % nranks) == ((rank + it) % nranks)
    return (2 - mine) if op == "min" else (1 + mine)


def _reduction_result(nranks: int, op: str) -> int:
    return {"sum": nranks + 1, "max": 2, "min": 1}[op]


def check_max_value(coll: Collective, op: str, nranks: int) -> int:
    """Largest value a checked iteration writes (the dtype must hold it exactly)."""
    if coll.reduces:
        return nranks + 1 if op == "sum" else 2
    return 62


def _mismatches(got: np.ndarray, expected) -> int:
    return int(np.count_nonzero(got != expected))


# ---------------------------------------------------------------- allreduce
def _allreduce_fill(b: Buffers, c: Context, it: int) -> None:
    target = b.recv if c.in_place else b.send
    target[...] = _reduction_input(c.rank, c.nranks, it, target.size, c.op)
    if not c.in_place:
        b.recv[...] = POISON


def _allreduce_verify(b: Buffers, c: Context, it: int) -> int:
    return _mismatches(b.recv, _reduction_result(c.nranks, c.op))


ALLREDUCE = Collective(
    name="allreduce",
    summary="MPI_Allreduce / all_reduce: every rank ends with the reduction of all buffers",
    reduces=True,
    default_dtype="float32",
    buffer_counts=lambda count, n: (count, count),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: 2 * (n - 1) / n,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.allreduce(None if c.in_place else b.send, b.recv, c.op),
    fill=_allreduce_fill,
    verify=_allreduce_verify,
    in_place_ok=True,
)


# ---------------------------------------------------------------- reduce
def _reduce_verify(b: Buffers, c: Context, it: int) -> int:
    return _mismatches(b.recv, _reduction_result(c.nranks, c.op)) if c.rank == c.root else 0


REDUCE = Collective(
    name="reduce",
    summary="MPI_Reduce / reduce: the root ends with the reduction of all buffers",
    reduces=True,
    default_dtype="float32",
    buffer_counts=lambda count, n: (count, count),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: 1.0,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.reduce(None if c.in_place else b.send, b.recv, c.op, c.root),
    fill=_allreduce_fill,
    verify=_reduce_verify,
    in_place_ok=True,
    rooted=True,
)


# ---------------------------------------------------------------- allgather
def _allgather_fill(b: Buffers, c: Context, it: int) -> None:
    block = b.recv.size // c.nranks
    b.recv[...] = POISON
    mine = _data(c.rank, it, block)
    if c.in_place:
        b.recv[c.rank * block:(c.rank + 1) * block] = mine
    else:
        b.send[...] = mine


def _allgather_verify(b: Buffers, c: Context, it: int) -> int:
    block = b.recv.size // c.nranks
    expected = np.concatenate([_data(src, it, block) for src in range(c.nranks)])
    return _mismatches(b.recv, expected)


ALLGATHER = Collective(
    name="allgather",
    summary="MPI_Allgather / all_gather: every rank ends with every rank's block",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count * n),
    in_place_counts=lambda count, n: (0, count * n),
    busbw_factor=lambda n: (n - 1) / n,
    algbw_bytes=lambda size, n: size * n,
    build=lambda be, b, c: be.allgather(None if c.in_place else b.send, b.recv),
    fill=_allgather_fill,
    verify=_allgather_verify,
    in_place_ok=True,
)


# ---------------------------------------------------------------- reduce_scatter
def _reduce_scatter_fill(b: Buffers, c: Context, it: int) -> None:
    target = b.recv if c.in_place else b.send
    target[...] = _reduction_input(c.rank, c.nranks, it, target.size, c.op)
    if not c.in_place:
        b.recv[...] = POISON


def _reduce_scatter_verify(b: Buffers, c: Context, it: int) -> int:
    # In place, MPI_Reduce_scatter_block leaves the result in the first block; NCCL/torch at the rank's block.
    if not c.in_place:
        return _mismatches(b.recv, _reduction_result(c.nranks, c.op))
    block = b.recv.size // c.nranks
    start = c.rank * block if c.result_at_rank else 0
    return _mismatches(b.recv[start:start + block], _reduction_result(c.nranks, c.op))


REDUCE_SCATTER = Collective(
    name="reduce_scatter",
    summary="MPI_Reduce_scatter_block / reduce_scatter: each rank ends with one n-th of the reduction",
    reduces=True,
    default_dtype="float32",
    buffer_counts=lambda count, n: (count, count // n),
    in_place_counts=lambda count, n: (0, count),
    busbw_factor=lambda n: (n - 1) / n,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.reduce_scatter(None if c.in_place else b.send, b.recv, c.op),
    fill=_reduce_scatter_fill,
    verify=_reduce_scatter_verify,
    in_place_ok=True,
    count_multiple=lambda n: n,
)


# ---------------------------------------------------------------- broadcast
def _broadcast_fill(b: Buffers, c: Context, it: int) -> None:
    if c.rank == c.root:
        b.send[...] = _data(c.root, it, b.send.size)
    else:
        b.send[...] = POISON


def _broadcast_verify(b: Buffers, c: Context, it: int) -> int:
    return 0 if c.rank == c.root else _mismatches(b.send, _data(c.root, it, b.send.size))


BROADCAST = Collective(
    name="broadcast",
    summary="MPI_Bcast / broadcast: the root's buffer reaches every rank",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count, 0),
    busbw_factor=lambda n: 1.0,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.broadcast(b.send, c.root),
    fill=_broadcast_fill,
    verify=_broadcast_verify,
    io_counts=lambda count, n: (count, count),
    rooted=True,
)


# ---------------------------------------------------------------- alltoall
def _alltoall_fill(b: Buffers, c: Context, it: int) -> None:
    block = b.send.size // c.nranks
    b.send[...] = np.concatenate([_data(c.rank, it, block, salt=dst) for dst in range(c.nranks)])
    b.recv[...] = POISON


def _alltoall_verify(b: Buffers, c: Context, it: int) -> int:
    block = b.recv.size // c.nranks
    expected = np.concatenate([_data(src, it, block, salt=c.rank) for src in range(c.nranks)])
    return _mismatches(b.recv, expected)


ALLTOALL = Collective(
    name="alltoall",
    summary="MPI_Alltoall / all_to_all: each rank sends a distinct block to every rank",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count * n, count * n),
    busbw_factor=lambda n: (n - 1) / n,
    algbw_bytes=lambda size, n: size * n,
    build=lambda be, b, c: be.alltoall(b.send, b.recv),
    fill=_alltoall_fill,
    verify=_alltoall_verify,
)


# ---------------------------------------------------------------- point to point
def _p2p_fill(b: Buffers, c: Context, it: int) -> None:
    if c.peer is None:
        return
    b.send[...] = _data(c.rank, it, b.send.size)
    b.recv[...] = POISON


def _p2p_verify(b: Buffers, c: Context, it: int) -> int:
    if c.peer is None:
        return 0
    return _mismatches(b.recv, _data(c.peer, it, b.recv.size))


def _stream_verify(b: Buffers, c: Context, it: int) -> int:
    # Only the receiving side of a one-way stream holds data to check.
    return 0 if c.initiator else _p2p_verify(b, c, it)


LATENCY = Collective(
    name="latency",
    summary="ping-pong (osu_latency): half the round trip of a blocking send/recv between rank pairs",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.pingpong(b.send, b.recv, c.peer, c.initiator),
    fill=_p2p_fill,
    verify=_p2p_verify,
    point_to_point=True,
    min_ranks=2,
    per_iteration=lambda window: 2,
)

BW = Collective(
    name="bw",
    summary="windowed unidirectional bandwidth (osu_bw): a window of non-blocking sends, then an ack",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0,
    algbw_bytes=lambda size, n: size,
    build=lambda be, b, c: be.stream(b.send, b.recv, b.ack, c.peer, c.initiator, c.window, False),
    fill=_p2p_fill,
    verify=_stream_verify,
    point_to_point=True,
    min_ranks=2,
    per_iteration=lambda window: window,
)

BIBW = Collective(
    name="bibw",
    summary="windowed bidirectional bandwidth (osu_bibw): both ranks of a pair send a window at once",
    reduces=False,
    default_dtype="uint8",
    buffer_counts=lambda count, n: (count, count),
    busbw_factor=lambda n: 1.0,
    algbw_bytes=lambda size, n: 2 * size,
    build=lambda be, b, c: be.stream(b.send, b.recv, b.ack, c.peer, c.initiator, c.window, True),
    fill=_p2p_fill,
    verify=_p2p_verify,
    point_to_point=True,
    min_ranks=2,
    per_iteration=lambda window: window,
)

COLLECTIVES: dict[str, Collective] = {
    c.name: c for c in (ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, LATENCY, BW, REDUCE, ALLTOALL, BIBW)
}

#: What ``microbench run`` with no benchmark list runs (the six core benchmarks).
DEFAULT_BENCHMARKS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw")


def benchmark_key(name: str, also: tuple[str, ...] = ()) -> str:
    """A benchmark's canonical name (case, '-' and '_' do not matter); ``also``: further names accepted.

    An unknown name is a usage error listing the choices."""
    key = name.lower().replace("-", "_")
    if key not in COLLECTIVES and key not in also:
        raise UsageError(f"unknown benchmark {name!r}: choose from {', '.join([*COLLECTIVES, *also])}")
    return key


def get_collective(name: str) -> Collective:
    """Look up a benchmark by name; an unknown name is a usage error listing the choices."""
    return COLLECTIVES[benchmark_key(name)]


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

"""What ``--check`` writes before a checked iteration and expects after it, per benchmark.

Every function takes the iteration's buffers (host numpy views), the rank's context and the iteration
number, so that each iteration moves different data. Values stay within 1..62 (data) or 1..n+1 (sums),
so every dtype from int8 to float64 holds them exactly; ``check_max_value`` gives the largest one, which
``preflight`` compares with the dtype's exact range. Receive buffers are poisoned with ``POISON`` (0,
never valid data) so that a call that writes nothing is caught.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - numpy is imported where the data is made (the --np parent never does)
    import numpy as np

    from microbench.benchmarks.base import Buffers, Context

#: Poison written into receive buffers before a checked iteration; valid data is never 0.
POISON = 0


def data(src: int, it: int, n: int, offset: int = 0, salt: int = 0) -> np.ndarray:
    """The n values rank ``src`` sends in iteration ``it`` (``salt``: its destination, for alltoall)."""
    import numpy as np

    idx = np.arange(offset, offset + n, dtype=np.int64)
    return (src * 7 + salt * 13 + it * 3 + idx) % 61 + 1


def reduction_input(rank: int, nranks: int, it: int, count: int, op: str) -> np.ndarray:
    """A reduction's input on ``rank``: 1 or 2 per element, so that sum, max and min results are known."""
    import numpy as np

    idx = np.arange(count, dtype=np.int64)
    mine = (idx % nranks) == ((rank + it) % nranks)
    return (2 - mine) if op == "min" else (1 + mine)


def reduction_result(nranks: int, op: str) -> int:
    """Every element of a reduction of ``reduction_input`` over ``nranks`` ranks."""
    return {"sum": nranks + 1, "max": 2, "min": 1}[op]


def check_max_value(reduces: bool, op: str, nranks: int) -> int:
    """Largest value a checked iteration writes (the dtype must hold it exactly)."""
    if reduces:
        return nranks + 1 if op == "sum" else 2
    return 62


def mismatches(got: np.ndarray, expected) -> int:
    """Elements of ``got`` that differ from ``expected``."""
    import numpy as np

    return int(np.count_nonzero(got != expected))


# ------------------------------------------------------------------------- reductions
def reduction_fill(b: Buffers, c: Context, it: int) -> None:
    """allreduce, reduce, reduce_scatter: the input (in the receive buffer when in place), poisoned output."""
    target = b.recv if c.in_place else b.send
    target[...] = reduction_input(c.rank, c.nranks, it, target.size, c.op)
    if not c.in_place:
        b.recv[...] = POISON


def allreduce_verify(b: Buffers, c: Context, it: int) -> int:
    return mismatches(b.recv, reduction_result(c.nranks, c.op))


def reduce_verify(b: Buffers, c: Context, it: int) -> int:
    return mismatches(b.recv, reduction_result(c.nranks, c.op)) if c.rank == c.root else 0


def reduce_scatter_verify(b: Buffers, c: Context, it: int) -> int:
    """Out of place: the whole output. In place: MPI leaves the result in the first block, NCCL and torch
    at the rank's own block (``Context.result_at_rank``)."""
    if not c.in_place:
        return mismatches(b.recv, reduction_result(c.nranks, c.op))
    block = b.recv.size // c.nranks
    start = c.rank * block if c.result_at_rank else 0
    return mismatches(b.recv[start:start + block], reduction_result(c.nranks, c.op))


# ------------------------------------------------------------------------- data movement
def allgather_fill(b: Buffers, c: Context, it: int) -> None:
    block = b.recv.size // c.nranks
    b.recv[...] = POISON
    mine = data(c.rank, it, block)
    if c.in_place:
        b.recv[c.rank * block:(c.rank + 1) * block] = mine
    else:
        b.send[...] = mine


def allgather_verify(b: Buffers, c: Context, it: int) -> int:
    import numpy as np

    block = b.recv.size // c.nranks
    return mismatches(b.recv, np.concatenate([data(src, it, block) for src in range(c.nranks)]))


def broadcast_fill(b: Buffers, c: Context, it: int) -> None:
    b.send[...] = data(c.root, it, b.send.size) if c.rank == c.root else POISON


def broadcast_verify(b: Buffers, c: Context, it: int) -> int:
    return 0 if c.rank == c.root else mismatches(b.send, data(c.root, it, b.send.size))


def alltoall_fill(b: Buffers, c: Context, it: int) -> None:
    import numpy as np

    block = b.send.size // c.nranks
    b.send[...] = np.concatenate([data(c.rank, it, block, salt=dst) for dst in range(c.nranks)])
    b.recv[...] = POISON


def alltoall_verify(b: Buffers, c: Context, it: int) -> int:
    import numpy as np

    block = b.recv.size // c.nranks
    return mismatches(b.recv, np.concatenate([data(src, it, block, salt=c.rank) for src in range(c.nranks)]))


# ------------------------------------------------------------------------- point to point
def p2p_fill(b: Buffers, c: Context, it: int) -> None:
    if c.peer is None:
        return
    b.send[...] = data(c.rank, it, b.send.size)
    b.recv[...] = POISON


def p2p_verify(b: Buffers, c: Context, it: int) -> int:
    return 0 if c.peer is None else mismatches(b.recv, data(c.peer, it, b.recv.size))


def stream_verify(b: Buffers, c: Context, it: int) -> int:
    """Only the receiving side of a one-way stream holds data to check."""
    return 0 if c.initiator else p2p_verify(b, c, it)


# ------------------------------------------------------------------------- all-to-all-v (issue 42)
def alltoallv_fill(b: Buffers, c: Context, it: int, matrix: np.ndarray) -> None:
    """Each rank's block for peer j is ``matrix[rank, j]`` values salted with j, back to back; receive poisoned."""
    import numpy as np

    row = matrix[c.rank]
    b.send[:int(row.sum())] = np.concatenate([data(c.rank, it, int(k), salt=dst) for dst, k in enumerate(row)])
    b.recv[...] = POISON


def alltoallv_verify(b: Buffers, c: Context, it: int, matrix: np.ndarray) -> int:
    """The blocks of every source in rank order, and the rest of the receive buffer left poisoned."""
    import numpy as np

    column = matrix[:, c.rank]
    total = int(column.sum())
    expected = np.concatenate([data(src, it, int(k), salt=c.rank) for src, k in enumerate(column)])
    return mismatches(b.recv[:total], expected) + mismatches(b.recv[total:], POISON)

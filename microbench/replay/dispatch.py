"""How the replay issues a call: through the benchmark table's entry and the backend's primitive, nothing else.

A call (collective, group kind, bytes, overlapped) is the table's entry for its collective
(``benchmarks.workload_sizes.BENCHMARK_FOR``), or that entry's non-blocking twin (``table.posted_twin``) when the
schedule overlaps it. The entry's ``build`` makes it from the backend's primitives on the group's communicator (an
MPI sub-communicator, a torch process group), with buffers sized as the entry says for the group's n ranks:
``bytes`` is the message size of docs/definitions.md, ``count`` = bytes / the entry's element size (its
``default_dtype``: float32 for reductions, uint8 otherwise), at least one and a multiple of what the entry needs;
in place where the backend's API is in place only (torch's all_reduce and reduce); rooted calls root at the
group's first rank, reductions sum.

The pipeline's send is no benchmark: a stage sends to the next stage and receives from the previous one in forward,
the other way in backward, as one ``shift``, the backends' point-to-point primitive beside ping-pong and stream.
Its recv twin is that shift's receive side and issues nothing.

Each distinct call is prepared once, before anything is timed: what the timed loops call is pre-bound.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from microbench.benchmarks.base import Buffers, Context
from microbench.benchmarks.dtypes import DTYPES
from microbench.benchmarks.table import COLLECTIVES, Collective, posted_twin
from microbench.benchmarks.workload_sizes import BENCHMARK_FOR
from microbench.errors import UsageError
from microbench.measure.backends.nonblocking import NonBlocking
from microbench.replay.pool import PoolSize, pool_size
from microbench.replay.schedule import RECEIVE_TWINS, Call

SHIFT = "shift"  #: the backends' primitive a pipeline send is issued with
BYTE = DTYPES["uint8"]  #: what a shift moves


@dataclass(frozen=True)
class Issued:
    """One call as this rank issues it: the entry it goes through, its communicator's size, what it sends and
    receives per rank (bytes, the operation's input and output as ``run`` records them), whether in place, and the
    pre-bound call (blocking: one complete call; posted: a ``NonBlocking``, whose call is post then wait)."""

    entry: str  #: the benchmark table's entry (allreduce, iallreduce, ...), or ``SHIFT``
    group_ranks: int
    send_bytes: int
    recv_bytes: int
    in_place: bool
    buffers: Buffers  #: the pool's views the call moves (send side, receive side)
    call: Callable[[], Any]

    @property
    def posted(self) -> bool:
        return isinstance(self.call, NonBlocking)


def entry_for(call: Call) -> Collective:
    """The table's entry that issues ``call``: its benchmark, or that benchmark's non-blocking twin when posted."""
    try:
        blocking = COLLECTIVES[BENCHMARK_FOR[call.collective]]
        return posted_twin(blocking) if call.overlapped else blocking
    except KeyError:
        how = "posted non-blocking" if call.overlapped else "blocking"
        raise UsageError(f"cannot replay {call.collective} {how}: the benchmark table has no entry for it") from None


class _ThroughTheTable:
    """A collective: its entry's buffers and ``build`` on the backend of its group."""

    @staticmethod
    def _count(entry: Collective, nbytes: int, n: int) -> int:
        """Elements of a message of ``nbytes`` (at least one, a multiple of what the entry needs on n ranks)."""
        multiple = entry.count_multiple(n)
        return max(nbytes // DTYPES[entry.default_dtype].itemsize // multiple, 1) * multiple

    def _counts(self, entry: Collective, nbytes: int, backend) -> tuple[int, int, bool]:
        """(send, receive) buffer elements, and whether in place (the backend's API is in place only)."""
        count, in_place = self._count(entry, nbytes, backend.size), entry.primitive in backend.in_place_only
        send, recv = (entry.in_place_counts if in_place else entry.buffer_counts)(count, backend.size)
        return send, recv, in_place

    def sides(self, call: Call, backend) -> tuple[int, int]:
        entry = entry_for(call)
        send, recv, _ = self._counts(entry, call.bytes, backend)
        size = DTYPES[entry.default_dtype].itemsize
        return send * size, recv * size

    def prepare(self, call: Call, backend, pool) -> Issued:
        entry = entry_for(call)
        dtype = DTYPES[entry.default_dtype]
        send, recv, in_place = self._counts(entry, call.bytes, backend)
        buffers = pool.buffers(send, recv, dtype)
        built = entry.build(backend, buffers, Context(rank=backend.rank, nranks=backend.size, in_place=in_place))
        io_send, io_recv = (entry.io_counts or entry.buffer_counts)(self._count(entry, call.bytes, backend.size),
                                                                   backend.size)
        return Issued(entry.name, backend.size, io_send * dtype.itemsize, io_recv * dtype.itemsize, in_place,
                      buffers, built)


class _PipelineShift:
    """A pipeline send: one shift along the pipeline group (forward: to the next stage; backward: the previous)."""

    def sides(self, call: Call, backend) -> tuple[int, int]:
        return max(call.bytes, 1), max(call.bytes, 1)

    def prepare(self, call: Call, backend, pool) -> Issued:
        stage, stages = backend.rank, backend.size
        after = stage + 1 if stage + 1 < stages else None
        before = stage - 1 if stage > 0 else None
        dest, source = (before, after) if call.phase == "backward" else (after, before)
        count = max(call.bytes, 1)
        buffers = pool.buffers(count, count, BYTE)
        return Issued(SHIFT, stages, count, count, False, buffers,
                      backend.shift(buffers.send, buffers.recv, dest, source))


class _ReceiveTwin:
    """A pipeline recv: the receive side of its send's shift; issues nothing."""

    def sides(self, call: Call, backend) -> tuple[int, int]:
        return 0, 0

    def prepare(self, call: Call, backend, pool) -> None:
        return None


#: workload collectives the replay issues otherwise than through their benchmark (``BENCHMARK_FOR`` maps send and
#: recv to latency, a ping-pong; a pipeline stage shifts); every other collective goes through the table
PIPELINE = {"send": _PipelineShift(), **dict.fromkeys(RECEIVE_TWINS, _ReceiveTwin())}
_TABLE = _ThroughTheTable()


def _how(call: Call):
    return PIPELINE.get(call.collective, _TABLE)


def _settled(built: Callable[[], Any], settle: Callable[[], None]) -> Callable[[], Any]:
    """``built`` followed by ``settle`` (a blocking call after it returns; a posted one after its wait)."""
    if isinstance(built, NonBlocking):
        wait = built.wait
        return NonBlocking(built.post, built.test, lambda handle: (wait(handle), settle()))
    return lambda: (built(), settle())


class Dispatcher:
    """This rank's calls on its groups, and the pool they share.

    ``on`` maps a group kind to the backend's primitives on that group's communicator; the pool (``make_pool``, from
    its ``pool.PoolSize``) holds the buffers of every call of ``calls``; ``settle`` (None, or on CUDA a wait for the
    current stream) runs after each call completes, so that a call's time includes its completion. Calling the dispatcher prepares a
    call once and returns the same ``Issued`` for it afterwards."""

    def __init__(self, on: dict[str, Any], calls: Iterable[Call], make_pool: Callable[[PoolSize], Any],
                 settle: Callable[[], None] | None = None):
        self.on, self.settle = on, settle
        self.pool = make_pool(pool_size(self.sides(call) for call in set(calls)))
        self._prepared: dict[Call, Issued | None] = {}

    def sides(self, call: Call) -> tuple[int, int]:
        """The send and receive buffers ``call`` needs on this rank (bytes), as its entry sizes them."""
        return _how(call).sides(call, self.on[call.group])

    def __call__(self, call: Call) -> Issued | None:
        """``call`` prepared on its group's backend and the pool (None: a recv twin, which issues nothing)."""
        if call not in self._prepared:
            issued = _how(call).prepare(call, self.on[call.group], self.pool)
            if issued is not None and self.settle is not None:
                issued = dataclasses.replace(issued, call=_settled(issued.call, self.settle))
            self._prepared[call] = issued
        return self._prepared[call]

    def close(self) -> None:
        self.pool.close()
        self._prepared.clear()

"""One size measured on a pool of buffers: the sequence the sweep, the pairwise link test and bisection share.

calls on the pool (the run's communicator, or a sub-communicator) -> the test hooks (a slowed rank, a hook at
this benchmark and size) -> the host copies of device buffers -> ``engine.measure``. A change to how a size is
measured is made here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from microbench.benchmarks.table import Collective, Context
from microbench.measure import engine

if TYPE_CHECKING:  # pragma: no cover
    from microbench.run.context import RunContext


@dataclass
class PoolMeasurement:
    """What one size measured, and what measured it."""

    measurement: engine.Measurement
    backend: Any  #: the primitives the calls were built from
    loop: Any  #: the timed loop (with the test hooks' slowing, if any)
    calls: list[Callable]
    copies: dict  #: the pool's host copies (``push``/``pull``) for device buffers, else empty


def measure_on_pool(rc: RunContext, coll: Collective, ctx: Context, pool, size_bytes: int,
                    settings: engine.LoopSettings, *, agree_max: Callable[[float], float], timing: bool,
                    comm=None) -> PoolMeasurement:
    """Build ``coll``'s calls on ``pool`` (on ``comm`` when given) and measure them with ``engine.measure``.

    ``size_bytes``: the message size the pool holds (the test hooks fire by it); ``agree_max`` takes the largest
    of a value over the ranks that measure together; ``timing``: this rank's samples enter the statistics."""
    calls, backend, loop = rc.transport.calls(coll, ctx, pool, comm)
    loop = rc.hooks.slowed(rc.rank, loop)  # MICROBENCH_TEST_SLOW_RANK (tests only)
    hooks = rc.hooks.at(rc.rank, coll.name, size_bytes)
    hooks.at_start(f"rank {rc.rank} at {coll.name} {size_bytes} B")
    copies = {"push": pool.push, "pull": pool.pull} if pool.copies else {}
    m = engine.measure(coll, ctx, pool.slots, calls, loop, settings, backend.barrier(), agree_max, timing,
                       hooks=hooks, **copies)
    return PoolMeasurement(m, backend, loop, calls, copies)

"""Messages: one collective call of one size in a group, how often it runs, and its wire volume.

``bytes`` is the message size as the rest of microbench defines it: allreduce, broadcast, reduce,
send, recv the buffer; allgather each rank's contribution; reduce_scatter each rank's input;
alltoall each rank's block to each peer; alltoallv what the busiest rank sends in all (its ``splits`` name the
pattern, as ``run alltoallv --splits`` measures it). ``count`` is calls per iteration (per training run for the
``setup`` phase).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "alltoallv", "send",
               "recv")

#: Phases in the order they are listed; ``setup`` happens once per training run.
PHASES = ("setup", "forward", "embedding", "recompute", "backward", "backward_regather", "lm_head", "loss",
          "gradients", "expert_gradients", "optimizer", "trace")

#: How each factor below is stated to the reader.
WIRE_RULES = (
    "wire volume per rank of one call of message size B in a group of n: allreduce 2B(n-1)/n; "
    "allgather B(n-1) (the gathered n*B moves (n-1)/n); reduce_scatter, reduce and broadcast B(n-1)/n; "
    "alltoall B(n-1) (the n*B buffer moves (n-1)/n); alltoallv what a rank sends to the other ranks, the mean over "
    "the group (B(n-1)/n for a uniform split, the split's own share otherwise); send B; recv 0 (the same bytes as "
    "its send)"
)


@dataclass(frozen=True)
class Message:
    """A collective call of one size, in one group, in one phase, ``count`` times."""

    collective: str
    bytes: int
    count: float
    group_size: int | None
    phase: str
    # ---- issue 42: all-to-all-v
    splits: str | None = None  #: an alltoallv's split pattern (``benchmarks.splits`` canonical text)
    wire: Fraction | None = None  #: bytes one rank sends to other ranks per call, the mean over the group (alltoallv)
    dimension: str | None = None  #: the parallel dimension whose group runs it (tp, cp, ep, etp, dp, edp, pp), where
    #: a scheme has more groups than the size tells apart

    def as_json(self) -> dict:
        count = int(self.count) if float(self.count).is_integer() else round(float(self.count), 6)
        out = {"collective": self.collective, "bytes": self.bytes, "count": count,
               "group_size": self.group_size, "phase": self.phase}
        if self.splits is not None:
            out["splits"] = self.splits
        if self.dimension is not None:
            out["dimension"] = self.dimension
        return out


def message_wire(m: Message) -> Fraction:
    """Bytes one rank moves in one call of ``m``: its own ``wire`` where the split sets it, else the factor."""
    return m.wire if m.wire is not None else wire_bytes(m.collective, m.bytes, m.group_size)


def wire_bytes(collective: str, nbytes: int, group_size: int) -> Fraction:
    """Bytes one rank moves in one call (the factors of Anthony et al., see ``WIRE_RULES``; an alltoallv of a
    uniform split)."""
    n = group_size
    if collective == "alltoallv":
        return Fraction(nbytes * (n - 1), n)
    if collective == "allreduce":
        return Fraction(2 * nbytes * (n - 1), n)
    if collective in ("allgather", "alltoall"):
        return Fraction(nbytes * (n - 1))
    if collective in ("reduce_scatter", "reduce", "broadcast"):
        return Fraction(nbytes * (n - 1), n)
    if collective == "send":
        return Fraction(nbytes)
    if collective == "recv":
        return Fraction(0)
    raise ValueError(f"unknown collective {collective!r}")


def total_wire(messages: Iterable[Message], phases: Iterable[str] | None = None) -> Fraction:
    """Wire bytes per rank of all messages (of the given phases), counts included."""
    wanted = None if phases is None else set(phases)
    return sum((message_wire(m) * Fraction(m.count) for m in messages if wanted is None or m.phase in wanted),
               Fraction(0))


def merge(messages: Iterable[Message]) -> list[Message]:
    """Sum the counts of identical (collective, bytes, group, phase, splits) messages; list them in phase order."""
    counts: dict[tuple, float] = {}
    for m in messages:
        if m.count:
            key = (m.phase, m.collective, m.bytes, m.group_size, m.splits, m.wire, m.dimension)
            counts[key] = counts.get(key, 0) + m.count
    order = {p: i for i, p in enumerate(PHASES)}
    keys = sorted(counts, key=lambda k: (order.get(k[0], len(order)), k[0], COLLECTIVES.index(k[1]), k[2],
                                         k[3] or 0, k[4] or "", k[5] or 0, k[6] or ""))
    return [Message(c, b, counts[(ph, c, b, g, sp, wi, dim)], g, ph, sp, wi, dim) for ph, c, b, g, sp, wi, dim in keys]

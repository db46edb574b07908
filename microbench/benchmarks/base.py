"""The types every benchmark is built from: the call context, the buffers of one iteration, OMB's iteration counts.

A leaf: the table (``table.py``), its check data (``checkdata.py``) and the buffer code all import from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - numpy is imported by what makes the arrays
    import numpy as np


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
class Counts:
    """OMB's default (iterations, warmup) for messages up to ``LARGE_MESSAGE_BYTES`` and above."""

    small: tuple[int, int]
    large: tuple[int, int]

    def at(self, size_bytes: int) -> tuple[int, int]:
        return self.large if size_bytes > LARGE_MESSAGE_BYTES else self.small


LARGE_MESSAGE_BYTES = 8192  #: above this size the smaller "large" iteration counts apply (as OMB)


LATENCY_COUNTS = Counts((10000, 100), (1000, 10))  #: osu_latency


STREAM_COUNTS = Counts((100, 10), (20, 2))  #: osu_bw, osu_bibw


COLLECTIVE_COUNTS = Counts((1000, 100), (100, 10))  #: OMB's collectives

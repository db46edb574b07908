"""The replay's one buffer pool: every call's send data at its start, its receive data at the receive offset.

Sized from the calls' buffers as the benchmark table sizes them (``dispatch.Dispatcher.sides``): the largest send
buffer rounded up to ``POOL_ALIGN`` (the receive offset, so that views of any element type there are aligned), plus
the largest receive buffer. Written in full by its owner before anything is timed. Calls in flight share it; their
contents are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from microbench.benchmarks.base import Buffers
from microbench.benchmarks.dtypes import DType
from microbench.errors import RunError
from microbench.measure.buffers import HostRegion

POOL_ALIGN = 64  #: bytes; the receive side starts on this boundary


@dataclass(frozen=True)
class PoolSize:
    """Where the receive side starts and the whole pool's length (bytes)."""

    receive_offset: int
    total: int


def pool_size(sides: Iterable[tuple[int, int]]) -> PoolSize:
    """The pool for calls whose (send, receive) buffers per rank are ``sides`` (bytes)."""
    sides = list(sides)
    send = max((s for s, _ in sides), default=0)
    receive = max((r for _, r in sides), default=0)
    offset = -(-max(send, 4) // POOL_ALIGN) * POOL_ALIGN
    return PoolSize(offset, offset + max(receive, 4))


class HostPool:
    """The pool in host memory (``measure.buffers.HostRegion``), numpy views: MPI's buffers."""

    def __init__(self, size: PoolSize):
        self.size = size
        self.region = HostRegion(size.total)
        self.region.bytes[:] = 1  # written in full by its owner before anything is timed

    def buffers(self, send: int, receive: int, dtype: DType) -> Buffers:
        """``send`` elements at the start and ``receive`` at the receive offset (None for 0 elements)."""
        view = self.region.view
        return Buffers(view(0, send, dtype.numpy) if send else None,
                       view(self.size.receive_offset, receive, dtype.numpy) if receive else None)

    def close(self) -> None:
        self.region.close()


class TensorPool:
    """The pool as one uint8 torch tensor on the CPU or this rank's GPU: torch.distributed's buffers."""

    def __init__(self, size: PoolSize, torch, device):
        self.size, self.torch = size, torch
        try:
            self.tensor = torch.ones(size.total, dtype=torch.uint8, device=device)
        except RuntimeError as exc:  # out of memory on the device or the host
            raise RunError(f"cannot allocate the replay's buffer pool of {size.total} B on {device}: {exc}") from None

    def buffers(self, send: int, receive: int, dtype: DType) -> Buffers:
        """``send`` elements at the start and ``receive`` at the receive offset (None for 0 elements)."""
        from microbench.measure.backends.torch_dist import torch_dtype

        kind, size = torch_dtype(self.torch, dtype.name), dtype.itemsize

        def view(offset: int, count: int):
            return self.tensor[offset: offset + count * size].view(kind) if count else None

        return Buffers(view(0, send), view(self.size.receive_offset, receive))

    def close(self) -> None:
        self.tensor = None

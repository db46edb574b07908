"""Host buffers: page-aligned anonymous mappings with a chosen huge-page policy, written by their owner.

Why not ``np.empty``: numpy asks the kernel for transparent huge pages on arrays of 4 MiB and more, and
``np.zeros`` that are never written map the shared zero page. Both flatter large messages (up to 2x
against a C benchmark). Here every buffer is an ``mmap`` whose huge-page advice is explicit:

- ``system`` (default): no advice; the kernel's THP mode decides, exactly as for a C benchmark's
  ``malloc`` on the same machine (with THP in ``madvise`` mode that means 4 KiB pages);
- ``on``: ``MADV_HUGEPAGE`` (what numpy itself would do for large arrays);
- ``off``: ``MADV_NOHUGEPAGE`` (4 KiB pages even when THP is ``always``).

Every buffer is written in full by the rank that owns it before anything is timed.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from microbench.benchmarks.base import Buffers

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

HUGE_PAGE_POLICIES = ("system", "on", "off")
CACHE_LINE = 64


class HostRegion:
    """One anonymous, page-aligned mapping with the huge-page advice applied."""

    def __init__(self, nbytes: int, policy: str = "system"):
        import numpy as np

        if policy not in HUGE_PAGE_POLICIES:
            raise ValueError(f"unknown huge-page policy {policy!r}")
        self.nbytes = max(int(nbytes), 1)
        self.policy = policy
        self._map = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if policy == "on" and hasattr(mmap, "MADV_HUGEPAGE"):
            self._map.madvise(mmap.MADV_HUGEPAGE)
        elif policy == "off" and hasattr(mmap, "MADV_NOHUGEPAGE"):
            self._map.madvise(mmap.MADV_NOHUGEPAGE)
        self.bytes = np.frombuffer(self._map, dtype=np.uint8)

    @property
    def address(self) -> int:
        return self.bytes.ctypes.data

    def view(self, offset: int, count: int, dtype: np.dtype) -> np.ndarray:
        """``count`` elements of ``dtype`` starting ``offset`` bytes into the region."""
        return self.bytes[offset:offset + count * dtype.itemsize].view(dtype)

    def close(self) -> None:
        self.bytes = None
        try:
            self._map.close()
        except BufferError:  # a view is still referenced somewhere; the GC will unmap it
            pass


def huge_page_bytes(addresses: list[int], smaps: Iterable[str] | None = None) -> int | None:
    """Bytes backed by transparent huge pages in the mappings holding ``addresses`` (``smaps``: the lines of
    /proc/self/smaps, read here when not given); None when no mapping holds any of them.

    Each mapping counts once: the kernel may merge adjacent anonymous mappings (a pool's send and receive
    regions) into one, whose AnonHugePages then covers both."""
    if smaps is None:
        try:
            with open("/proc/self/smaps") as f:
                smaps = f.readlines()
        except OSError:
            return None
    found: dict[tuple[int, int], int] = {}
    current = None
    for line in smaps:
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            current = (lo, hi) if any(lo <= a < hi for a in addresses) else None
        elif current is not None and line.startswith("AnonHugePages:"):
            found[current] = int(line.split()[1]) * 1024
    return sum(found.values()) if found else None


def slot_stride(nbytes: int) -> int:
    """Distance between pool slots: the message rounded up to a cache line, plus one line (as IMB)."""
    if nbytes == 0:
        return 0
    return -(-nbytes // CACHE_LINE) * CACHE_LINE + CACHE_LINE


@dataclass
class BufferPool:
    """Send/receive buffers for ``nslots`` slots (1 slot: warm cache; more: a rotation pool)."""

    send_count: int
    recv_count: int
    dtype: np.dtype
    nslots: int = 1
    policy: str = "system"
    ack_count: int = 0

    def __post_init__(self) -> None:
        item = self.dtype.itemsize
        send_bytes, recv_bytes = self.send_count * item, self.recv_count * item
        self.send_stride = slot_stride(send_bytes) if self.nslots > 1 else send_bytes
        self.recv_stride = slot_stride(recv_bytes) if self.nslots > 1 else recv_bytes
        self._send = HostRegion(self.send_stride * self.nslots, self.policy) if send_bytes else None
        self._recv = HostRegion(self.recv_stride * self.nslots, self.policy) if recv_bytes else None
        self._ack = HostRegion(max(self.ack_count, 1) * item, self.policy) if self.ack_count else None
        ack = self._ack.view(0, self.ack_count, self.dtype) if self._ack else None
        self.slots = [
            Buffers(
                send=self._send.view(i * self.send_stride, self.send_count, self.dtype) if self._send else None,
                recv=self._recv.view(i * self.recv_stride, self.recv_count, self.dtype) if self._recv else None,
                ack=ack,
            )
            for i in range(self.nslots)
        ]
        self.first_touch()

    @property
    def nbytes(self) -> int:
        """Bytes mapped by this pool on this rank."""
        return sum(r.nbytes for r in (self._send, self._recv, self._ack) if r is not None)

    def first_touch(self) -> None:
        """Write every page of every buffer from this rank (so none maps the shared zero page)."""
        for region in (self._send, self._recv, self._ack):
            if region is not None:
                region.bytes[...] = 1

    def huge_page_bytes(self) -> int | None:
        """Bytes of this pool's buffers backed by huge pages, as the kernel reports them."""
        regions = [r for r in (self._send, self._recv) if r is not None and r.nbytes >= (2 << 20)]
        if not regions:
            return 0
        hp = huge_page_bytes([r.address for r in regions])
        # a merged mapping may reach beyond this pool: never report more than the pool holds
        return min(hp, sum(r.nbytes for r in regions)) if hp is not None else 0

    def close(self) -> None:
        self.slots = []
        for region in (self._send, self._recv, self._ack):
            if region is not None:
                region.close()



"""Cache modes: the last-level cache size, the cold-cache rotation pool, and the flush buffer.

warm: the same buffers every iteration.
cold: iteration i uses pool slot (first + i) mod slots, so no iteration finds its buffers in the CPU
last-level cache (the GPU L2 for device buffers). As IMB's -off_cache, slots are spaced by the message
rounded up to cache lines plus one line. The pool is sized so that the cache lines touched in one trip
round it are at least twice the cache; when the iterations never wrap round (fewer uses than slots), a
flush of twice the cache before the timed loop stands in. ``--max-memory`` bounds the pool; a bounded pool
that cannot evict is recorded (``cache_evicts`` false) and noted.
--flush additionally writes a buffer of twice the cache size, one byte per line, before every iteration,
outside the timed region.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from microbench.measure.buffers import CACHE_LINE, HostRegion, slot_stride
from microbench.options import RunOptions

CACHE_MODES = ("warm", "cold", "both")


def _parse_sysfs_size(text: str) -> int:
    text = text.strip().upper()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the highest-level data or unified CPU cache of cpu0, from sysfs (None if unknown).

    Every index's ``level`` is read, then ``type`` and ``size`` of the highest levels only, each file with one
    open and one read (no buffered text layer): every rank of a launch asks, and each call is one for the
    file system (docs/startup.md)."""
    try:
        indexes = sorted(e for e in os.listdir(root) if e.startswith("index"))
    except OSError:
        return None
    levels = []
    for index in indexes:
        try:
            levels.append((int(_read_small(f"{root}/{index}/level")), index))
        except (OSError, ValueError):
            continue
    for level, index in sorted(levels, reverse=True):
        try:
            if _read_small(f"{root}/{index}/type").strip() in ("Data", "Unified"):
                return _parse_sysfs_size(_read_small(f"{root}/{index}/size"))
        except (OSError, ValueError):
            continue
    return None


def _read_small(path: str) -> str:
    """A sysfs file's text (at most 4 KiB) with one open and one read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def _lines(nbytes: int) -> int:
    """Bytes of whole cache lines covering nbytes."""
    return -(-nbytes // CACHE_LINE) * CACHE_LINE


@dataclass(frozen=True)
class PoolPlan:
    """How many slots a cold pool has, and whether it really evicts."""

    slots: int
    slot_bytes: int  #: send stride + receive stride
    needed_slots: int  #: slots whose touched lines add up to twice the cache
    wraps: bool  #: the iterations go round the pool more than once
    evicts: bool  #: every use finds its lines displaced by at least twice the cache since the last use

    @property
    def pool_bytes(self) -> int:
        return self.slots * self.slot_bytes


def plan_pool(send_bytes: int, recv_bytes: int, cache_bytes: int, uses: int, max_memory: int) -> PoolPlan:
    """Size the cold-cache pool for a message (bytes per rank) used ``uses`` times in a row.

    needed = max(2, ceil(2 x cache / touched bytes per slot)), touched = both buffers rounded up to
    cache lines; slots = min(needed, uses) (a slot is never needed twice when the uses do not wrap),
    at least 2, but never more than ``max_memory`` holds (down to 1 slot: the message itself, which the
    warm mode needs too). Without wrapping, a flush of twice the cache before the timed loop makes every
    use cold; with wrapping, a trip round the pool must touch at least twice the cache (one slot does
    when the message alone is that large).
    """
    touched = _lines(send_bytes) + _lines(recv_bytes)
    stride = slot_stride(send_bytes) + slot_stride(recv_bytes)
    needed = max(2, math.ceil(2 * cache_bytes / max(touched, 1)))
    cap = max(1, max_memory // max(stride, 1))
    slots = min(max(2, min(needed, uses)), cap)
    wraps = uses > slots
    evicts = (not wraps) or slots * touched >= 2 * cache_bytes
    return PoolPlan(slots, stride, needed, wraps, evicts)


class CacheFlush:
    """A buffer of ``nbytes`` written one byte per cache line to displace caches (untimed)."""

    #: the C loop writes it itself, between iterations (``address``, ``nbytes``)
    host_memory = True

    def __init__(self, nbytes: int):
        self.region = HostRegion(nbytes)
        self.nbytes = self.region.nbytes
        self.address = self.region.address
        self._lines = self.region.bytes[::CACHE_LINE]

    def __call__(self, iteration: int = 0) -> None:
        self._lines[...] = iteration & 0xFF

    def close(self) -> None:
        self._lines = None
        self.region.close()


def touched_slots(slots, poison: int) -> int:
    """How many slots' receive buffers hold anything but the poison fill left there (the call wrote them)."""
    import numpy as np

    return sum(1 for slot in slots if slot.recv is not None and bool(np.any(slot.recv != poison)))


def cache_bytes_for(opts: RunOptions) -> int | None:
    """The cache size cold mode and --flush work against: --cache-size, else the detected LLC."""
    return opts.cache_size or last_level_cache_bytes()

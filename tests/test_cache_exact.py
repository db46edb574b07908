"""The cache module's arithmetic and reads, exact and in-process (issue 40: these kill the mutants of
measure/cache.py that the launched tests of test_cache.py do not notice; docs/mutation-testing.md)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from microbench.measure import cache
from microbench.measure.cache import CACHE_LINE, CacheFlush, plan_pool, touched_slots
from microbench.options import RunOptions

MiB = 1 << 20


def _sysfs(root, *indexes):
    """A sysfs cache folder: (name, level, type, size) per index (None: the file is absent)."""
    for name, level, kind, size in indexes:
        d = root / name
        d.mkdir()
        for file, text in (("level", level), ("type", kind), ("size", size)):
            if text is not None:
                (d / file).write_text(f"{text}\n")
    return str(root)


@pytest.mark.parametrize("text, size", [("48K\n", 48 << 10), ("8M", 8 << 20), ("1G", 1 << 30), ("512", 512),
                                        ("32768k\n", 32 * MiB), (" 2m ", 2 << 20)])
def test_sysfs_sizes_in_each_unit(text, size):
    assert cache._parse_sysfs_size(text) == size


def test_an_empty_size_is_bad_input_not_a_crash(tmp_path):
    """An empty size file is a ValueError (skipped: the next level is read), never an IndexError."""
    with pytest.raises(ValueError):
        cache._parse_sysfs_size("\n")
    root = _sysfs(tmp_path, ("index0", 2, "Unified", "1024K"), ("index1", 3, "Unified", ""))
    assert cache.last_level_cache_bytes(root) == MiB


def test_the_highest_level_without_a_readable_type_or_level_is_passed_over(tmp_path):
    # an unreadable level first: the indexes after it are still read
    root = _sysfs(tmp_path, ("index0", "x", "Unified", "65536K"), ("index1", None, "Unified", "65536K"),
                  ("index2", 1, "Data", "48K"), ("index3", 2, "Unified", "2048K"),
                  ("index4", 3, None, "32768K"), ("index5", 4, "Instruction", "8K"))
    (tmp_path / "uevent").write_text("")  # not an index: not read
    power = tmp_path / "power"
    power.mkdir()
    for file, text in (("level", "9"), ("type", "Unified"), ("size", "1G")):
        (power / file).write_text(text)
    assert cache.last_level_cache_bytes(root) == 2 * MiB


def test_no_data_or_unified_cache_is_unknown(tmp_path):
    assert cache.last_level_cache_bytes(_sysfs(tmp_path, ("index0", 1, "Instruction", "32K"))) is None
    assert cache.last_level_cache_bytes(str(tmp_path / "none")) is None


def test_a_sysfs_file_is_read_whole_up_to_4_KiB_with_close_on_exec(tmp_path, monkeypatch):
    exactly = tmp_path / "exactly"
    exactly.write_text("0" * 4094 + "1K")  # 4096 bytes: all of it is read
    over = tmp_path / "over"
    over.write_text("0" * 4095 + "1K")  # 4097 bytes: the K is past 4 KiB
    flags = []
    real_open = os.open
    monkeypatch.setattr(cache.os, "open", lambda path, f: (flags.append(f), real_open(path, f))[1])
    assert cache._parse_sysfs_size(cache._read_small(str(exactly))) == 1024
    assert cache._parse_sysfs_size(cache._read_small(str(over))) == 1
    assert flags == [os.O_RDONLY | os.O_CLOEXEC] * 2


@pytest.mark.parametrize("nbytes, lines", [(0, 0), (1, 64), (63, 64), (64, 64), (65, 128), (4096, 4096)])
def test_whole_cache_lines(nbytes, lines):
    assert CACHE_LINE == 64 and cache._lines(nbytes) == lines


def test_a_pool_plan_is_a_value():
    p = plan_pool(8, 8, MiB, uses=10, max_memory=1 << 30)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.slots = 1
    assert p == plan_pool(8, 8, MiB, uses=10, max_memory=1 << 30) and hash(p) == hash(plan_pool(8, 8, MiB, 10, 1 << 30))


def test_pool_for_an_empty_message():
    """0 B touch no line: the pool is sized as if one byte were touched, and slots have no stride."""
    p = plan_pool(0, 0, MiB, uses=100, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.slot_bytes, p.wraps, p.evicts, p.pool_bytes) == (2 * MiB, 100, 0, False,
                                                                                         True, 0)


def test_pool_never_has_fewer_than_two_slots_unless_memory_binds():
    # a 64 MiB message alone is twice the 32 MiB cache: one slot would do, two are kept; one use: still two
    p = plan_pool(64 * MiB, 0, 32 * MiB, uses=1, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.wraps, p.evicts) == (2, 2, False, True)
    p = plan_pool(64 * MiB, 64 * MiB, 32 * MiB, uses=5, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.wraps, p.evicts) == (2, 2, True, True)
    # 3 slots needed exactly (ceil of 2 x 3 MiB / 2 MiB), uses one more than that: wraps, evicts
    p = plan_pool(MiB, MiB, 3 * MiB, uses=4, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.wraps, p.evicts) == (3, 3, True, True)
    # memory for exactly 3 strides of an 8 B message holds 3 slots, one byte less holds 2
    stride = 2 * (64 + 64)
    assert plan_pool(8, 8, MiB, uses=10, max_memory=3 * stride).slots == 3
    assert plan_pool(8, 8, MiB, uses=10, max_memory=3 * stride - 1).slots == 2


def test_a_wrapping_pool_one_line_short_of_twice_the_cache_does_not_evict():
    # 4 slots of 2 x 64 KiB touch 512 KiB per trip: exactly twice a 256 KiB cache evicts, one line less does not
    assert plan_pool(64 << 10, 64 << 10, 256 << 10, uses=9, max_memory=4 * 2 * ((64 << 10) + 64)).evicts
    small = plan_pool(64 << 10, 64 << 10, (256 << 10) + 32, uses=9, max_memory=4 * 2 * ((64 << 10) + 64))
    assert (small.slots, small.wraps, small.evicts) == (4, True, False)


def test_the_flush_writes_one_byte_per_line_and_nothing_else():
    flush = CacheFlush(10 * CACHE_LINE + 1)
    try:
        assert flush.nbytes == flush.region.nbytes >= 10 * CACHE_LINE + 1 and flush.address == flush.region.address
        whole = flush.region.bytes
        whole[...] = 0xAA
        flush(0x1234)
        starts = np.arange(0, len(whole), CACHE_LINE)
        assert bool(np.all(whole[starts] == 0x34))
        rest = np.ones(len(whole), dtype=bool)
        rest[starts] = False
        assert bool(np.all(whole[rest] == 0xAA))
        flush()  # the default iteration writes 0
        assert bool(np.all(whole[starts] == 0))
        assert CacheFlush.host_memory is True  # the C loop writes it itself (measure/native/loops.py)
    finally:
        flush.close()
    assert flush._lines is None


class _Slot:
    def __init__(self, recv):
        self.recv = recv


def test_touched_slots_count_receive_buffers_written():
    poison = 0xA5
    slots = [_Slot(None), _Slot(np.full(8, poison, np.uint8)), _Slot(np.array([poison] * 7 + [0], np.uint8)),
             _Slot(np.zeros(8, np.uint8))]
    assert touched_slots(slots, poison) == 2
    assert touched_slots([], poison) == 0


def test_cache_size_given_wins_over_the_detected_one(monkeypatch):
    monkeypatch.setattr(cache, "last_level_cache_bytes", lambda: 7 * MiB)
    assert cache.cache_bytes_for(RunOptions(benchmarks=["allreduce"], sizes=[8], cache_size=3 * MiB)) == 3 * MiB
    assert cache.cache_bytes_for(RunOptions(benchmarks=["allreduce"], sizes=[8])) == 7 * MiB

"""Warm and cold cache modes, pool sizing, first-call records."""

from __future__ import annotations

import json

import pytest

from microbench.measure.cache import last_level_cache_bytes, plan_pool

from conftest import microbench, results_of

MiB = 1 << 20


def test_pool_for_small_messages_uses_each_slot_once():
    # 8 B send + 8 B recv touch one 64 B line each: 128 B per slot; twice a 1 MiB cache needs 16384 slots,
    # but 10000 uses never wrap, so 10000 slots (each 2 x (64 + 64) B apart) and a flush before the loop.
    p = plan_pool(8, 8, 1 * MiB, uses=10000, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.slot_bytes, p.wraps, p.evicts) == (16384, 10000, 256, False, True)
    assert p.pool_bytes == 2_560_000


def test_pool_for_large_messages_wraps_over_twice_the_cache():
    # 1 MiB + 1 MiB per slot, 32 MiB cache: 32 slots touch 64 MiB per trip round the pool
    p = plan_pool(MiB, MiB, 32 * MiB, uses=111, max_memory=1 << 30)
    assert (p.needed_slots, p.slots, p.wraps, p.evicts) == (32, 32, True, True)
    assert p.slot_bytes == 2 * (MiB + 64)


def test_bounded_pool_that_cannot_evict_says_so():
    p = plan_pool(MiB, MiB, 32 * MiB, uses=111, max_memory=16 * MiB)
    assert p.slots == 16 * MiB // (2 * (MiB + 64)) == 7
    assert p.wraps and not p.evicts


def test_pool_bound_leaves_one_slot_that_evicts_when_it_alone_displaces_the_cache():
    # --max-memory holds not even two 200 MiB slots: one slot (the message itself), reused; each use
    # streams 200 MiB, over twice the 32 MiB cache, so it is still cold
    p = plan_pool(100 * MiB, 100 * MiB, 32 * MiB, uses=50, max_memory=300 * MiB)
    assert p.slots == 1 and p.needed_slots == 2 and p.wraps and p.evicts
    assert p.pool_bytes == 200 * MiB + 128


def test_pool_bound_below_one_slot_keeps_the_message_and_says_it_is_not_cold():
    p = plan_pool(MiB, MiB, 32 * MiB, uses=111, max_memory=1 * MiB)
    assert p.slots == 1 and p.wraps and not p.evicts


def test_llc_from_sysfs(tmp_path):
    for name, level, kind, size in (("index0", 1, "Data", "48K"), ("index1", 1, "Instruction", "32K"),
                                    ("index2", 2, "Unified", "1024K"), ("index3", 3, "Unified", "32768K")):
        d = tmp_path / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(str(tmp_path)) == 32 * MiB
    assert last_level_cache_bytes(str(tmp_path / "missing")) is None


def test_llc_is_the_highest_level_whatever_the_index_order(tmp_path):
    """Only the highest levels' type and size are read: the answer must not depend on the indexes' order."""
    for name, level, kind, size in (("index0", 3, "Unified", "16384K"), ("index1", 4, "Instruction", "8K"),
                                    ("index2", 1, "Data", "48K"), ("index3", 2, "Unified", "1024K")):
        d = tmp_path / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(str(tmp_path)) == 16 * MiB


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("cache") / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw",
                      "-m", "64,64K", "-i", "10", "-x", "2", "--cache", "both", "--check", "--first-call-samples", "3",
                      "--cache-size", "1M", "--out", str(out))
    assert proc.returncode == 0, proc.output
    return out, proc


def test_both_modes_record_their_conditions(both):
    out, proc = both
    res = results_of(out)
    assert len(res) == 6 * 2 * 2
    for r in res:
        assert r["check"] == "pass"
        if r["cache"] == "warm":
            assert r["pool_slots"] == 1 and r["cache_evicts"] is None
            first = r["first_call_us"]
            assert first["samples"] == 3 and len(first["max_across_ranks"]["values"]) == 3
            assert first["min"] <= first["avg"] <= first["max"]
            assert set(first["per_rank"]) == ({"0"} if r["benchmark"] in ("latency", "bw") else {"0", "1"})
        else:
            assert r["cache"] == "cold" and r["cache_bytes"] == MiB
            assert r["pool_slots"] >= 2 and r["pool_bytes"] >= r["pool_slots"] * 128 and r["cache_evicts"] is True
            assert r["first_call_us"] is None  # measured once per size, on the first (warm) pass
    assert "Cache" in proc.stdout and "First(us)" in proc.stdout


@pytest.mark.parametrize("loop", ["native", "python"])
def test_cold_mode_uses_a_new_slot_every_iteration(loop, tmp_path):
    report = tmp_path / "slots"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "64,64K", "-i", "20", "-x", "3", "--cache", "cold",
                      "--cache-size", "256K", "--loop", loop, env={"MICROBENCH_TEST_SLOT_REPORT": str(report)})
    assert proc.returncode == 0, proc.output
    for rank in (0, 1):
        rows = {r["size_bytes"]: r for r in map(json.loads, (tmp_path / f"slots.{rank}").read_text().splitlines())}
        small, large = rows[64], rows[65536]
        # 64 B: 24 uses (first call, 3 warmup, 20 timed) never wrap a pool sized for twice 256 KiB: 24 slots,
        # every one of them written by the collective
        assert small["uses"] == 24 and small["slots"] == 24 and small["touched"] == 24
        # 64 KiB: 128 KiB touched per slot, 4 slots cover twice 256 KiB; 24 uses wrap and touch all 4
        assert large["slots"] == 4 and large["touched"] == 4


def test_warm_mode_reuses_one_slot(tmp_path):
    report = tmp_path / "slots"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "64", "-i", "20", "-x", "3",
                      env={"MICROBENCH_TEST_SLOT_REPORT": str(report)})
    assert proc.returncode == 0, proc.output
    row = json.loads((tmp_path / "slots.0").read_text())
    assert (row["slots"], row["touched"], row["cache"]) == (1, 1, "warm")


def test_flush_between_iterations_is_recorded(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "latency", "-m", "8", "-i", "5", "-x", "1", "--flush",
                      "--cache-size", "256K", "-c", "--out", str(out))
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [("allreduce", 8), ("latency", 8)]
    assert all(r["flush"] is True and r["cache_bytes"] == 256 * 1024 and r["check"] == "pass" for r in res)


def test_bad_cache_size_is_a_usage_error():
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", "--cache", "cold", "--cache-size", "lots")
    assert proc.returncode == 2 and "bad size 'lots'" in proc.stderr


SMAPS = """\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000c00000 rw-p 00000000 00:00 0
Size:               8192 kB
AnonHugePages:      6144 kB
7f0000c00000-7f0000e00000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
""".splitlines(keepends=True)


def test_huge_page_bytes_count_each_mapping_once():
    from microbench.measure.buffers import huge_page_bytes

    # send and receive regions the kernel merged into one mapping: its AnonHugePages once, not twice
    assert huge_page_bytes([0x7F0000400000, 0x7F0000800000], SMAPS) == 6144 * 1024
    # two separate mappings add up; a mapping holding none of the addresses does not count
    assert huge_page_bytes([0x7F0000000000, 0x7F0000400000], SMAPS) == (2048 + 6144) * 1024
    assert huge_page_bytes([0x7F0000100000], SMAPS) == 2048 * 1024
    assert huge_page_bytes([0x100], SMAPS) is None


def _anon_huge_pages_here(addresses: list[int]) -> int:
    """AnonHugePages of the mappings of /proc/self/smaps that hold ``addresses``, read by the test itself."""
    total, holds = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and ":" not in first:
                lo, hi = (int(x, 16) for x in first.split("-"))
                holds = any(lo <= a < hi for a in addresses)
            elif holds and first == "AnonHugePages:":
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.may_skip("whether the kernel grants huge pages depends on its THP mode and fragmentation")
def test_huge_pages_granted_by_this_kernel_are_counted():
    import numpy as np

    from microbench.cluster.facts import thp_mode
    from microbench.measure.buffers import BufferPool

    if thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages are {thp_mode()} on this kernel: none to count")
    pool = BufferPool(8 * MiB, 8 * MiB, np.dtype(np.uint8), nslots=1, policy="on")
    try:
        addresses = [pool.slots[0].send.ctypes.data, pool.slots[0].recv.ctypes.data]
        before = _anon_huge_pages_here(addresses)  # khugepaged may only add huge pages meanwhile
        counted = pool.huge_page_bytes()
        after = _anon_huge_pages_here(addresses)
        if counted == 0:
            pytest.skip("this kernel granted no huge page to an 8 MiB MADV_HUGEPAGE mapping (fragmented memory)")
        assert min(before, 16 * MiB) <= counted <= min(after, 16 * MiB), (before, counted, after)
        assert counted % (2 * MiB) == 0
    finally:
        pool.close()


def test_a_merged_mapping_never_counts_more_than_the_pool_holds(monkeypatch):
    import numpy as np

    from microbench.measure import buffers

    pool = buffers.BufferPool(4 * MiB, 4 * MiB, np.dtype(np.uint8), nslots=1, policy="on")
    try:  # the kernel reports a merged mapping of 64 MiB of huge pages around the pool's 8 MiB
        monkeypatch.setattr(buffers, "huge_page_bytes", lambda addresses, smaps=None: 64 * MiB)
        assert pool.huge_page_bytes() == 8 * MiB
        monkeypatch.setattr(buffers, "huge_page_bytes", lambda addresses, smaps=None: 6 * MiB)
        assert pool.huge_page_bytes() == 6 * MiB
        monkeypatch.setattr(buffers, "huge_page_bytes", lambda addresses, smaps=None: None)
        assert pool.huge_page_bytes() == 0
    finally:
        pool.close()


def test_note_for_a_bounded_pool_that_cannot_evict(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "1M", "-i", "20", "--cache", "cold", "--cache-size", "8M",
                      "--max-memory", "1M", "--out", str(out))
    assert proc.returncode == 0, proc.output
    r = results_of(out)[0]
    assert r["cache_evicts"] is False
    assert "# note: allreduce at 1M: the cold pool" in proc.stdout and "not fully cold" in proc.stdout

"""What a sample means, held exactly: the gaps a planted-bug audit found (shared review tests-2, mutations M2, M4b,
M8b, M9, M10a, M15a, M16, M18, M24) each have a test here that fails when the bug is planted.

- The engine on a stub loop whose durations are known: a ping-pong sample is half the round trip (M18), a
  windowed bandwidth sample is the time per message of the window (M24), and the warmup's durations are never
  samples, on the fast path (one loop) and apart (M9).
- Percentiles on 1..10: nearest-rank, exact (M2).
- The cold-cache flush writes every cache line of its buffer (M8b).
- The records writer fsyncs every record it writes (M10a).
- An NCCL log cut off by a killed job (no newline after its last call) counts that last call (M15a).
- The HTML report escapes what records hold: <script>, quotes and & in run ids, hosts and MPI versions (M16).
- check fails closed when one benchmark a rule names is absent (M4b).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from fixtures.gate.synth import result, write_run

from microbench.benchmarks.table import ALLREDUCE, COLLECTIVES, Context
from microbench.measure import engine, stats


# ------------------------------------------------------------------------------ the engine on known durations
class StubLoop:
    """A timed loop whose iteration i (counted from the first call) takes ``durations_ns[i]``: what a sample must
    be is then known exactly."""

    kind, call_path, timer, last_timer, graph, launch = "stub", "stub", "stub", "stub", None, None
    runs_timed_slots_before = False

    def __init__(self, durations_ns, separate_warmup: bool = False):
        self.durations = np.asarray(durations_ns, dtype=np.int64)
        self.separate_warmup = separate_warmup
        self.next = 0

    def prepare(self, calls):
        return calls

    def begin_timed(self, prepared, iterations, start, each):
        pass

    def run(self, prepared, iters, start=0, barrier=None, flush=None):
        out = self.durations[self.next:self.next + iters]
        self.next += iters
        return out.copy()


def _measure(coll, durations, warmup: int, iterations: int, window: int = 1, **settings):
    from microbench.measure.buffers import BufferPool

    ctx = Context(rank=0, nranks=2, window=window)
    pool = BufferPool(4, 4, np.dtype(np.uint8), nslots=2)
    try:
        loop = StubLoop(durations, separate_warmup=settings.pop("separate_warmup", False))
        return engine.measure(coll, ctx, pool.slots, [None] * len(pool.slots), loop,
                              engine.LoopSettings(iterations=iterations, warmup=warmup, **settings),
                              barrier=lambda: None, agree_max=lambda v: v, timing=True)
    finally:
        pool.close()


def _durations(first: int, warmup: list[int], timed: list[int]) -> list[int]:
    return [first, *warmup, *timed]


@pytest.mark.parametrize("separate", [False, True], ids=["one-loop", "apart"])
def test_a_ping_pong_sample_is_half_the_round_trip(separate):
    timed = [4000, 6000, 8000]  # ns per round trip
    m = _measure(COLLECTIVES["latency"], _durations(10_000, [1_000_000, 1_000_000], timed), warmup=2, iterations=3,
                 separate_warmup=separate)
    assert m.samples_us.tolist() == [2.0, 3.0, 4.0]  # us, one way
    assert m.first_call_us == 5.0


@pytest.mark.parametrize("name", ["bw", "bibw"])
def test_a_windowed_bandwidth_sample_is_the_time_per_message_of_the_window(name):
    window = 64
    timed = [64_000, 128_000]  # ns for a window of 64 messages (and its ack)
    m = _measure(COLLECTIVES[name], _durations(64_000, [10_000_000], timed), warmup=1, iterations=2, window=window)
    assert m.samples_us.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("separate", [False, True], ids=["one-loop", "apart"])
def test_warmup_durations_are_never_samples(separate):
    huge = [10 ** 9] * 5  # the warmup: a second each
    timed = [1000 * (i + 1) for i in range(7)]
    m = _measure(ALLREDUCE, _durations(2000, huge, timed), warmup=5, iterations=7, separate_warmup=separate)
    assert m.samples_us.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert m.iterations == 7 and m.warmup == 5


# ------------------------------------------------------------------------------ percentiles, exact
class OneRank:
    rank, size = 0, 1

    def allreduce(self, values, op):
        return np.asarray(values)

    def reduce_to_root(self, values, op):
        return np.asarray(values)


def test_percentiles_on_one_to_ten_are_the_nearest_ranks():
    """Nearest-rank percentiles of 1..10 us: p10 is the 1st value, p50 the 5th, p90 the 9th, p99 the 10th (values
    10 % and more apart, so the histogram's 0.5 % bins cannot hide a rank off by one)."""
    out = stats.summarize(np.arange(1.0, 11.0), OneRank())
    found = {p: out[p] for p in ("p10", "p50", "p90", "p99")}
    assert found == pytest.approx({"p10": 1.0, "p50": 5.0, "p90": 9.0, "p99": 10.0}, rel=stats.PERCENTILE_REL_ERROR)
    assert out["fastest"] == 1.0 and out["slowest"] == 10.0 and out["avg"] == pytest.approx(5.5)


# ------------------------------------------------------------------------------ the cold-cache flush
def test_the_flush_writes_every_cache_line_of_its_buffer():
    from microbench.measure.cache import CACHE_LINE, CacheFlush

    flush = CacheFlush(1 << 20)
    try:
        for iteration in (1, 2, 0x1FF):
            flush(iteration)
            lines = flush.region.bytes[::CACHE_LINE]
            assert len(lines) == (1 << 20) // CACHE_LINE and bool(np.all(lines == (iteration & 0xFF)))
    finally:
        flush.close()


# ------------------------------------------------------------------------------ the writer's fsync
def test_every_record_written_is_fsynced(tmp_path, monkeypatch):
    from microbench.records import writer

    synced = []
    real = os.fsync
    monkeypatch.setattr(writer.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    out = writer.Output(str(tmp_path / "r.jsonl"), str(tmp_path / "r.csv"))
    records = [result("allreduce", s, 10.0) for s in (8, 64, 512)]
    for rec in records:
        out.result(rec)
    out.close()
    assert len(synced) == 2 * len(records)  # each record: one write and one fsync on the JSONL and on the CSV
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == len(records)


# ------------------------------------------------------------------------------ a killed job's NCCL log
def test_the_last_call_of_a_log_cut_off_without_a_newline_counts(tmp_path):
    from microbench.workload.traces import read_trace
    from microbench.workload.traces.samples import nccl_call, nccl_init

    lines = [nccl_init("0xa", 0, 2)] + [nccl_call("AllReduce", 1024, 7, "0xa", 2, opcount=i) for i in range(3)]
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(lines))  # no final newline: the job was killed after its last call
    whole = tmp_path / "whole.log"
    whole.write_text("\n".join(lines) + "\n")
    counted = {str(p): sum(m.count for m in read_trace(str(p)).messages(1)) for p in (cut, whole)}
    assert counted[str(cut)] == counted[str(whole)] == 3


# ------------------------------------------------------------------------------ the report escapes what records hold
def test_the_report_escapes_what_records_hold(tmp_path):
    from microbench.cli import main

    payload = '<script>alert("x")</script>&<img src=x onerror=alert(1)>'
    path = write_run(tmp_path / "r.jsonl", [result("allreduce", s, 10.0) for s in (8, 64)], run_id=f"id{payload}",
                     hosts=[f"h{payload}"], ranks_per_host={f"h{payload}": 2},
                     mpi={"library_version": f"Open MPI {payload}"})
    page = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(page)]) == 0
    html = page.read_text()
    assert '<script>alert("x")' not in html and "<img src=x" not in html  # nothing from a record runs
    assert html.count("<script") == 1  # the page's own script, and no other
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&lt;img" in html


# ------------------------------------------------------------------------------ check fails closed
def test_check_fails_closed_when_one_benchmark_a_rule_names_is_absent(tmp_path, capsys):
    from microbench.cli import main

    path = write_run(tmp_path / "r.jsonl", [result("allreduce", s, 10.0) for s in (8, 64)])
    spec = tmp_path / "s.toml"
    spec.write_text('[[rule]]\nbenchmark = ["allreduce", "broadcast"]\nmax_latency_us = 1000\n')
    assert main(["check", str(path), "--spec", str(spec)]) == 1
    assert "no measurement of broadcast matches (fail closed)" in capsys.readouterr().out

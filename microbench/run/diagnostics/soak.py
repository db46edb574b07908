"""Soak runs: everything the command names, repeated in numbered cycles, to catch what comes and goes.

``--cycles N`` runs N cycles; ``--duration T`` starts cycles until T seconds have passed since the first
began (the cycle running then finishes; with both, whichever ends first). Rank 0 decides whether another
cycle starts and tells every rank. Every record a cycle writes carries ``cycle`` (from 1) and
``cycle_started_utc``; each cycle ends with a ``cycle`` record (its time span, results, failed checks).
``--check-every K`` validates the received data (as ``-c``) in cycles K, 2K, 3K, ...; ``-c`` alone checks
every cycle. A test hook with a cycle field (testhooks) fires in that cycle only.

At the end, and when a signal or the watchdog ends the run (over the cycles that finished), one ``soak``
record summarises each configuration (benchmark, metric, size, cache) across cycles: min, median and max of
the average latency and of busbw, and every cycle whose check failed with the nodes whose data was wrong.
Results are fsynced as each size finishes, so SIGTERM at any point keeps every finished cycle.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from microbench.cluster import facts

if TYPE_CHECKING:  # pragma: no cover
    from microbench.run.context import RunContext


class Soak:
    """The cycles of one run (a run without soak options is one pass with no cycle fields)."""

    def __init__(self, rc: RunContext):
        self.rc = rc
        self.active = rc.opts.cycles is not None or rc.opts.duration is not None
        self.finished: list[dict] = []  #: rank 0: the cycle records written so far
        self._summary_written = threading.Lock()

    def run(self, body: Callable[[RunContext], list[str]]) -> list[str]:
        """Collective: ``body`` once, or once per cycle; returns what failed its check (cycle-prefixed)."""
        if not self.active:
            return body(self.rc)
        failed: list[str] = []
        start, number = time.monotonic(), 0
        while True:
            number += 1
            cycle_rc = self._context(number)
            began = time.monotonic()
            first_result = len(self.rc.out.results) if self.rc.out is not None else 0
            failed += [f"cycle {number}: {what}" for what in body(cycle_rc)]
            if self.rc.out is not None:
                from microbench.records import build

                record = build.cycle_record(self.rc.run_id, cycle_rc.cycle, facts.utc_now(),
                                            round(time.monotonic() - began, 3), cycle_rc.opts.check,
                                            self.rc.out.results[first_result:])
                with self.rc.out.lock:  # the summary a signal writes sees this cycle in both or in neither
                    self.rc.out.record(record)
                    if not self.rc.out.closed:
                        self.finished.append(record)
            if not self._another(number, start):
                return failed

    def _context(self, number: int) -> RunContext:
        """The run's context for one cycle: its number and start, whether it checks, its hooks."""
        o = self.rc.opts
        check = o.check if o.check_every is None else number % o.check_every == 0
        return replace(self.rc, opts=replace(o, check=check), hooks=self.rc.hooks.for_cycle(number),
                       cycle={"number": number, "started_utc": facts.utc_now()})

    def _another(self, number: int, start: float) -> bool:
        """Collective: rank 0's decision whether another cycle starts."""
        o = self.rc.opts
        go = (o.cycles is None or number < o.cycles) and (o.duration is None or time.monotonic() - start < o.duration)
        return bool(self.rc.reducer.bcast(go if self.rc.rank == 0 else None, root=0))

    def close(self) -> None:
        """Rank 0, once, at the end or from the thread that ends the run: the summary of the finished cycles."""
        if not self.active or self.rc.out is None or not self._summary_written.acquire(blocking=False):
            return
        cycles = [r["cycle"] for r in self.finished]
        results = [r for r in self.rc.out.results if r.get("cycle") in cycles]
        from microbench.records import build

        self.rc.out.record(build.soak_record(self.rc.run_id, cycles, summarize(results)))


def summarize(results: list[dict]) -> list[dict]:
    """Per configuration (benchmark, metric, size, cache), across cycles: min/median/max of the average
    latency (us) and of busbw (GB/s), the cycles measured and checked, and the cycles whose check failed."""
    by_config: dict[tuple, list[dict]] = {}
    for r in results:
        key = (r["benchmark"], r.get("metric"), r["size_bytes"], r.get("cache"))
        by_config.setdefault(key, []).append(r)
    out = []
    for (benchmark, metric, size, cache), rs in by_config.items():
        out.append({
            "benchmark": benchmark, "metric": metric, "size_bytes": size, "cache": cache, "cycles": len(rs),
            "checked_cycles": sum(r.get("check") is not None for r in rs),
            "avg_latency_us": _spread([r["latency_us"]["avg"] for r in rs]),
            "busbw_gbps": _spread([r["busbw_gbps"] for r in rs]),
            "failed_cycles": [{"cycle": r["cycle"], "at": [f["label"] for f in r.get("check_failures") or ()]}
                              for r in rs if r.get("check") == "fail"],
        })
    return out


def _spread(values: list[float]) -> dict:
    from microbench.measure.outliers import median

    return {"min": min(values), "median": float(median(values)), "max": max(values)}

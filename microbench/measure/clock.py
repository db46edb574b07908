"""The host clock every timing read in Python takes: CLOCK_MONOTONIC, in integer nanoseconds.

The timed loops (``loops.py``) and the replay's per-call timing (``replay/execute.py``) read this one clock, so
a replayed call and a swept size are timed alike. Read it as ``now_ns()``: bound to a local name in a hot loop,
it is ``time.perf_counter_ns`` itself, no wrapper.
"""

from __future__ import annotations

import time

#: nanoseconds from CLOCK_MONOTONIC (Linux); differences of two reads are durations
now_ns = time.perf_counter_ns

#: how the records name this clock
HOST_CLOCK = "CLOCK_MONOTONIC (time.perf_counter_ns)"

NS_PER_S = 1_000_000_000


def seconds(ns: int) -> float:
    """``ns`` nanoseconds in seconds."""
    return ns / NS_PER_S

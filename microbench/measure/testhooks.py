"""Test-only fault hooks: how the test suite makes a rank fail, stall or lie on purpose. Not for users.

They act only when ``MICROBENCH_TESTING=1`` is set as well; otherwise a set hook variable is ignored
with one warning line (a variable left over in a shell must never fake a result). They are read once,
at the start of a run, and a malformed value is a usage error.

- ``MICROBENCH_TEST_RAISE=RANK:BENCH:SIZE``: that rank raises at the start of that size.
- ``MICROBENCH_TEST_KILL=RANK:BENCH:SIZE``: that rank kills itself (SIGKILL) there.
- ``MICROBENCH_TEST_STALL=RANK:BENCH:SIZE``: that rank passes the barrier before the timed loop and then
  sleeps instead of running it, so its peers wait inside the loop's first call (needs the watchdog,
  ``--timeout`` above 0).
- ``MICROBENCH_TEST_CORRUPT=RANK:BENCH:SIZE``: that rank flips a byte of its received data after each
  checked iteration (``--check`` must then fail).
- ``MICROBENCH_TEST_SLOT_REPORT=PATH``: each rank appends, per size, how many cold-pool slots the
  iterations wrote to ``PATH.RANK`` (JSON lines).
- ``MICROBENCH_TEST_SLOW_RANK=RANK:MICROSECONDS``: that rank starts every iteration of every size (the first
  call, warmup and timed iterations, in the sweep, the pairwise test and bisection) that long late: a
  straggler. See ``SlowedLoop`` for how, and what each loop then measures.
- ``MICROBENCH_TEST_DOCTOR_STALL=RANK:POINT``: in ``microbench doctor``, that rank sleeps at POINT (a layer's
  name, or ``mpi_init``: just before MPI_Init) instead of going on (``doctor_stall``).

The targeted hooks take an optional fourth field, ``RANK:BENCH:SIZE:CYCLE``: they fire only in that cycle
of a soak run (``--cycles``/``--duration``); without it they fire in every cycle.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from microbench.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

ENABLE = "MICROBENCH_TESTING"
_TARGETED = ("RAISE", "KILL", "STALL", "CORRUPT")
STALL_SECONDS = 3600.0


@dataclass(frozen=True)
class Target:
    """One (rank, benchmark, size in bytes) a hook fires at, in one soak cycle or (None) in every cycle."""

    rank: int
    benchmark: str
    size: int
    cycle: int | None = None

    @classmethod
    def parse(cls, var: str, text: str) -> "Target":
        parts = text.split(":")
        try:
            if len(parts) not in (3, 4) or not parts[1]:
                raise ValueError
            cycle = int(parts[3]) if len(parts) == 4 else None
            if cycle is not None and cycle < 1:
                raise ValueError
            return cls(int(parts[0]), parts[1], int(parts[2]), cycle)
        except ValueError:
            raise UsageError(f"{var}={text!r}: expected RANK:BENCHMARK:SIZE or RANK:BENCHMARK:SIZE:CYCLE "
                             f"(e.g. 1:allreduce:32)") from None

    def hits(self, rank: int, benchmark: str, size: int) -> bool:
        return (self.rank, self.benchmark, self.size) == (rank, benchmark, size)


@dataclass(frozen=True)
class SizeHooks:
    """The hooks that fire at one (rank, benchmark, size)."""

    raise_now: bool = False
    kill: bool = False
    stall: bool = False
    corrupt: bool = False  #: the engine flips a received byte after each checked iteration

    def at_start(self, where: str) -> None:
        """Before the size's buffers are built: raise or die."""
        if self.raise_now:
            raise RuntimeError(f"test hook: {where} raises")
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)

    def before_timed_loop(self) -> None:
        """After the barrier that starts the timed iterations: stall in place of the loop."""
        if self.stall:
            time.sleep(STALL_SECONDS)


NO_HOOKS = SizeHooks()


@dataclass(frozen=True)
class FaultHooks:
    """The hooks of this run, read once from the environment."""

    targets: Mapping[str, Target]
    slot_log: str | None = None
    slow_rank: tuple[int, float] | None = None  #: (rank, delay in seconds) of MICROBENCH_TEST_SLOW_RANK

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, warn: bool = True) -> "FaultHooks":
        """Parse the hook variables; without ``MICROBENCH_TESTING=1`` they are ignored (``warn``: say so)."""
        env = os.environ if env is None else env
        names = [f"MICROBENCH_TEST_{k}" for k in (*_TARGETED, "SLOT_REPORT", "SLOW_RANK")]
        set_names = [n for n in names if env.get(n)]
        if not set_names:
            return cls({})
        if env.get(ENABLE) != "1":
            if warn:
                print(f"microbench: warning: {', '.join(set_names)} ignored: test hooks act only with "
                      f"{ENABLE}=1", file=sys.stderr, flush=True)
            return cls({})
        targets = {k: Target.parse(f"MICROBENCH_TEST_{k}", env[f"MICROBENCH_TEST_{k}"])
                   for k in _TARGETED if env.get(f"MICROBENCH_TEST_{k}")}
        return cls(targets, env.get("MICROBENCH_TEST_SLOT_REPORT") or None,
                   _parse_slow_rank(env.get("MICROBENCH_TEST_SLOW_RANK")))

    def check_usable(self, timeout_s: float) -> None:
        """A stall without the watchdog would hang the test run: refuse it."""
        if "STALL" in self.targets and timeout_s <= 0:
            raise UsageError("MICROBENCH_TEST_STALL needs the watchdog: --timeout above 0")

    def at(self, rank: int, benchmark: str, size: int) -> SizeHooks:
        """The hooks firing at this rank, benchmark and size (``NO_HOOKS`` when none)."""
        fired = {k for k, t in self.targets.items() if t.hits(rank, benchmark, size)}
        if not fired:
            return NO_HOOKS
        return SizeHooks(raise_now="RAISE" in fired, kill="KILL" in fired, stall="STALL" in fired,
                         corrupt="CORRUPT" in fired)

    def for_cycle(self, cycle: int) -> "FaultHooks":
        """The hooks of one soak cycle: targets with a cycle fire only in theirs."""
        return replace(self, targets={k: t for k, t in self.targets.items() if t.cycle in (None, cycle)})

    def slowed(self, rank: int, loop: Any) -> Any:
        """``loop`` itself, or on the MICROBENCH_TEST_SLOW_RANK rank a ``SlowedLoop`` around it."""
        if self.slow_rank is None or self.slow_rank[0] != rank:
            return loop
        return SlowedLoop(loop, self.slow_rank[1])

    def log_slots(self, record: dict) -> None:
        """Append one size's slot usage to ``PATH.RANK`` (``MICROBENCH_TEST_SLOT_REPORT``)."""
        if self.slot_log:
            import json

            with open(f"{self.slot_log}.{record['rank']}", "a") as f:
                f.write(json.dumps(record) + "\n")


def _parse_slow_rank(text: str | None) -> tuple[int, float] | None:
    """``RANK:MICROSECONDS`` -> (rank, seconds); a malformed value is a usage error."""
    if not text:
        return None
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        rank, delay_us = int(parts[0]), float(parts[1])
        if rank < 0 or not 0 < delay_us <= 60e6:
            raise ValueError
    except ValueError:
        raise UsageError(f"MICROBENCH_TEST_SLOW_RANK={text!r}: expected RANK:MICROSECONDS with a delay above 0 "
                         f"and at most 60 s (e.g. 3:20000)") from None
    return rank, delay_us / 1e6


class SlowedLoop:
    """A timed loop whose rank starts every iteration ``delay_s`` late (MICROBENCH_TEST_SLOW_RANK).

    It runs the wrapped loop one iteration at a time and sleeps before each, outside that iteration's timing,
    whatever the loop (native C, the C call shim, mpi4py, torch): no timed code changes. The slowed rank thus
    arrives late at every call, as a straggler does, and what each side measures follows:

    - collectives in which every rank waits for every other (allreduce, allgather, reduce_scatter, alltoall):
      every other rank's iteration takes about ``delay_s`` longer; the slowed rank's own iteration is short,
      since the others are already waiting (it is the *fastest* rank of the records: the one waited on);
    - rooted collectives: only the ranks that wait for the slowed rank's data (the root of a reduce, any rank
      of a broadcast from it) are slowed;
    - ping-pong and the windowed stream (latency, bw, the pairs test): the side that times (the initiator, the
      lower rank of a pair) sees ``delay_s`` more per round trip when the slowed rank is its peer; when the
      slowed rank is the initiator its own timing leaves the sleep out and nothing is slowed;
    - ``--sync barrier`` and ``--flush``: the barrier before each iteration absorbs the late arrival, so no
      timing is slowed (as a real straggler, whose lateness such a barrier hides).

    The slowed rank's own samples come from one-iteration runs (the lean loop's clock read around one call)
    instead of one long loop; its first call, warmup and timed iterations are all slowed. Not meant for
    ``--cuda-graph``, whose timed phase replays graphs captured for many iterations at once.
    """

    def __init__(self, inner: Any, delay_s: float):
        self.inner, self.delay_s = inner, delay_s

    def __getattr__(self, name: str) -> Any:  # kind, timer, prepare, begin_timed, label, ...: the wrapped loop's
        return getattr(self.inner, name)

    def run(self, prepared: Any, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        import numpy as np

        out = np.empty(max(iters, 0), dtype=np.int64)
        for i in range(iters):
            time.sleep(self.delay_s)
            out[i] = self.inner.run(prepared, 1, start + i, barrier, flush)[0]
        return out


DOCTOR_STALL = "MICROBENCH_TEST_DOCTOR_STALL"


def doctor_stall(env: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """(rank, point) of ``MICROBENCH_TEST_DOCTOR_STALL``, or None (also without ``MICROBENCH_TESTING=1``, said
    once on stderr)."""
    env = os.environ if env is None else env
    text = env.get(DOCTOR_STALL)
    if not text:
        return None
    if env.get(ENABLE) != "1":
        print(f"microbench: warning: {DOCTOR_STALL} ignored: test hooks act only with {ENABLE}=1",
              file=sys.stderr, flush=True)
        return None
    rank, sep, point = text.partition(":")
    if not sep or not rank.isdigit() or not point:
        raise UsageError(f"{DOCTOR_STALL}={text!r}: expected RANK:POINT (e.g. 2:mpi_init)")
    return int(rank), point


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
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Mapping

from microbench.errors import UsageError

ENABLE = "MICROBENCH_TESTING"
_TARGETED = ("RAISE", "KILL", "STALL", "CORRUPT")
STALL_SECONDS = 3600.0


@dataclass(frozen=True)
class Target:
    """One (rank, benchmark, size in bytes) a hook fires at."""

    rank: int
    benchmark: str
    size: int

    @classmethod
    def parse(cls, var: str, text: str) -> "Target":
        parts = text.split(":")
        try:
            if len(parts) != 3 or not parts[1]:
                raise ValueError
            return cls(int(parts[0]), parts[1], int(parts[2]))
        except ValueError:
            raise UsageError(f"{var}={text!r}: expected RANK:BENCHMARK:SIZE (e.g. 1:allreduce:32)") from None

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
    slot_report: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, warn: bool = True) -> "FaultHooks":
        """Parse the hook variables; without ``MICROBENCH_TESTING=1`` they are ignored (``warn``: say so)."""
        env = os.environ if env is None else env
        names = [f"MICROBENCH_TEST_{k}" for k in (*_TARGETED, "SLOT_REPORT")]
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
        return cls(targets, env.get("MICROBENCH_TEST_SLOT_REPORT") or None)

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

    def report_slots(self, record: dict) -> None:
        """Append one size's slot usage to ``PATH.RANK`` (``MICROBENCH_TEST_SLOT_REPORT``)."""
        if self.slot_report:
            with open(f"{self.slot_report}.{record['rank']}", "a") as f:
                f.write(json.dumps(record) + "\n")

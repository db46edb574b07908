"""What ends a run early, and how it ends cleanly: the per-size watchdog and SIGINT/SIGTERM.

Both act from a thread of their own, because the main thread may sit inside an MPI call or the C loop
(with the GIL released) for as long as a size takes, and Python only runs signal handlers in the main
thread between bytecodes.

- ``Watchdog``: armed at the start of every size with ``--timeout`` seconds; when it expires it prints
  which benchmark and size stalled, lets rank 0 close the records as ``failed``, and aborts the whole MPI
  job (``MPI_Abort``; if that does not end this process within a few seconds, ``os._exit``).
- ``SignalGuard``: SIGINT and SIGTERM (Slurm's time limit sends SIGTERM to every task) are blocked in
  every thread and taken by one waiting thread, which lets rank 0 close the records as ``incomplete``
  and exits with 128 + the signal number. Results already written stay: each was fsynced when its size
  finished.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable

EXIT_TIMEOUT = 3
LINGER_AFTER_SIGNAL_S = 3.0  #: ranks other than 0 wait this long after a signal before they exit
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class RunState:
    """What the run is doing now (read by the watchdog and the signal thread for their messages)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.where = "setup"
        #: set by rank 0: writes the end record with (status, reason); must be safe to call once from any thread
        self.close_records: Callable[[str, str], None] | None = None
        self._closed = threading.Lock()

    def close(self, status: str, reason: str) -> None:
        if self.close_records and self._closed.acquire(blocking=False):
            try:
                self.close_records(status, reason)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


def _say(text: str) -> None:
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


class Watchdog:
    """Ends the whole job when one size takes longer than ``seconds``."""

    def __init__(self, state: RunState, seconds: float, abort: Callable[[int], None]):
        self.state, self.seconds, self.abort = state, seconds, abort
        self._deadline: float | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="microbench-watchdog", daemon=True)
        if seconds > 0:
            self._thread.start()

    def arm(self, where: str) -> None:
        self.state.where = where
        # Rank 0 fires first, so that the run's end record names the timeout rather than the SIGTERM
        # the launcher sends once another rank has aborted.
        grace = 0.0 if self.state.rank == 0 else 2.0
        with self._cond:
            self._deadline = time.monotonic() + self.seconds + grace
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                break
        where = self.state.where
        _say(f"microbench: rank {self.state.rank}: timeout: {where} did not finish within {self.seconds:g} s "
             f"(--timeout); ending the job")
        self.state.close("failed", f"timeout: {where} did not finish within {self.seconds:g} s")
        threading.Timer(5.0, lambda: os._exit(EXIT_TIMEOUT)).start()
        try:
            self.abort(EXIT_TIMEOUT)
        finally:
            os._exit(EXIT_TIMEOUT)


class SignalGuard:
    """Takes SIGINT/SIGTERM in a thread: close the records as incomplete, exit 128 + signal."""

    def __init__(self, state: RunState):
        self.state = state
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        self._thread = threading.Thread(target=self._wait, name="microbench-signals", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        signum = signal.sigwait(_HANDLED)
        name = signal.Signals(signum).name
        _say(f"microbench: rank {self.state.rank}: {name} during {self.state.where}; "
             f"finished sizes are on disk, the run is marked incomplete")
        reason = f"{name} during {self.state.where}"
        if signum == signal.SIGTERM and self.state.rank == 0 and _several_ranks():
            # Rank 0 cannot tell why: mpiexec and srun also send SIGTERM when another rank has failed.
            reason += " (from the launcher: a time limit, a cancel, or another rank that failed; see its error)"
        self.state.close("incomplete", reason)
        sys.stdout.flush()
        # Let the launcher forward what this rank printed before it sees the rank exit. The other ranks wait
        # longer: a launcher that sees one rank exit kills the rest at once (Open MPI's prterun with SIGKILL), and
        # on a loaded machine rank 0's signal thread may not have written the end record yet.
        time.sleep(0.3 if self.state.rank == 0 else LINGER_AFTER_SIGNAL_S)
        os._exit(128 + signum)


def _several_ranks() -> bool:
    from microbench.cluster import launch

    info = launch.discover()
    return info.under_launcher and info.size != 1

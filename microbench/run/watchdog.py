"""What ends a run early, and how it ends cleanly: the per-size watchdog and SIGINT/SIGTERM.

Both act from a thread of their own, because the main thread may sit inside an MPI call or the C loop
(with the GIL released) for as long as a size takes, and Python only runs signal handlers in the main
thread between bytecodes.

- ``Watchdog``: armed at the start of every size with ``--timeout`` seconds; when it expires it prints
  which benchmark and size stalled, lets rank 0 close the records as ``failed``, and aborts the whole MPI
  job (``MPI_Abort``; if that does not end this process within a few seconds, ``os._exit``).
- ``SignalGuard``: SIGINT and SIGTERM (Slurm's time limit sends SIGTERM to every task) reach a thread of their
  own through Python's wakeup file descriptor, whichever thread the kernel delivers them to (an MPI library's
  own threads included); it lets rank 0 close the records as ``incomplete`` and exits with 128 + the signal
  number. Results already written stay: each was fsynced when its size finished.
- Why a run ended, when the launcher only says SIGTERM: the ``--np`` parent writes the signal it received into
  ``MICROBENCH_SIGNAL_NOTE`` (Ctrl-C reaches the ranks as SIGTERM from mpiexec), and a rank other than 0 that
  raises leaves its error beside the records (``failure_note``) before the job is aborted; rank 0 reads both.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable

from microbench.errors import EXIT_FAIL

EXIT_TIMEOUT = EXIT_FAIL  #: a run the watchdog stopped failed (never the internal-error status)
LINGER_AFTER_SIGNAL_S = 3.0  #: ranks other than 0 wait this long after a signal before they exit
_HANDLED = (signal.SIGINT, signal.SIGTERM)
SIGNAL_NOTE_ENV = "MICROBENCH_SIGNAL_NOTE"  #: a file where the ``--np`` parent writes the signal it received


class RunState:
    """What the run is doing now (read by the watchdog and the signal thread for their messages)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.where = "setup"
        #: set by rank 0: writes the end record with (status, reason); must be safe to call once from any thread
        self.close_records: Callable[[str, str], None] | None = None
        self._closed = threading.Lock()
        #: set when a signal or the watchdog is ending the run: an error the main thread raises after that (a
        #: collective whose peer has exited) is a consequence of the stop, not a fault to report
        self.stopping = threading.Event()

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
        self.state.stopping.set()
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
    """Takes SIGINT/SIGTERM in a thread: close the records (incomplete, or failed with another rank's error),
    exit 128 + signal.

    Python's C-level handler writes each signal's number to a pipe (``signal.set_wakeup_fd``) whichever thread
    the kernel picked, and the thread reads it there: the main thread may sit in MPI or in the C loop for as long
    as a size takes, and an MPI library's own threads may take process-directed signals."""

    def __init__(self, state: RunState, records: str | None = None):
        self.state, self.records = state, records
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        for signum in _HANDLED:
            signal.signal(signum, lambda signum, frame: None)  # the thread acts; the main thread goes on
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._wait, name="microbench-signals", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        signum = os.read(self._read, 1)[0]
        self.state.stopping.set()
        name = signal.Signals(signum).name
        status, reason = "incomplete", f"{name} during {self.state.where}"
        if signum == signal.SIGTERM and self.state.rank == 0 and _several_ranks():
            failure, sent = _notes(self.records)
            if failure:  # a rank raised and the launcher ended the others: the run failed, and this is why
                status, reason = "failed", failure
            elif sent:  # the --np parent got this signal (Ctrl-C reaches the ranks as SIGTERM from mpiexec)
                name, reason = sent, f"{sent} to microbench --np during {self.state.where}"
            else:  # rank 0 cannot tell why: mpiexec and srun also send SIGTERM when another rank has failed
                reason += " (from the launcher: a time limit, a cancel, or another rank that failed; see its error)"
        _say(f"microbench: rank {self.state.rank}: {name} during {self.state.where}; "
             f"finished sizes are on disk, the run is marked {status}")
        self.state.close(status, reason)
        sys.stdout.flush()
        # Let the launcher forward what this rank printed before it sees the rank exit. The other ranks wait
        # longer: a launcher that sees one rank exit kills the rest at once (Open MPI's prterun with SIGKILL), and
        # on a loaded machine rank 0's signal thread may not have written the end record yet.
        time.sleep(0.3 if self.state.rank == 0 else LINGER_AFTER_SIGNAL_S)
        os._exit(128 + signum)


def failure_note(records: str | None, rank: int) -> str | None:
    """Where a rank other than 0 leaves its error for rank 0 (beside the records; None without records)."""
    return f"{records}.rank{rank}.failed" if records else None


def leave_failure_note(records: str | None, state: RunState, reason: str) -> None:
    """A rank other than 0 that raises: say why beside the records before the job is aborted. Not when a signal
    or the watchdog is already ending the run (``state.stopping``): rank 0 closes the records with that reason,
    and under torchrun a SIGTERM makes the other ranks' collectives fail on rank 0's closed connection, an error
    of the stop whose note nothing would ever read."""
    path = failure_note(records, state.rank)
    if path is None or state.rank == 0 or state.stopping.is_set():
        return
    try:
        with open(path, "w") as f:
            f.write(reason)
    except OSError:  # an output folder this rank cannot reach (no shared filesystem): rank 0 says SIGTERM
        pass


def _notes(records: str | None) -> tuple[str | None, str | None]:
    """(the first failing rank's error, the signal the --np parent received). Both are written before the
    launcher signals rank 0 (the failing rank writes before it aborts; the parent before it passes the signal on),
    so they are read at once: the launcher kills rank 0 soon after its SIGTERM."""
    import glob

    failures = sorted(glob.glob(glob.escape(records) + ".rank*.failed")) if records else []
    if failures:
        try:
            with open(failures[0]) as f:
                text = f.read().strip()
            for path in failures:
                os.unlink(path)
        except OSError:
            text = ""
        rank = failures[0].rsplit(".rank", 1)[1].split(".")[0]
        return f"rank {rank}: {text}", None
    signal_note = os.environ.get(SIGNAL_NOTE_ENV)
    if signal_note and os.path.exists(signal_note):
        with open(signal_note) as f:
            return None, f.read().strip() or None
    return None, None


def _several_ranks() -> bool:
    from microbench.cluster import launch

    info = launch.discover()
    return info.under_launcher and info.size != 1

"""The parent's side: the ranks started (``--np N`` through ``cluster.launch.start_ranks``, as run and replay; or
the user's launcher command after ``--``), watched, and ended when the verdict is in.

With ``--`` the parent is outside the launcher, so it sees what the ranks cannot: a launcher that exits before a
rank exists (its status and its last lines, passed through to the terminal as they come), or one that hangs
starting them. The rank command appended is this Python's microbench (``-m microbench doctor`` for torchrun,
which takes a module), with the coordinator's addresses and token on its command line.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

TAIL_LINES = 40


def rank_command(launcher: list[str], rank_args: list[str]) -> list[str]:
    """The launcher command with the doctor's rank command appended."""
    name = os.path.basename(launcher[0]) if launcher else ""
    is_torchrun = name == "torchrun" or (len(launcher) > 2 and launcher[1:3] == ["-m", "torch.distributed.run"])
    program = ["-m", "microbench"] if is_torchrun else [sys.executable, "-m", "microbench"]
    return [*launcher, *program, "doctor", *rank_args]


class Launched:
    """The user's launcher running the ranks: its output passed through with the last lines kept, signals passed
    on (SIGINT/SIGTERM to this process go to the launcher, and ``on_signal`` is told), its exit reported."""

    def __init__(self, argv: list[str], on_exit, on_signal):
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.muted = False
        self.start = time.monotonic()
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                                         start_new_session=True)
        except OSError as exc:
            from microbench.errors import UsageError

            raise UsageError(f"cannot start the launcher {argv[0]}: {exc.strerror or exc}") from exc
        self._readers = [threading.Thread(target=self._copy, args=(stream, out), daemon=True)
                         for stream, out in ((self.proc.stdout, sys.stdout), (self.proc.stderr, sys.stderr))]
        for t in self._readers:
            t.start()
        self._on_signal = on_signal
        self._previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
        threading.Thread(target=self._wait, args=(on_exit,), daemon=True).start()

    def _copy(self, stream, out) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            self.tail.append(line.rstrip("\n"))
            if self.muted:
                continue
            with contextlib.suppress(Exception):
                out.write(line)
                out.flush()

    def mute(self) -> None:
        """Stop passing the launcher's output through (kept in ``tail``): after the verdict, what it says is about
        the ranks the doctor ends."""
        self.muted = True

    def _wait(self, on_exit) -> None:
        status = self.proc.wait()
        for t in self._readers:
            t.join(timeout=2)
        on_exit(status if status >= 0 else 128 - status)

    def _forward(self, signum, frame) -> None:
        self._on_signal(signal.Signals(signum).name)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signum)

    def end(self, grace_s: float = 5.0) -> None:
        """After the verdict: wait for the launcher to end by itself (its ranks were told to stop), then end it."""
        end_process_group(self.proc, grace_s)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def end_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """``proc`` (started in a session of its own) given ``grace_s`` to exit, then SIGTERM to its group, then
    SIGKILL: a launcher waiting for a rank that will never come back does not outlive the doctor."""
    for signum, wait in ((None, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        if signum is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue

"""The one writer: every record of a run goes to the table, the JSONL file, the CSV file and the samples
file from here, each record one write(2) followed by fsync, so a killed job keeps every finished line.

Every line written is whole: a file whose last line was cut (a job killed mid-write by an older writer, a
disk that filled) gets a newline before the first new record, so the new run's lines are never glued to the
fragment. An output that is a symbolic link is refused (``O_NOFOLLOW``): a link planted in a results folder
cannot make the writer append to another file. Records given to ``Output`` are the builders' (``records.build``),
which pass the record model; ``append_whole`` writes a batch (an import) that lands complete or not at all."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections import deque
from pathlib import Path
from typing import Callable

#: CSV columns, in order (flattened result fields).
CSV_COLUMNS = (
    "run_id", "benchmark", "backend", "size_bytes", "send_bytes", "recv_bytes", "ranks", "dtype", "op",
    "in_place", "iterations", "warmup", "avg_us", "min_us", "max_us", "p10_us", "p50_us", "p90_us",
    "p99_us", "algbw_gbps", "busbw_gbps", "check", "first_call_us", "loop", "cache", "sync",
)


def flatten(result: dict) -> dict:
    """One CSV row from a result record."""
    row = {k: result.get(k) for k in CSV_COLUMNS}
    lat = result.get("latency_us") or {}
    for stat in ("avg", "min", "max", "p10", "p50", "p90", "p99"):
        row[f"{stat}_us"] = lat.get(stat)
    first = result.get("first_call_us")
    row["first_call_us"] = first.get("max") if isinstance(first, dict) else first
    return row


def open_append(path: str | os.PathLike) -> int:
    """A descriptor appending to ``path`` (created, with its missing folders), never through a symbolic link
    (``OSError`` ELOOP names it), positioned after a newline: a file whose last line lacks one gets it first."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
    except OSError:
        os.close(fd)
        raise
    return fd


class AppendFile:
    """A file opened for appending where each record is one write(2) followed by fsync (``open_append``)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = open_append(path)

    def write(self, text: str) -> None:
        if self.fd is None:  # closed: the run already ended (a signal or the watchdog closed the records)
            return
        data = text.encode()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]
        os.fsync(self.fd)

    def is_empty(self) -> bool:
        return os.fstat(self.fd).st_size == 0

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def json_line(record: dict) -> str:
    """A record as one JSON line (compact; NaN and infinity refused)."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


def append_whole(path: str | os.PathLike, records: list[dict]) -> None:
    """Append ``records`` to ``path`` as one write, then fsync; on any failure (a full disk, a file-size limit)
    the file is cut back to its size before, so the batch lands whole or not at all. ``OSError`` says why."""
    data = "".join(json_line(r) for r in records).encode()
    fd = open_append(path)
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, before)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(fd: int):
    """An exclusive advisory lock on an open file (where the OS has flock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class _FileLock:
    """The writer's reentrant lock; when a thread's outermost hold ends, ``on_release`` runs (lock released)."""

    def __init__(self, on_release: Callable[[], None]):
        self._lock = threading.RLock()
        self._depth = threading.local()
        self._on_release = on_release

    def __enter__(self) -> "_FileLock":
        self._lock.acquire()
        self._depth.n = getattr(self._depth, "n", 0) + 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth.n -= 1
        outermost = self._depth.n == 0
        self._lock.release()
        if outermost:
            self._on_release()


class Output:
    """The single writer. Only rank 0 creates one; ``table`` receives (kind, record) for the terminal.

    Thread-safe: the main thread writes results while the signal thread or the watchdog may close the run at
    any moment. Every file write holds ``lock`` (reentrant), and once the end record is written nothing follows
    it; a caller that must write a record and update its own state as one step (a soak cycle) holds ``lock``
    around both. The terminal table is shown only after the lock is released, by one thread at a time, and
    never waited for: a write to a full stdout pipe (a launcher that stopped reading it after a SIGTERM) must not
    keep the signal thread from writing the end record before the launcher's SIGKILL."""

    def __init__(self, jsonl_path: str | None = None, csv_path: str | None = None,
                 table: Callable[[str, dict], None] | None = None, samples_path: str | None = None):
        self._jsonl = AppendFile(jsonl_path) if jsonl_path else None
        self._csv = AppendFile(csv_path) if csv_path else None
        self._samples = AppendFile(samples_path) if samples_path else None
        self._csv_header_done = False  #: decided at the first row, under the file's lock
        self._table = table
        self.results: list[dict] = []
        self.closed = False
        self.lock = _FileLock(self._display)
        self._pending: deque[tuple[str, dict]] = deque()
        self._displaying = threading.Lock()

    def _json(self, record: dict) -> None:
        if self._jsonl:
            self._jsonl.write(json_line(record))

    def _show(self, kind: str, record: dict) -> None:
        """Queue a line for the table (shown by ``_display`` once the file lock is released)."""
        if self._table:
            self._pending.append((kind, record))

    def _display(self) -> None:
        """Show the queued table lines, unless another thread is showing them now (it shows these too)."""
        while self._pending and self._displaying.acquire(blocking=False):
            try:
                while self._pending:
                    self._table(*self._pending.popleft())
            finally:
                self._displaying.release()

    def run(self, meta: dict) -> None:
        """A run record; it opens the run (``microbench import`` writes several runs, each ending in its own
        end record, through one writer)."""
        with self.lock:
            self.closed = False
            self._json(meta)
            self._show("run", meta)

    def section(self, info: dict) -> None:
        """Start of a benchmark (table header only; not a record)."""
        with self.lock:
            self._show("section", info)

    def result(self, result: dict) -> None:
        with self.lock:
            if self.closed:
                return
            self.results.append(result)
            self._json(result)
            if self._csv:
                self._csv_row(result)
            self._show("result", result)

    def _csv_row(self, result: dict) -> None:
        """One CSV row, after the header if the file is empty: decided under an exclusive lock on the file, so
        two runs writing to one new CSV file write one header between them."""
        import csv  # with --csv only

        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
        with _locked(self._csv.fd):
            if not self._csv_header_done and self._csv.is_empty():
                writer.writeheader()
            self._csv_header_done = True
            writer.writerow(flatten(result))
            self._csv.write(buf.getvalue())

    def samples(self, records: list[dict]) -> None:
        """Raw per-iteration samples (``--samples``), one record per rank, in one write."""
        with self.lock:
            if self._samples and records and not self.closed:
                self._samples.write("".join(json_line(r) for r in records))

    def record(self, record: dict) -> None:
        """Any other record (a soak cycle, the soak summary, a bisection): the JSONL file and the table."""
        with self.lock:
            if not self.closed:
                self._json(record)
                self._show(record["type"], record)

    def note(self, text: str) -> None:
        with self.lock:
            self._show("note", {"text": text})

    def end(self, record: dict) -> None:
        """The run's last record: nothing is written after it."""
        with self.lock:
            if self.closed:
                return
            self._json(record)
            self._show("end", record)
            self.closed = True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for f in (self._jsonl, self._csv, self._samples):
                if f:
                    f.close()

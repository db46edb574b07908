"""The one writer: every record of a run goes to the table, the JSONL file, the CSV file and the samples
file from here, each record one write(2) followed by fsync, so a killed job keeps every finished line."""

from __future__ import annotations

import csv
import io
import json
import os
import threading
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


class AppendFile:
    """A file opened for appending where each record is one write(2) followed by fsync."""

    def __init__(self, path: str):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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


class Output:
    """The single writer. Only rank 0 creates one; ``table`` receives (kind, record) for the terminal.

    Thread-safe: the main thread writes results while the signal thread or the watchdog may close the run at
    any moment. Every write holds ``lock`` (reentrant), and once the end record is written nothing follows it;
    a caller that must write a record and update its own state as one step (a soak cycle) holds ``lock``
    around both."""

    def __init__(self, jsonl_path: str | None = None, csv_path: str | None = None,
                 table: Callable[[str, dict], None] | None = None, samples_path: str | None = None):
        self._jsonl = AppendFile(jsonl_path) if jsonl_path else None
        self._csv = AppendFile(csv_path) if csv_path else None
        self._samples = AppendFile(samples_path) if samples_path else None
        self._csv_header_done = bool(self._csv and not self._csv.is_empty())
        self._table = table
        self.results: list[dict] = []
        self.closed = False
        self.lock = threading.RLock()

    def _json(self, record: dict) -> None:
        if self._jsonl:
            self._jsonl.write(json_line(record))

    def _show(self, kind: str, record: dict) -> None:
        if self._table:
            self._table(kind, record)

    def run(self, meta: dict) -> None:
        with self.lock:
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
                buf = io.StringIO()
                writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
                if not self._csv_header_done:
                    writer.writeheader()
                    self._csv_header_done = True
                writer.writerow(flatten(result))
                self._csv.write(buf.getvalue())
            self._show("result", result)

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

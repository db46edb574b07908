"""Result records: the JSON Lines schema, the one writer every output goes through, and the reader.

A file holds one or more runs, appended. Each run is:

- one ``{"type": "run", ...}`` line: schema version, run id, command line, UTC time, hosts, ranks per
  host, library versions, conditions and options;
- one ``{"type": "result", ...}`` line per measured (benchmark, size, configuration), written and
  flushed to disk as soon as the size is done, in a single ``write`` so a killed job leaves no partial line;
- one ``{"type": "end", "status": "complete" | "incomplete" | "failed", ...}`` line when the run stops.

Readers skip fields they do not know and refuse schema versions newer than ``SCHEMA_VERSION``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from microbench.errors import UsageError

SCHEMA_VERSION = 1

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


class Output:
    """The single writer: every record goes to the table, the JSONL file and the CSV file from here.

    Only rank 0 creates one. ``table`` is a callable receiving (kind, record) for terminal output.
    """

    def __init__(self, jsonl_path: str | None = None, csv_path: str | None = None, table=None):
        self._jsonl = AppendFile(jsonl_path) if jsonl_path else None
        self._csv = AppendFile(csv_path) if csv_path else None
        self._csv_header_done = bool(self._csv and not self._csv.is_empty())
        self._table = table
        self.results: list[dict] = []
        self.closed = False

    def _json(self, record: dict) -> None:
        if self._jsonl:
            self._jsonl.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")

    def run(self, meta: dict) -> None:
        self._json(meta)
        if self._table:
            self._table("run", meta)

    def section(self, info: dict) -> None:
        """Start of a benchmark (table header only; not a record)."""
        if self._table:
            self._table("section", info)

    def result(self, result: dict) -> None:
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
        if self._table:
            self._table("result", result)

    def note(self, text: str) -> None:
        if self._table:
            self._table("note", {"text": text})

    def end(self, record: dict) -> None:
        self._json(record)
        if self._table:
            self._table("end", record)

    def close(self) -> None:
        self.closed = True
        for f in (self._jsonl, self._csv):
            if f:
                f.close()


# ------------------------------------------------------------------------------- reading
@dataclass
class Run:
    """One run read back: its metadata line, its result lines, its end line (None if it never ended)."""

    meta: dict
    results: list[dict] = field(default_factory=list)
    end: dict | None = None
    source: str = ""

    @property
    def run_id(self) -> str | None:
        return self.meta.get("run_id")

    @property
    def complete(self) -> bool:
        return bool(self.end) and self.end.get("status") == "complete"


def _paths(items: Iterable[str | os.PathLike]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.rglob("*.jsonl")))
        elif p.exists():
            out.append(p)
        else:
            raise UsageError(f"no such results file: {p}")
    return out


def read_runs(paths: Iterable[str | os.PathLike], strict: bool = False) -> list[Run]:
    """Read every run from JSONL files or directories of them (``*.jsonl`` below a directory).

    Results are attached to the run line with the same ``run_id`` (or the last run line seen).
    An unparsable line (a truncated last line, say) is skipped unless ``strict``; a schema newer than
    this reader knows is an error.
    """
    runs: list[Run] = []
    for path in _paths(paths):
        by_id: dict[str, Run] = {}
        current: Run | None = None
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from exc
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if strict:
                    raise UsageError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from exc
                continue
            if not isinstance(rec, dict):
                continue
            kind = rec.get("type")
            if kind == "run":
                schema = rec.get("schema", 1)
                if not isinstance(schema, int) or schema > SCHEMA_VERSION:
                    raise UsageError(f"{path}:{lineno}: record schema {schema} is newer than this microbench "
                                     f"reads ({SCHEMA_VERSION}); upgrade microbench")
                current = Run(meta=rec, source=str(path))
                runs.append(current)
                if rec.get("run_id"):
                    by_id[rec["run_id"]] = current
            elif kind in ("result", "end"):
                owner = by_id.get(rec.get("run_id")) or current
                if owner is None:
                    owner = current = Run(meta={}, source=str(path))
                    runs.append(owner)
                if kind == "result":
                    owner.results.append(rec)
                else:
                    owner.end = rec
    return runs


def read_results(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Every result record in the files, each with its run's metadata under the key ``"run"``."""
    out = []
    for run in read_runs(paths):
        for res in run.results:
            out.append({**res, "run": run.meta})
    return out

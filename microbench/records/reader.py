"""Reading records back: runs (their run line, results and end line) from JSONL files or directories.

Files are found and opened as every reader does (``records.files``: regular files below folders, each once,
a size cap, a leading byte-order mark dropped). An unparsable line (a truncated last line, say) is skipped
unless ``strict``; a run line whose schema is not one this reader knows, and a record whose fields break the
schema where a reader relies on them (``check_record``), are refused, naming the file and line. Control
characters in strings are replaced (``errors.clean``): what a file holds must not drive the terminal.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import msgspec

from microbench.errors import UsageError, clean, printable
from microbench.records.build import SCHEMA_VERSION
from microbench.records.files import find_jsonl, read_capped

MAX_COUNT = 2 ** 62  #: the largest size or rank count a record may hold


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


def _paths(items: Iterable[str | os.PathLike], skipped: list[str] | None = None) -> list[Path]:
    return find_jsonl(items, skipped)


def _number(value: object, low: float = 0.0, high: float = math.inf) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= high)


def check_record(rec: dict) -> str | None:
    """What makes a record unusable by a reader (None when nothing): a schema that is not a version this
    reader knows, a run id that is not text, a size or rank count that is not a whole number in range, a
    latency statistic or bandwidth that is not a finite number of at least 0."""
    kind = rec.get("type")
    if kind == "run" and "schema" in rec:
        schema = rec["schema"]
        if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
            return f"record schema {printable(repr(schema))[:40]} is not a schema version (a whole number)"
        if schema > SCHEMA_VERSION:
            return f"record schema {schema} is newer than this microbench reads ({SCHEMA_VERSION}); upgrade microbench"
    if "run_id" in rec and rec["run_id"] is not None and not isinstance(rec["run_id"], str):
        return "run_id: not a string"
    if kind != "result":
        return None
    for name, low in (("size_bytes", 0), ("ranks", 1), ("requested_bytes", 0)):
        value = rec.get(name)
        if value is not None and not (isinstance(value, int) and _number(value, low, MAX_COUNT)):
            return f"{name}: {printable(repr(value))[:40]} is not a whole number from {low} to 2**62"
    if rec.get("check") is not None and not isinstance(rec["check"], str):
        return "check: not a string"
    latency = rec.get("latency_us")
    if latency is not None:
        if not isinstance(latency, dict):
            return "latency_us: not an object"
        for stat, value in latency.items():
            if stat != "over" and not _number(value):
                shown = printable(repr(value))[:40]
                return f"latency_us.{printable(str(stat))[:40]}: {shown} is not a finite number >= 0"
    for name in ("algbw_gbps", "busbw_gbps", "algbw_bytes", "busbw_factor"):
        value = rec.get(name)
        if value is not None and not _number(value):
            return f"{name}: {printable(repr(value))[:40]} is not a finite number >= 0"
    return None


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
        data = read_capped(path)
        for lineno, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                rec = msgspec.json.decode(line)
            except UnicodeDecodeError:
                raise UsageError(f"{path}:{lineno}: not UTF-8 text") from None
            except RecursionError:
                raise UsageError(f"{path}:{lineno}: JSON nested too deeply to be a record") from None
            except msgspec.DecodeError as exc:
                if strict or "out of range" in str(exc):
                    raise UsageError(f"{path}:{lineno}: not a JSON record ({exc})") from None
                continue
            if not isinstance(rec, dict):
                continue
            if b"\\" in line or b"\xc2" in line or b"\x7f" in line:  # maybe a control character (an escape: \\r, \\u001b)
                rec = clean(rec)
            kind = rec.get("type")
            if kind in ("run", "result", "end"):
                problem = check_record(rec)
                if problem:
                    raise UsageError(f"{path}:{lineno}: {problem}")
            if kind == "run":
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

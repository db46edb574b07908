"""Streaming the JSON Lines records for the gate tools: each file decoded once, only the fields they read.

The JSONL files are the system of record (``microbench.records.writer`` writes them); this module reads them fast and in
bounded memory. A file is read whole (one nightly file is a few hundred kB) and decoded by msgspec into
small typed structs that hold only the fields a gate tool reads: the configuration key, the latency
statistics asked for, bandwidth inputs, check state, pairs matrices (kept as raw JSON until drawn), and
from run lines the conditions a report names (hosts, MPI library, versions, environment). Every other
field is skipped by the decoder without building a Python object, which is what makes a year of
nightlies a second's work (docs/results-at-scale.md has the measurements).

What the scanner tolerates, and says: a line that is not JSON (a truncated or corrupt line, anywhere in a
file) is skipped and noted with its file and line number; a JSON line that is not a microbench record
(no ``type`` of run/result/end: another tool's import) is skipped and counted. A run line whose schema is
newer than this reader is a UsageError that names the file: its fields may mean something else.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

import msgspec

from microbench.errors import UsageError
from microbench.results.keys import DERIVED_WHEN_ABSENT, RAW_FIELDS
from microbench.results.metrics import LATENCY_STATS
from microbench.records import SCHEMA_VERSION
from microbench.records.files import results_files

RECORD_TYPES = ("run", "result", "end")
#: Run-line fields kept for reports (conditions of a change point, filters, labels); the rest is skipped.
RUN_FIELDS = ("schema", "run_id", "time_utc", "command", "backend", "ranks", "hosts", "ranks_per_host", "launcher",
              "slurm", "mpi", "torch", "device", "versions", "conditions", "microbench_version")
#: Result fields besides the key and the latency statistics.
RESULT_FIELDS = ("requested_bytes", "algbw_bytes", "busbw_factor", "algbw_gbps", "busbw_gbps", "check")
#: Pairs-test fields (and the non-blocking benchmarks' ``overlap``), kept as raw JSON bytes and decoded only for
#: the records that have them.
RAW_JSON_FIELDS = ("outliers", "node_outliers", "matrix", "labels", "participant_ranks", "overlap")
NO_RAW = msgspec.Raw(b"")  #: an absent raw field


def raw_present(raw: msgspec.Raw) -> bool:
    """Whether a raw JSON field holds a value (not absent, not null)."""
    return len(raw) > 0 and bytes(raw) != b"null"


#: Fields with a declared type: a line where one has another type is not a record this reader knows.
TYPED_FIELDS = {"type": Optional[str], "run_id": Optional[str], "time_utc": Optional[str],
                "requested_bytes": Optional[int], "algbw_bytes": Optional[float], "busbw_factor": Optional[float],
                "algbw_gbps": Optional[float], "busbw_gbps": Optional[float]}


#: Of a record's ``stragglers`` block only the skew (slowest over fastest rank mean) is read.
_STRAGGLERS = msgspec.defstruct("Stragglers", [("skew", Optional[float], None)])


@lru_cache(maxsize=16)
def line_type(stats: tuple[str, ...]) -> type:
    """The struct one line decodes into: the union of run, result and end fields a gate tool reads, with
    the latency statistics ``stats`` only (an absent ``latency_us`` decodes as one with every stat None).
    ``call_path`` and ``mpi_call`` are UNSET when absent (keys derives them then)."""
    latency = msgspec.defstruct("Latency", [(s, Optional[float], None) for s in stats])
    names = dict.fromkeys((*RAW_FIELDS, *RESULT_FIELDS, *RUN_FIELDS, "type", "status", "matrix_unit", "unit"))
    fields: list[tuple] = [(n, TYPED_FIELDS.get(n, Any), msgspec.UNSET if n in DERIVED_WHEN_ABSENT else None)
                           for n in names]
    fields.append(("latency_us", Optional[latency], msgspec.field(default_factory=latency)))
    fields.append(("stragglers", Optional[_STRAGGLERS], None))
    fields += [(n, msgspec.Raw, NO_RAW) for n in RAW_JSON_FIELDS]
    return msgspec.defstruct("Line", fields)


@dataclass
class ScanNotes:
    """What the scan skipped, for one line on stderr per kind."""

    bad_lines: list[str] = field(default_factory=list)  #: FILE:LINE of lines that are not JSON records
    foreign: dict[str, int] = field(default_factory=dict)  #: file -> JSON lines that are no microbench record
    files: int = 0
    bytes: int = 0
    cached: int = 0  #: files whose part came from the index
    skipped_files: list[str] = field(default_factory=list)  #: what below a folder was not a regular file

    def add(self, path: Path, bad_lines: list[int], foreign: int, size: int) -> None:
        self.files += 1
        self.bytes += size
        self.bad_lines += [f"{path}:{n}" for n in bad_lines]
        if foreign:
            self.foreign[str(path)] = foreign

    def lines(self) -> list[str]:
        out = list(self.skipped_files)
        if self.bad_lines:
            shown = ", ".join(self.bad_lines[:5]) + (" ..." if len(self.bad_lines) > 5 else "")
            out.append(f"skipped {len(self.bad_lines)} unreadable line(s) (not a JSON record; a truncated or "
                       f"corrupt write): {shown}")
        if self.foreign:
            count = sum(self.foreign.values())
            names = ", ".join(sorted(self.foreign)[:3]) + (" ..." if len(self.foreign) > 3 else "")
            out.append(f"skipped {count} line(s) that are not microbench records (another tool's output?) in "
                       f"{len(self.foreign)} file(s): {names}")
        return out


def jsonl_paths(items: Iterable[str | os.PathLike], notes: "ScanNotes | None" = None) -> list[Path]:
    """Files named, and every regular ``*.jsonl`` below folders named (``records.files``: each file once, each
    folder once); what was skipped goes to ``notes``."""
    files, skipped = results_files(items)
    if notes is not None:
        notes.skipped_files += skipped
    return files


@dataclass
class Decoded:
    """One file's microbench records (in file order) and what was skipped."""

    records: list
    bad_lines: list[int]  #: line numbers (from 1) that are not JSON
    foreign: int  #: JSON lines that are not microbench records
    size: int  #: bytes read


def decode_file(path: Path, stats: tuple[str, ...] = LATENCY_STATS) -> Decoded:
    """The records of one file that have a microbench ``type``; others counted and skipped. A run line of
    a newer schema is a UsageError naming the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    decoder = _decoder(stats)
    bad: list[int] = []
    foreign = 0
    try:
        lines = decoder.decode_lines(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # a bad line (invalid UTF-8, 100k deep)
        lines, bad, foreign = _decode_one_by_one(decoder, data)
    records = [line for line in lines if line.type in RECORD_TYPES]
    for index, rec in enumerate(lines):
        if rec.type == "run":
            _check_schema(rec.schema, path)
        elif rec.type == "result":
            problem = impossible_value(rec, stats)
            if problem:
                raise UsageError(f"{path}:{_line_number(data, rec, index, bad)}: {problem}: not a possible result "
                                 f"(docs/records.md: figures finite and non-negative, sizes and ranks whole numbers); "
                                 f"refused, nothing judged")
    return Decoded(records, bad, foreign + len(lines) - len(records), len(data))


#: figures of a result the schema says are non-negative numbers
_NON_NEGATIVE = ("algbw_gbps", "busbw_gbps", "algbw_bytes", "busbw_factor")


def impossible_value(rec, stats: tuple[str, ...]) -> str | None:
    """What makes a decoded result impossible (a negative or non-finite latency or bandwidth, a size or rank count
    that is not a whole number from 1 to 2^62), or None."""
    for name in ("size_bytes", "ranks"):
        value = getattr(rec, name)
        if value is not None and (type(value) is not int or not 1 <= value <= 1 << 62):
            return f"{name} is {str(value)[:40]!r}"
    lat = rec.latency_us
    for stat in stats if lat is not None else ():
        value = getattr(lat, stat)
        if value is not None and not (0.0 <= value < math.inf):
            return f"latency_us.{stat} is {value}"
    for name in _NON_NEGATIVE:
        value = getattr(rec, name)
        if value is not None and not (0.0 <= value < math.inf):
            return f"{name} is {value}"
    return None


def _line_number(data: bytes, rec, index: int, bad: list[int]) -> int | str:
    """The line of the ``index``-th decoded record (decoded lines are the non-blank ones less the bad ones)."""
    numbers = [n for n, line in enumerate(data.split(b"\n"), 1) if line.strip() and n not in set(bad)]
    return numbers[index] if index < len(numbers) else "?"


@lru_cache(maxsize=16)
def _decoder(stats: tuple[str, ...]) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(line_type(stats))


def _decode_one_by_one(decoder, data: bytes) -> tuple[list, list[int], int]:
    """Line by line, for a file with a bad line: (good lines, bad line numbers, foreign lines). A JSON value
    that is not an object, or an object whose read fields have the wrong type, counts as foreign."""
    out, bad, foreign = [], [], 0
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            out.append(decoder.decode(line))
        except msgspec.ValidationError:
            foreign += 1
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            bad.append(lineno)
    return out, bad, foreign


def _check_schema(schema: Any, path: Path) -> None:
    if schema is None:
        return
    if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA_VERSION:
        raise UsageError(f"{path}: record schema {schema} is newer than this microbench reads ({SCHEMA_VERSION}); "
                         "upgrade microbench, or leave the file out")

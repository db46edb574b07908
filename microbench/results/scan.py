"""Streaming the JSON Lines records for the gate tools: each file decoded once, only the fields they read.

The JSONL files are the system of record (``microbench.records.writer`` writes them); this module reads them fast and in
bounded memory. A file is read whole (one nightly file is a few hundred kB) and decoded by msgspec into
small typed structs that hold only the fields a gate tool reads: the configuration key, the latency
statistics asked for, bandwidth inputs, check state, pairs matrices (kept as raw JSON until drawn), and
from run lines the conditions a report names (hosts, MPI library, versions, environment). Every other
field is skipped by the decoder without building a Python object, which is what makes a year of
nightlies a second's work (docs/results-at-scale.md has the measurements).

Files are found and opened as every reader does (``records.files``: regular files below folders, each
folder once, a size cap, a leading byte-order mark dropped). What the scanner tolerates, and says: a line
that is not JSON (a truncated or corrupt line, anywhere in a file) is skipped and noted with its file and
line number; a JSON line that is not a microbench record (no microbench ``type``: another tool's import) is
skipped and counted; microbench's own records that the gate tools do not read (``UNREAD_TYPES``) are skipped. What it refuses, naming the file and line (UsageError): a run line whose
schema is not one this reader knows (checked on the line as written, before its other fields: they may
mean something else), and a microbench record whose fields break the schema (``TYPED_FIELDS``: a type, a
negative latency or bandwidth, a size beyond ``MAX_COUNT``), bytes that are not UTF-8, nesting too deep.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Union

import msgspec

from microbench.errors import UsageError, printable
from microbench.records.files import find_jsonl, read_capped
from microbench.results.keys import DERIVED_WHEN_ABSENT, OPTION_FIELDS, RAW_FIELDS
from microbench.results.metrics import LATENCY_STATS
from microbench.records import SCHEMA_VERSION

RECORD_TYPES = ("run", "result", "end")
#: microbench's own records that the gate tools do not read (per-sample dumps, soak cycles, bisection, replay):
#: skipped without a word, unlike another tool's lines
UNREAD_TYPES = ("samples", "cycle", "soak", "bisect", "replay")
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


MAX_COUNT = 2 ** 62  #: the largest size or rank count a reader takes (beyond it int64 columns overflow)
_BYTES = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
_NONNEGATIVE = Annotated[float, msgspec.Meta(ge=0)]  #: JSON numbers decode finite (1e400 is refused)

#: Fields with a declared type (as the schema declares them): a microbench record where one has another type,
#: or a value out of its range, is refused naming its file and line.
TYPED_FIELDS = {"type": Optional[str], "run_id": Optional[str], "time_utc": Optional[str],
                "benchmark": Optional[str], "backend": Optional[str], "size_bytes": Optional[_BYTES],
                "ranks": Optional[Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]],
                "requested_bytes": Optional[_BYTES], "algbw_bytes": Optional[_NONNEGATIVE],
                "busbw_factor": Optional[_NONNEGATIVE], "algbw_gbps": Optional[_NONNEGATIVE],
                "busbw_gbps": Optional[_NONNEGATIVE], "check": Optional[str],
                "window": Optional[Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]],
                "root": Optional[Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]]}
#: the other option fields of the key, as ``keys.OPTION_FIELDS`` types them (``device`` is an object on a run
#: line and a string on a result: not typed; ``call_path`` and ``mpi_call`` may be absent, UNSET)
TYPED_FIELDS.update({name: Optional[kind] if name not in DERIVED_WHEN_ABSENT else Union[kind, None, msgspec.UnsetType]
                     for name, kind in OPTION_FIELDS.items()
                     if name not in TYPED_FIELDS and name not in ("device", "checked")})


#: Of a record's ``stragglers`` block only the skew (slowest over fastest rank mean) is read.
_STRAGGLERS = msgspec.defstruct("Stragglers", [("skew", Optional[_NONNEGATIVE], None)])


@lru_cache(maxsize=16)
def line_type(stats: tuple[str, ...]) -> type:
    """The struct one line decodes into: the union of run, result and end fields a gate tool reads, with
    the latency statistics ``stats`` only (an absent ``latency_us`` decodes as one with every stat None).
    ``call_path`` and ``mpi_call`` are UNSET when absent (keys derives them then)."""
    latency = msgspec.defstruct("Latency", [(s, Optional[_NONNEGATIVE], None) for s in stats])
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
    skipped_files: list[str] = field(default_factory=list)  #: 'PATH (why)' of names passed over below folders
    index_refused: str = ""  #: why the index folder was not used (``index.unsafe_reason``)

    def add(self, path: Path, bad_lines: list[int], foreign: int, size: int) -> None:
        self.files += 1
        self.bytes += size
        self.bad_lines += [f"{path}:{n}" for n in bad_lines]
        if foreign:
            self.foreign[str(path)] = foreign

    def lines(self) -> list[str]:
        out = [self.index_refused] if self.index_refused else []
        if self.skipped_files:
            shown = ", ".join(self.skipped_files[:5]) + (" ..." if len(self.skipped_files) > 5 else "")
            out.append(f"skipped {len(self.skipped_files)} name(s) that are not regular files: {shown}")
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


def jsonl_paths(items: Iterable[str | os.PathLike], notes: ScanNotes | None = None) -> list[Path]:
    """Files named, and every regular ``*.jsonl`` below folders named (``records.files.find_jsonl``: folders
    entered once, anything but a regular file skipped, into ``notes``); each file once (by device and inode)."""
    return find_jsonl(items, notes.skipped_files if notes is not None else None)


@dataclass
class Decoded:
    """One file's microbench records (in file order) and what was skipped."""

    records: list
    bad_lines: list[int]  #: line numbers (from 1) that are not JSON
    foreign: int  #: JSON lines that are not microbench records
    size: int  #: bytes read


def decode_file(path: Path, stats: tuple[str, ...] = LATENCY_STATS) -> Decoded:
    """The records of one file that have a microbench ``type``; others counted and skipped. A run line of
    a newer schema, and a microbench record whose fields break the schema (a type, a negative latency, a
    size beyond ``MAX_COUNT``, bytes that are not UTF-8, nesting too deep to decode), are UsageErrors
    naming the file and line; a line that is not JSON at all (a truncated write) is skipped and noted."""
    data = read_capped(path)
    decoder = _decoder(stats)
    bad: list[int] = []
    foreign = 0
    try:
        lines = decoder.decode_lines(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        lines, bad, foreign = _decode_one_by_one(decoder, data, path)
    records = [line for line in lines if line.type in RECORD_TYPES]
    for rec in records:
        if rec.type == "run":
            _check_schema(rec.schema, path)
    unread = sum(1 for line in lines if line.type in UNREAD_TYPES)
    return Decoded(records, bad, foreign + len(lines) - len(records) - unread, len(data))


@lru_cache(maxsize=16)
def _decoder(stats: tuple[str, ...]) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(line_type(stats))


def _decode_one_by_one(decoder, data: bytes, path: Path) -> tuple[list, list[int], int]:
    """Line by line, for a file with a line the fast path refused: (good lines, bad line numbers, foreign
    lines). A JSON value that is not a microbench record counts as foreign; a microbench record that breaks
    the schema (and any line too deep or not UTF-8) is a UsageError naming ``path`` and the line."""
    out, bad, foreign = [], [], 0
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            rec = decoder.decode(line)
        except UnicodeDecodeError:
            raise UsageError(f"{path}:{lineno}: not UTF-8 text") from None
        except RecursionError:
            raise UsageError(f"{path}:{lineno}: JSON nested too deeply to be a record") from None
        except msgspec.ValidationError as exc:
            raw = _loose(line)
            if not isinstance(raw, dict) or raw.get("type") not in RECORD_TYPES:
                foreign += 0 if isinstance(raw, dict) and raw.get("type") in UNREAD_TYPES else 1
                continue
            if raw.get("type") == "run":
                _check_schema(raw.get("schema"), f"{path}:{lineno}")
            article = "an" if raw["type"] == "end" else "a"
            raise UsageError(f"{path}:{lineno}: {article} {raw['type']} record that breaks the schema: "
                             f"{printable(str(exc))}") from None
        except msgspec.DecodeError:
            bad.append(lineno)
            continue
        if rec.type == "run":
            _check_schema(rec.schema, f"{path}:{lineno}")
        out.append(rec)
    return out, bad, foreign


def _loose(line: bytes) -> Any:
    """A line decoded without a type (None when even that fails)."""
    try:
        return msgspec.json.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _check_schema(schema: Any, where: Path | str) -> None:
    if schema is None:
        return
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise UsageError(f"{where}: record schema {printable(repr(schema))[:40]} is not a schema version (a whole "
                         f"number; this microbench reads {SCHEMA_VERSION})")
    if schema > SCHEMA_VERSION:
        raise UsageError(f"{where}: record schema {schema} is newer than this microbench reads ({SCHEMA_VERSION}); "
                         "upgrade microbench, or leave the file out")

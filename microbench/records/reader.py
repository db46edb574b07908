"""Reading records back as rows: every line decoded into the model's types (``records.model``), checked, and
attached to its run by run id.

This is the row view of the one way records are read; the columnar view (``results.scan``) decodes a
projection of the same types and checks the same relations. Files are found and opened by ``records.files``
(regular files below folders, each once, links that leave a folder refused, size known before reading,
bounded memory). Per line:

- a line that is not JSON (a truncated last line, a line cut by a crash) is skipped and noted with its
  ``FILE:LINE``, unless ``strict``;
- a line of a newer schema than this reader knows is refused before anything else in it is read (its other
  fields may mean something else): the ``schema`` is looked for in the line's raw text when the line does not
  decode;
- a JSON line that is not a microbench record (no microbench ``type``) is counted as foreign and skipped;
- a microbench record whose fields break the model (a type, a range, a relation its figures must satisfy) is a
  UsageError naming ``FILE:LINE``.

Results, end lines and the diagnostics' records attach to the run line with the same ``run_id``, never to
whichever run line came last: a result whose run line is missing or unreadable belongs to a run of its own
with no metadata (outside any selection by hosts, backend or MPI).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import msgspec

from microbench.errors import UsageError, clean, printable
from microbench.records import model, relations
from microbench.records.files import ResultsFile, find_results, lines
from microbench.records.model import SCHEMA_VERSION

_DECODER = msgspec.json.Decoder(model.AnyRecord)
_SCHEMA_IN_TEXT = re.compile(rb'"schema"\s*:\s*(-?\d{1,30})\b')


@dataclass
class ReadNotes:
    """What a read skipped, for one line on stderr per kind (both readers use it)."""

    bad_lines: list[str] = field(default_factory=list)  #: FILE:LINE of lines that are not JSON records
    foreign: dict[str, int] = field(default_factory=dict)  #: file -> JSON lines that are no microbench record
    files: int = 0
    bytes: int = 0
    cached: int = 0  #: files whose part came from the index
    skipped_files: list[str] = field(default_factory=list)  #: 'PATH (why)' of names passed over below folders
    index_refused: str = ""  #: why the index folder was not used
    orphans: int = 0  #: runs whose records name a run id with no readable run line
    other: list[str] = field(default_factory=list)  #: further notes, one line each

    def add(self, path, bad_lines: list[int], foreign: int, size: int, orphans: int = 0) -> None:
        self.files += 1
        self.bytes += size
        self.bad_lines += [f"{printable(str(path))}:{n}" for n in bad_lines]
        if foreign:
            self.foreign[printable(str(path))] = foreign
        self.orphans += orphans

    def lines(self) -> list[str]:
        out = [self.index_refused] if self.index_refused else []
        if self.skipped_files:
            shown = ", ".join(self.skipped_files[:5]) + (" ..." if len(self.skipped_files) > 5 else "")
            out.append(f"skipped {len(self.skipped_files)} name(s) that are not regular files below the folder, "
                       f"or links that leave it: {shown}")
        if self.bad_lines:
            shown = ", ".join(self.bad_lines[:5]) + (" ..." if len(self.bad_lines) > 5 else "")
            out.append(f"skipped {len(self.bad_lines)} unreadable line(s) (not a JSON record; a truncated or "
                       f"corrupt write, or longer than a line may be): {shown}")
        if self.foreign:
            count = sum(self.foreign.values())
            names = ", ".join(sorted(self.foreign)[:3]) + (" ..." if len(self.foreign) > 3 else "")
            out.append(f"skipped {count} line(s) that are not microbench records (another tool's output?) in "
                       f"{len(self.foreign)} file(s): {names}")
        if self.orphans:
            out.append(f"{self.orphans} run(s) have records but no readable run line: each is read as a run of "
                       "its own with no metadata (outside any --hosts, --backend or --mpi selection)")
        return out + self.other


def schema_problem(raw: object, line: bytes) -> str | None:
    """Why a line that did not decode as a record must be refused for its schema (None: not for that): its
    ``schema`` is not a version number, or is newer than this reader knows. Looked for in the decoded value,
    else (a line that is not even JSON: a newer writer's NaN) in the raw text."""
    if isinstance(raw, dict):
        if "schema" not in raw:
            return None
        schema = raw["schema"]
        if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
            return (f"record schema {printable(repr(schema))[:40]} is not a schema version (a whole number; this "
                    f"microbench reads {SCHEMA_VERSION})")
    else:
        found = _SCHEMA_IN_TEXT.search(line[:65536])
        if not found:
            return None
        schema = int(found.group(1))
    if schema > SCHEMA_VERSION:
        return (f"record schema {schema} is newer than this microbench reads ({SCHEMA_VERSION}); upgrade "
                "microbench, or leave the file out")
    return None


def loose(line: bytes) -> object:
    """A line decoded without a type (None when it is not JSON)."""
    try:
        return msgspec.json.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


class Foreign:
    """A JSON line that is no microbench record."""


FOREIGN = Foreign()


def decode_line(line: bytes, where: str, decoder: msgspec.json.Decoder = _DECODER):
    """One line as a record of the model (or a projection of it, with ``decoder``), ``FOREIGN``, or None when
    the line is not JSON. A record that breaks the model, a newer schema, bytes that are not UTF-8 or nesting
    too deep are UsageErrors naming ``where`` (FILE:LINE)."""
    try:
        return decoder.decode(line)
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    except RecursionError:
        raise UsageError(f"{where}: JSON nested too deeply to be a record") from None
    except msgspec.ValidationError as exc:
        raw = loose(line)
        problem = schema_problem(raw, line)
        if problem:
            raise UsageError(f"{where}: {problem}") from None
        kind = raw.get("type") if isinstance(raw, dict) else None
        if not isinstance(kind, str) or kind not in model.RECORD_TYPES:
            return FOREIGN
        article = "an" if raw["type"] == "end" else "a"
        raise UsageError(f"{where}: {article} {raw['type']} record that breaks the record model: "
                         f"{printable(str(exc))}") from None
    except msgspec.DecodeError as exc:
        problem = schema_problem(None, line)
        if problem:
            raise UsageError(f"{where}: {problem}") from None
        if "out of range" in str(exc):
            raise UsageError(f"{where}: a number out of range ({printable(str(exc))})") from None
        return None


@dataclass
class Run:
    """One run read back: its metadata line, its result lines, its end line (None if it never ended), the
    diagnostics' records (cycle, soak, bisect) and where it came from. A run whose records name a run id
    with no readable run line has ``meta`` empty and its id in ``orphan_id``."""

    meta: dict
    results: list[dict] = field(default_factory=list)
    end: dict | None = None
    source: str = ""
    others: list[dict] = field(default_factory=list)
    orphan_id: str | None = None

    @property
    def run_id(self) -> str | None:
        return self.meta.get("run_id")

    @property
    def complete(self) -> bool:
        return bool(self.end) and self.end.get("status") == "complete"


def file_records(f: ResultsFile, notes: ReadNotes | None = None, strict: bool = False
                 ) -> Iterator[tuple[int, model.Record, dict]]:
    """(line number, record, the record as a dictionary) of every microbench record of one file, each checked
    against the model; the dictionary's strings hold no control characters (``errors.clean``)."""
    bad: list[int] = []
    foreign = 0
    shown = printable(str(f.path))
    for number, text in lines(f):
        where = f"{shown}:{number}"
        if len(text) > model.MAX_RUN_LINE_BYTES and is_run_line(text):
            raise UsageError(f"{where}: a run line of {len(text)} bytes, more than a run line may hold "
                             f"({model.MAX_RUN_LINE_BYTES} bytes; microbench writes them under 1 MiB)")
        record = decode_line(text, where) if text else None
        if record is None:
            if strict:
                raise UsageError(f"{where}: not a JSON record" + ("" if text else " (longer than a line may be)"))
            bad.append(number)
            continue
        if record is FOREIGN:
            foreign += 1
            continue
        problem = relations.problems(record)
        if problem:
            raise UsageError(f"{where}: {printable(problem)}")
        try:
            data = msgspec.to_builtins(record)
            if b"\\" in text or b"\xc2" in text or b"\x7f" in text:  # a control character may hide here
                data = clean(data)
        except RecursionError:
            raise UsageError(f"{where}: JSON nested too deeply to be a record") from None
        yield number, record, data
    if notes is not None:
        notes.add(f.path, bad, foreign, f.size)


_TYPE_ONLY = msgspec.json.Decoder(msgspec.defstruct("TypeOnly", [("type", object, None)]))


def is_run_line(text: bytes) -> bool:
    """Whether a line is a run line, read without decoding anything else of it."""
    try:
        return _TYPE_ONLY.decode(text).type == "run"
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False


def read_runs(paths: Iterable[str | os.PathLike], strict: bool = False,
              notes: ReadNotes | None = None) -> list[Run]:
    """Every run of JSONL files or folders of them (``*.jsonl`` below a folder), records attached by run id.

    ``strict``: an unreadable line is an error rather than a note. ``notes`` collects what was skipped."""
    runs: list[Run] = []
    notes = notes if notes is not None else ReadNotes()
    for f in find_results(paths, notes.skipped_files):
        by_id: dict[str | None, Run] = {}
        orphans = 0
        for _, record, data in file_records(f, notes, strict):
            if isinstance(record, model.RunRecord):
                run = by_id.get(record.run_id)
                if run is not None and not run.meta and run.orphan_id == record.run_id:
                    run.meta, run.orphan_id = data, None  # its records came first: the run line joins them
                    orphans -= 1
                else:
                    run = by_id[record.run_id] = Run(meta=data, source=str(f.path))
                    runs.append(run)
                continue
            if isinstance(record, (model.SamplesRecord, model.ReplayRecord, model.DoctorRecord)):
                continue  # records of their own, not parts of a run (read_records reads them)
            owner = by_id.get(record.run_id)
            if owner is None:
                owner = by_id[record.run_id] = Run(meta={}, source=str(f.path), orphan_id=record.run_id)
                runs.append(owner)
                orphans += 1
            if isinstance(record, model.ResultRecord):
                owner.results.append(data)
            elif isinstance(record, model.EndRecord):
                owner.end = data
            else:
                owner.others.append(data)
        notes.orphans += orphans
    return runs


def read_results(paths: Iterable[str | os.PathLike], notes: ReadNotes | None = None) -> list[dict]:
    """Every result record in the files, each with its run's metadata under the key ``"run"``."""
    out = []
    for run in read_runs(paths, notes=notes):
        for res in run.results:
            out.append({**res, "run": run.meta})
    return out


def read_records(paths: Iterable[str | os.PathLike], kinds: tuple[type[model.Record], ...],
                 notes: ReadNotes | None = None) -> list[tuple[str, int, dict]]:
    """(FILE, LINE, record) of every record of the given kinds (e.g. ``model.ReplayRecord``), checked."""
    notes = notes if notes is not None else ReadNotes()
    out = []
    for f in find_results(paths, notes.skipped_files):
        for number, record, data in file_records(f, notes):
            if isinstance(record, kinds):
                out.append((printable(str(f.path)), number, data))
    return out


def read_run(path: str | os.PathLike, run_id: str) -> Run | None:
    """One run's records from one file (None when the file holds none of them): only lines that hold the id's
    text are decoded, each checked like any other line."""
    f = find_results([path])[0]
    needle = msgspec.json.encode(run_id)[1:-1]  # the id as it is written inside a JSON string
    shown = printable(str(f.path))
    out: Run | None = None
    for number, text in lines(f):
        if needle not in text:
            continue
        record = decode_line(text, f"{shown}:{number}")
        if record is None or record is FOREIGN or getattr(record, "run_id", None) != run_id:
            continue
        problem = relations.problems(record)
        if problem:
            raise UsageError(f"{shown}:{number}: {printable(problem)}")
        out = out or Run(meta={}, source=str(f.path), orphan_id=run_id)
        data = msgspec.to_builtins(record)
        if isinstance(record, model.RunRecord):
            out.meta, out.orphan_id = data, None
        elif isinstance(record, model.ResultRecord):
            out.results.append(data)
        elif isinstance(record, model.EndRecord):
            out.end = data
        elif not isinstance(record, (model.SamplesRecord, model.ReplayRecord)):
            out.others.append(data)
    return out

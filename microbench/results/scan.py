"""Decoding JSON Lines records for the gate tools: each file decoded once, only the fields they read.

The columnar view of the one way records are read (``records.reader`` is the row view). A file is read in
chunks of whole lines (``records.files``) and decoded by msgspec into a projection of the record model
(``records.projection.project``): the same types and ranges as the full records, reduced to the fields a gate
tool reads (the configuration key, the latency statistics, the numbers the metrics table reads, check state,
pairs matrices, overlap figures, and from run lines the conditions a report names). Every other field is
skipped by the decoder without building a Python object, which is what makes a year of nightlies a second's
work (docs/results-at-scale.md). The relations between figures that the model declares are checked on the
columns the part builder makes (``results.parts``), with the same code that checks one record.

What is skipped, and said (``records.reader.ReadNotes``): a line that is not JSON (a truncated or corrupt
line, anywhere in a file, or a line longer than a line may be); a JSON line that is not a microbench record
(another tool's); microbench's own records the gate tools do not read (samples, cycles, soak summaries,
bisections, replays), silently. What is refused, naming FILE:LINE (UsageError): a record of a newer schema
(checked before its other fields, which may mean something else), a microbench record whose fields break the
model, bytes that are not UTF-8, nesting too deep.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Union

import msgspec

from microbench.errors import UsageError, printable
from microbench.records import model, projection
from microbench.records.files import ResultsFile, chunks, find_results
from microbench.records.reader import FOREIGN, ReadNotes, decode_line, is_run_line
from microbench.results.keys import DERIVED_WHEN_ABSENT, RAW_FIELDS
from microbench.results.metrics import NUMBER_COLUMNS, OUTLIER_COUNT

ScanNotes = ReadNotes  #: the notes both readers keep

#: Run-line fields kept for reports (conditions of a change point, filters, labels); the rest is skipped.
RUN_FIELDS = ("schema", "run_id", "time_utc", "command", "backend", "ranks", "hosts", "ranks_per_host", "launcher",
              "slurm", "mpi", "torch", "device", "versions", "conditions", "microbench_version",
              "source", "path_peak",  # issue 43: an import's tool (a job's runs), the path's peak
              "machine")  # issue 39: what else the hosts were doing
#: the run line's paths the reader decodes for RUN_FIELDS (of an import's source, its tool alone)
RUN_PATHS = frozenset(RUN_FIELDS) - {"source"} | {"source.tool"}
#: End-line fields kept: the status, and what else the hosts were doing over the run (issue 39).
END_FIELDS = ("run_id", "status", "time_utc", "machine")
#: The pairs test's fields (kept per record that has them; outliers recomputed from the matrix).
PAIRS_FIELDS = ("metric", "unit", "labels", "participant_ranks", "matrix_unit", "matrix", "outliers",
                "outlier_rule", "node_outliers", "node_outlier_rule", "repeats")
#: Result fields read besides the key, the pairs fields and the metrics' numbers.
RESULT_FIELDS = ("run_id", "time_utc", "requested_bytes", "check", "latency_us", "overlap.overlap_pct")


def result_paths() -> frozenset[str]:
    """Every path of a result record the gate tools read."""
    numbers = [p for p in NUMBER_COLUMNS if p != OUTLIER_COUNT and not p.startswith("overlap.")]
    return frozenset((*RAW_FIELDS, *RESULT_FIELDS, *PAIRS_FIELDS, *numbers))


@lru_cache(maxsize=1)
def line_type() -> object:
    """The type one line decodes into: a tagged union of the run, result and end projections, and of the
    record types the gate tools skip (projected to their tag alone)."""
    everything_none = frozenset()  # an absent field reads as None ...
    views = [projection.project(model.RunRecord, set(RUN_PATHS), "RunView", everything_none),
             projection.project(model.ResultRecord, result_paths(), "ResultView",
                                frozenset(DERIVED_WHEN_ABSENT)),  # ... but where absence means something
             projection.project(model.EndRecord, set(END_FIELDS), "EndView", everything_none)]
    views += [projection.project(kind, set(), f"{kind.__name__[:-6]}View")
              for name, kind in model.RECORD_TYPES.items() if name not in ("run", "result", "end")]
    return Union[tuple(views)]


READ_TYPES = ("RunView", "ResultView", "EndView")


def kind_of(view: object) -> str:
    """``run``, ``result``, ``end`` or ``skipped`` for a decoded line."""
    return _KINDS[view.__class__]


class _Kinds(dict):
    """The kind of each view class of ``line_type``, filled the first time a class is met."""

    def __missing__(self, cls):
        name = cls.__name__
        self[cls] = kind = name[:-4].lower() if name in READ_TYPES else "skipped"
        return kind


_KINDS = _Kinds()


@dataclass
class Decoded:
    """One file's run, result and end records (in file order), and what was skipped."""

    records: list
    bad_lines: list[int]  #: line numbers (from 1) that are not JSON
    foreign: int  #: JSON lines that are not microbench records
    size: int  #: bytes read
    source: ResultsFile | None = None


def jsonl_paths(items: Iterable[str | os.PathLike], notes: ReadNotes | None = None) -> list[ResultsFile]:
    """The results files named and found below folders (``records.files.find_results``)."""
    return find_results(items, notes.skipped_files if notes is not None else None)


@lru_cache(maxsize=1)
def _decoder() -> msgspec.json.Decoder:
    return msgspec.json.Decoder(line_type())


def decode_file(f: ResultsFile | str | os.PathLike) -> Decoded:
    """The run, result and end records of one file (projections of the model), others counted and skipped.
    A stretch of lines that all decode is decoded at once; one that does not is decoded line by line, so an
    unreadable line is skipped and noted and a record that breaks the model names its FILE:LINE."""
    if not isinstance(f, ResultsFile):
        from microbench.records.files import as_results_file

        f = as_results_file(f)
    decoder = _decoder()
    records: list = []
    bad: list[int] = []
    foreign = 0
    for chunk in chunks(f):
        bad += chunk.long_lines
        if len(chunk.data) > model.MAX_RUN_LINE_BYTES:
            _refuse_oversized_run_lines(chunk, f)
        try:
            found = decoder.decode_lines(chunk.data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            found, bad_here, foreign_here = _one_by_one(decoder, chunk, f)
            bad += bad_here
            foreign += foreign_here
        records += [r for r in found if kind_of(r) != "skipped"]
    return Decoded(records, sorted(bad), foreign, f.size, f)


def _refuse_oversized_run_lines(chunk, f: ResultsFile) -> None:
    """A run line longer than a run line may be is refused before it is decoded (its kept fields would be
    decoded whole: a million environment variables are half a gigabyte of objects)."""
    for number, line in enumerate(chunk.data.split(b"\n"), chunk.first_line):
        if len(line) > model.MAX_RUN_LINE_BYTES and is_run_line(line):
            raise UsageError(f"{printable(str(f.path))}:{number}: a run line of {len(line)} bytes, more than a run "
                             f"line may hold ({model.MAX_RUN_LINE_BYTES} bytes; microbench writes them under 1 MiB)")


def _one_by_one(decoder, chunk, f: ResultsFile) -> tuple[list, list[int], int]:
    out, bad, foreign = [], [], 0
    shown = printable(str(f.path))
    for number, line in enumerate(chunk.data.split(b"\n"), chunk.first_line):
        if not line.strip():
            continue
        record = decode_line(line, f"{shown}:{number}", decoder)
        if record is None:
            bad.append(number)
        elif record is FOREIGN:
            foreign += 1
        else:
            out.append(record)
    return out, bad, foreign


def line_of_result(f: ResultsFile, row: int) -> int:
    """The line number of a file's ``row``-th result record (from 0), for messages: the file is read again."""
    decoder = _decoder()
    seen = -1
    for chunk in chunks(f):
        for number, line in enumerate(chunk.data.split(b"\n"), chunk.first_line):
            if not line.strip():
                continue
            try:
                record = decoder.decode(line)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                continue
            if kind_of(record) == "result":
                seen += 1
                if seen == row:
                    return number
    return 0


def refuse_row(f: ResultsFile | None, row: int, problem: str) -> None:
    """A UsageError naming the FILE:LINE of a file's ``row``-th result and what is impossible in it."""
    if f is None:
        raise UsageError(problem)
    raise UsageError(f"{printable(str(f.path))}:{line_of_result(f, row)}: {printable(problem)}")

"""Reading runs for the gate tools: files or directories into a columnar table, each run once, with its time."""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import os
import sys
from pathlib import Path
from typing import Callable, Iterable

import msgspec
import numpy as np

from microbench.errors import UsageError, printable
from microbench.results.columns import RunInfo, Table
from microbench.results.keys import ConfigKey
from microbench.results.metrics import LATENCY_STATS
from microbench.results.index import PartReader
from microbench.results.parts import NUMBERS, PART_STATS, FilePart, PartMaker
from microbench.results.scan import ScanNotes, decode_file, jsonl_paths
from microbench.results.selection import Selection, mixture_notes
from microbench.results.tablebuild import TableBuilder, release_free_heap


def load_table(paths: Iterable[str | os.PathLike], what: str = "results", stats: Iterable[str] = LATENCY_STATS,
               selection: Selection | None = None, keep: Callable[[ConfigKey], bool] | None = None) -> Table:
    """The result rows of JSONL files or folders, by column (``columns.Table``); each run counted once.

    Files are read through the index (``index.py``: a decoded file is kept until it changes). Only the
    latency statistics ``stats`` are kept; ``selection`` (host set, backend, MPI) leaves runs
    out, ``keep`` configurations. What was skipped (unreadable lines, other tools' lines, runs outside
    the selection) and a mix of host sets or MPI libraries are noted on stderr, one line each, prefixed
    with ``what``. No result row at all is a usage error naming ``what`` (e.g. "baseline"). A run id met
    twice counts once when both copies are the same (a file copied into another folder); copies that differ
    are a usage error naming both files.
    """
    paths = list(paths)
    notes = ScanNotes()
    selection = selection or Selection()
    builder = TableBuilder(tuple(dict.fromkeys(stats)), selection, keep)
    reader = PartReader(notes)
    gc.disable()  # decoded records hold no cycles; the collector would walk every one of them again and again
    try:
        copies = RunCopies()
        for path, part in reader.parts(jsonl_paths(paths, notes)):
            copies.check(part, str(path.path))
            builder.add(part, str(path.path))
    finally:
        gc.enable()
    table = builder.table()
    del builder, reader
    release_free_heap()
    lines = notes.lines() + selection.notes() + mixture_notes([r.meta for r in table.runs])
    for line in lines:
        print(f"# note: {what}: {printable(line)}", file=sys.stderr)
    if not len(table):
        raise UsageError(f"no result records in {what} ({', '.join(map(str, paths))})"
                         + (f" within the selection ({selection.describe()})" if selection.describe() else ""))
    return table


class RunCopies:
    """Each run id's first file, to tell an identical copy of a run (read once) from a different run under the
    same id (an error), and a run copied under another id (an error: one run counted twice). Contents are
    compared (``run_digests``) only when an id comes again, or when a run's signature (its run and end lines
    without the id, its first result's time and its row count) matches another run's: the first file's part is
    then made again from the file, so reading distinct runs costs a look-up and a small hash per run."""

    def __init__(self):
        self.first: dict[str, str] = {}
        self.signatures: dict[bytes, tuple[str, str]] = {}  #: signature -> (run id, file)
        self.parts: dict[str, FilePart] = {}  #: first files made again, by path

    def check(self, part: FilePart, source: str) -> None:
        again = []
        counts = np.bincount(part.column("owner"), minlength=len(part.runs)) if part.rows else [0] * len(part.runs)
        for run, meta in enumerate(part.runs):
            run_id = meta.get("run_id")
            if not isinstance(run_id, str):
                continue
            if run_id in self.first:
                again.append((run, run_id))
                continue
            self.first[run_id] = source
            signature = _signature(part, run, int(counts[run]))
            other = self.signatures.setdefault(signature, (run_id, source))
            if other[0] != run_id:
                self._same_under_another_id(part, run, run_id, source, other)
        if not again:
            return
        digests = run_digests(part)
        for run, run_id in again:
            first = self.first[run_id]
            earlier = part if first == source else self._part(first)
            mine = digests[run]
            theirs = [d for i, d in run_digests(earlier).items() if earlier.runs[i].get("run_id") == run_id]
            if any(d != mine for d in theirs):
                raise UsageError(f"run {printable(run_id)!r} is in {printable(first)} and in {printable(source)} "
                                 "with different contents; leave one of them out")

    def _same_under_another_id(self, part: FilePart, run: int, run_id: str, source: str,
                               other: tuple[str, str]) -> None:
        other_id, other_file = other
        earlier = part if other_file == source else self._part(other_file)
        theirs = [d for i, d in run_digests(earlier, with_id=False).items()
                  if earlier.runs[i].get("run_id") == other_id]
        if run_digests(part, with_id=False)[run] in theirs:
            raise UsageError(f"run {printable(run_id)!r} in {printable(source)} is a copy of run "
                             f"{printable(other_id)!r} in {printable(other_file)} under another id (the same "
                             "records): one run would count twice; leave one of them out")

    def _part(self, path: str) -> FilePart:
        if path not in self.parts:
            self.parts[path] = PartMaker().make(decode_file(path), [])
        return self.parts[path]


def _signature(part: FilePart, run: int, rows: int) -> bytes:
    meta = {k: v for k, v in part.runs[run].items() if k != "run_id"}
    return hashlib.sha1(msgspec.json.encode([meta, part.ends[run], part.result_times[run], rows],
                                            order="sorted")).digest()


def run_digests(part: FilePart, with_id: bool = True) -> dict[int, bytes]:
    """A digest of each run of a part: its run and end lines (without the run id unless ``with_id``) and every
    row (configuration, numbers, check, and the pairs and overlap figures the gates judge)."""
    owner = part.column("owner")
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(len(part.runs) + 1))
    configs = msgspec.json.decode(part.configs)
    columns = [part.column(n) for n in ("requested", *NUMBERS, *PART_STATS)]
    checks, check = part.checks, part.column("check")
    out = {}
    for run, meta in enumerate(part.runs):
        rows = order[bounds[run]:bounds[run + 1]]
        shown = meta if with_id else {k: v for k, v in meta.items() if k != "run_id"}
        h = hashlib.sha1(msgspec.json.encode([shown, part.ends[run]], order="sorted"))
        h.update(msgspec.json.encode([configs[c] for c in part.column("config")[rows]]))
        h.update(msgspec.json.encode([checks[c] for c in check[rows]]))
        h.update(msgspec.json.encode([part.extras.get(int(r)) for r in rows], order="sorted"))
        for col in columns:
            h.update(np.ascontiguousarray(col[rows]).tobytes())
        out[run] = h.digest()
    return out


def benchmark_names(items: Iterable[str] | None) -> list[str] | None:
    """Benchmarks named with ``-b`` (repeated or comma-separated), canonical, in order; None when none.

    ``pairs`` (the pairwise link test) is accepted beside the collectives; an unknown name is a UsageError.
    """
    from microbench.benchmarks.table import benchmark_key
    from microbench.benchmarks.table import PAIRS

    if not items:
        return None
    out = []
    for name in (n.strip() for item in items for n in item.split(",")):
        key = benchmark_key(name, also=(PAIRS,)) if name else ""
        if key and key not in out:
            out.append(key)
    return out or None


def parse_time(text: object) -> dt.datetime | None:
    """An ISO 8601 UTC time such as ``2026-11-22T07:33:52Z``; None if absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def run_time(run: RunInfo) -> dt.datetime | None:
    """When a run started: its run line's ``time_utc``, else its first result's."""
    return parse_time(run.meta.get("time_utc")) or parse_time(run.result_time)


def run_label(run: RunInfo) -> str:
    """``run_id`` (or the file it came from) for messages."""
    return run.run_id or os.path.basename(run.source) or "?"


def unique_labels(runs: list[RunInfo]) -> list[str]:
    """``run_label`` of each run, with ``#2``, ``#3`` ... added where labels repeat (runs without an id)."""
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        label = run_label(run)
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def time_span(runs: list[RunInfo]) -> str:
    """``FIRST .. LAST`` start times of the runs (or one time, or ``unknown time``)."""
    times = sorted(t for t in (run_time(r) for r in runs) if t)
    if not times:
        return "unknown time"
    first, last = (t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in (times[0], times[-1]))
    return first if first == last else f"{first} .. {last}"


def mpi_library(run: RunInfo) -> str:
    """The MPI library's first words (``Open MPI v5.0.11``), or the backend name."""
    text = (run.meta.get("mpi") or {}).get("library_version") or ""
    first = text.splitlines()[0].split(",")[0].strip() if text else ""
    return first or run.meta.get("backend") or "-"

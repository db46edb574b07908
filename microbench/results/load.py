"""Reading runs for the gate tools: files or directories into a columnar table, each run once, with its time."""

from __future__ import annotations

import datetime as dt
import gc
import os
import sys
from typing import Callable, Iterable

from microbench.errors import UsageError
from microbench.results.columns import RunInfo, Table
from microbench.results.keys import ConfigKey
from microbench.results.metrics import LATENCY_STATS
from microbench.results.index import PartReader
from microbench.results.scan import ScanNotes, jsonl_paths
from microbench.results.selection import Selection, mixture_notes
from microbench.results.tablebuild import TableBuilder


def load_table(paths: Iterable[str | os.PathLike], what: str = "results", stats: Iterable[str] = LATENCY_STATS,
               selection: Selection | None = None, keep: Callable[[ConfigKey], bool] | None = None) -> Table:
    """The result rows of JSONL files or folders, by column (``columns.Table``); each run counted once.

    Files are read through the index (``index.py``: a decoded file is kept until it changes). Only the
    latency statistics ``stats`` are kept; ``selection`` (host set, backend, MPI) leaves runs
    out, ``keep`` configurations. What was skipped (unreadable lines, other tools' lines, runs outside
    the selection) and a mix of host sets or MPI libraries are noted on stderr, one line each, prefixed
    with ``what``. No result row at all is a usage error naming ``what`` (e.g. "baseline").
    """
    paths = list(paths)
    notes = ScanNotes()
    selection = selection or Selection()
    builder = TableBuilder(tuple(dict.fromkeys(stats)), selection, keep)
    reader = PartReader(notes)
    gc.disable()  # decoded records hold no cycles; the collector would walk every one of them again and again
    try:
        for path, part in reader.parts(jsonl_paths(paths, notes)):
            builder.add(part, str(path))
    finally:
        gc.enable()
    table = builder.table()
    lines = notes.lines() + selection.notes() + mixture_notes([r.meta for r in table.runs])
    for line in lines:
        print(f"# note: {what}: {line}", file=sys.stderr)
    if not len(table):
        raise UsageError(f"no result records in {what} ({', '.join(map(str, paths))})"
                         + (f" within the selection ({selection.describe()})" if selection.describe() else ""))
    return table


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

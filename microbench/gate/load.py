"""Reading runs for the gate tools: files or directories, each run once, with its time."""

from __future__ import annotations

import datetime as dt
import os
from typing import Iterable

from microbench.errors import UsageError
from microbench.records import Run, read_runs


def load_runs(paths: Iterable[str | os.PathLike], what: str = "results") -> list[Run]:
    """Runs with at least one result from JSONL files or directories; each run_id counted once.

    The same run reached twice (a file and the directory holding it) would otherwise count as two
    samples. No run with results at all is a usage error naming ``what`` (e.g. "baseline").
    """
    paths = list(paths)
    seen: set[str] = set()
    runs: list[Run] = []
    for run in read_runs(paths):
        if not run.results:
            continue
        if run.run_id:
            if run.run_id in seen:
                continue
            seen.add(run.run_id)
        runs.append(run)
    if not runs:
        raise UsageError(f"no result records in {what} ({', '.join(map(str, paths))})")
    return runs


def benchmark_names(items: Iterable[str] | None) -> list[str] | None:
    """Benchmarks named with ``-b`` (repeated or comma-separated), canonical, in order; None when none.

    ``pairs`` (the pairwise link test) is accepted beside the collectives; an unknown name is a UsageError.
    """
    from microbench.collectives import benchmark_key
    from microbench.pairs import PAIRS

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


def run_time(run: Run) -> dt.datetime | None:
    """When a run started: its run line's ``time_utc``, else its first result's."""
    return parse_time(run.meta.get("time_utc")) or next(
        (t for t in (parse_time(r.get("time_utc")) for r in run.results) if t), None)


def run_label(run: Run) -> str:
    """``run_id`` (or the file it came from) for messages."""
    return run.run_id or os.path.basename(run.source) or "?"


def unique_labels(runs: list[Run]) -> list[str]:
    """``run_label`` of each run, with ``#2``, ``#3`` ... added where labels repeat (runs without an id)."""
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        label = run_label(run)
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def time_span(runs: list[Run]) -> str:
    """``FIRST .. LAST`` start times of the runs (or one time, or ``unknown time``)."""
    times = sorted(t for t in (run_time(r) for r in runs) if t)
    if not times:
        return "unknown time"
    first, last = (t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in (times[0], times[-1]))
    return first if first == last else f"{first} .. {last}"


def mpi_library(run: Run) -> str:
    """The MPI library's first words (``Open MPI v5.0.11``), or the backend name."""
    text = (run.meta.get("mpi") or {}).get("library_version") or ""
    first = text.splitlines()[0].split(",")[0].strip() if text else ""
    return first or run.meta.get("backend") or "-"

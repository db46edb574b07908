"""What a parser hands to the record builder: one run of another tool and its measured rows."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

from microbench.errors import UsageError, printable

#: what a parser raises on a value of an unexpected type or range (a string where a number belongs ...)
BAD_VALUE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


@contextlib.contextmanager
def where(place: str) -> Iterator[None]:
    """Turn a parser's error on an unexpected value into a UsageError naming ``place`` (FILE:LINE)."""
    try:
        yield
    except BAD_VALUE as exc:
        raise UsageError(f"{place}: unexpected value ({type(exc).__name__}: {printable(str(exc))[:200]})") from None


@dataclass
class Row:
    """One measured configuration (a line of the tool's table, or one half of it: in-place or not).

    ``size_bytes`` is already in microbench's definition (see microbench.benchmarks.table); ``latency_us``
    holds only the statistics the tool printed (or that follow exactly from a printed figure, listed
    in ``derived``); ``values`` are the tool's own figures as printed, under its column names.
    """

    benchmark: str
    size_bytes: int
    latency_us: dict
    line: int  #: line number in the file (1-based; JSON: the item's index in "results")
    values: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict)  #: field -> how it follows from the printed figures
    dtype: str | None = None
    op: str | None = None
    in_place: bool | None = None
    root: int | None = None
    iterations: int | None = None
    warmup: int | None = None
    window: int | None = None
    check: str | None = None  #: pass | fail | None (no data check printed)
    send_bytes: int | None = None  #: None: computed from the benchmark's definition where the ranks are known
    recv_bytes: int | None = None
    ranks: int | None = None  #: the row's own group size where rows differ (a job's communicators); else the run's
    fields: dict = field(default_factory=dict)  #: further record fields the tool told (``nccl_algo``)


@dataclass
class ToolRun:
    """One invocation of the tool as its output shows it."""

    tool: str  #: omb | nccl-tests
    tool_version: str | None
    file: str
    first_line: int
    backend: str  #: mpi (OMB) | nccl (nccl-tests)
    rows: list[Row] = field(default_factory=list)
    ranks: int | None = None
    hosts_by_rank: list[str] | None = None
    device: dict = field(default_factory=dict)  #: kind, name, count where known
    versions: dict = field(default_factory=dict)  #: e.g. {"nccl": "2.27.3"}
    command: str | None = None  #: the tool's command line, where known
    options: dict = field(default_factory=dict)  #: the tool's options as printed or given
    assumed: list[str] = field(default_factory=list)  #: what the import takes for granted, in words
    definitions: dict = field(default_factory=dict)  #: statistic -> how the tool computed it
    time_utc: str | None = None
    time_from: str | None = None
    start_time_local: str | None = None  #: a time the tool printed without a zone
    complete: bool = True
    end_reason: str = ""
    skipped: list[str] = field(default_factory=list)  #: rows not imported, each with its line and why
    extra_source: dict = field(default_factory=dict)

    def add(self, row: Row) -> None:
        """Keep a row; a 0-byte row (OMB's latency starts there) is listed as skipped: microbench sizes start at 1 B."""
        if row.size_bytes < 1:
            self.skipped.append(f"line {row.line}: {row.size_bytes} B (microbench sizes start at 1 B)")
        else:
            self.rows.append(row)

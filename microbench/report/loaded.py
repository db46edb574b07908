"""The results a report shows, read twice over: as the gate's table (``gate.load.load_table``, what every
verdict, curve and history is computed from) and as whole records (``records.read_runs``, for what the
table does not hold: the run line in full, the OMB-style rows, pairs matrices, what a record lacks).

The two are matched run by run: by run id, else (a run without one) by its file and its place among the
id-less runs of that file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from microbench.records import Run, read_runs
from microbench.results.columns import Table
from microbench.results.load import load_table, run_time, unique_labels


@dataclass
class Loaded:
    table: Table  #: the gate's rows of the results
    full: list[Run]  #: per table run: the run as read in full (its run line, result records, end line)
    order: list[int]  #: the table's runs with results, by start time (runs without a time last)
    names: list[str]  #: per table run: its name on the page (run id, start time)


def run_names(runs: list) -> list[str]:
    """A unique name per run for legends and tables: its id (or file), and its start time to the minute."""
    names = []
    for label, run in zip(unique_labels(runs), runs):
        when = run_time(run)
        names.append(f"{label} ({when:%Y-%m-%d %H:%M})" if when else f"{label} (no time)")
    return names


def _match(table: Table, runs: list[Run]) -> list[Run]:
    by_id = {}
    by_file: dict[str, list[Run]] = {}
    for run in runs:
        if run.run_id:
            by_id.setdefault(run.run_id, run)
        else:
            by_file.setdefault(os.path.abspath(run.source), []).append(run)
    out = []
    for info in table.runs:
        if info.run_id:
            out.append(by_id.get(info.run_id) or Run(meta=info.meta, end=info.end, source=info.source))
        else:
            pending = by_file.get(os.path.abspath(info.source)) or []
            out.append(pending.pop(0) if pending else Run(meta=info.meta, end=info.end, source=info.source))
    return out


def load(paths: Iterable[str | os.PathLike]) -> Loaded:
    """Read the results (one UsageError line when there are none)."""
    paths = list(paths)
    table = load_table(paths)
    full = _match(table, read_runs(paths))
    used = table.used_runs()
    order = sorted(used, key=lambda i: (run_time(table.runs[i]) is None, run_time(table.runs[i]) or 0))
    return Loaded(table, full, order, run_names(table.runs))

"""The results a report shows, read once, through the columnar reader (``results.load.load_table``): every
verdict, curve, history and table is computed from that table.

Past ``newest`` runs the page aggregates: per configuration the median over runs with its band, the newest
``newest`` runs individually, history points binned (``report.history``); ``Loaded.aggregation`` says what
on the page. The only lines read a second time are those of the runs shown individually (``Loaded.shown``):
their run line in full (options, an import's source, version mismatches: fields the reader does not keep
for every run), their end line's reason and their result lines for the OMB-style tables (the first call's
latency is not in the table); ``read_run`` decodes only the lines that name the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from microbench.errors import UsageError
from microbench.records import Run
from microbench.records import reader
from microbench.results.columns import RunInfo, Table
from microbench.results.load import load_table, run_time, unique_labels
from microbench.results.metrics import LATENCY_STATS

DEFAULT_NEWEST = 5  #: runs shown individually unless ``--newest`` says otherwise


@dataclass
class Loaded:
    table: Table  #: the gate's rows of the results
    order: list[int]  #: the table's runs with results, by start time (runs without a time last)
    names: list[str]  #: per table run: its name on the page (run id, start time)
    newest: list[int] = field(default_factory=list)  #: the runs shown individually, in ``order``'s order
    shown: dict[int, Run] = field(default_factory=dict)  #: run -> its lines in full, for the ``newest`` runs

    def full(self, run: int) -> Run:
        """A run's lines in full where it is shown individually, else what the table keeps of it."""
        return self.shown.get(run) or self.table.runs[run]

    @property
    def aggregated(self) -> bool:
        """Whether some runs are shown only through medians and counts."""
        return len(self.newest) < len(self.order)

    def aggregation(self) -> str:
        """One sentence for the page: what it shows of every run, and what only in aggregate."""
        if not self.aggregated:
            return f"Every one of the {len(self.order)} run(s) is shown individually."
        return (f"{len(self.order)} runs: figures show per configuration the median over runs of each run's value "
                f"with its p10..p90 band over runs, and the newest {len(self.newest)} runs individually "
                f"(--newest); the runs table and OMB-style tables list those {len(self.newest)} and count the "
                "others; history points are medians of consecutive runs (every run counted); check, compare and "
                "the history's steps are computed from every run.")


def run_names(runs: list) -> list[str]:
    """A unique name per run for legends and tables: its id (or file), and its start time to the minute."""
    names = []
    for label, run in zip(unique_labels(runs), runs):
        when = run_time(run)
        names.append(f"{label} ({when:%Y-%m-%d %H:%M})" if when else f"{label} (no time)")
    return names


def load(paths: Iterable[str | os.PathLike], newest: int = DEFAULT_NEWEST,
         stats: Iterable[str] = LATENCY_STATS) -> Loaded:
    """Read the results (one UsageError line when there are none); ``newest``: runs shown individually;
    ``stats``: the latency statistics kept (what the page draws and judges)."""
    table = load_table(list(paths), stats=stats)
    used = table.used_runs()
    order = sorted(used, key=lambda i: (run_time(table.runs[i]) is None, run_time(table.runs[i]) or 0))
    shown = order[-newest:] if newest > 0 else []
    return Loaded(table, order, run_names(table.runs), shown, {i: read_run(table, i) for i in shown})


def read_run(table: Table, run: int) -> Run:
    """One table run's records, read again from its file (``records.read_run``: only lines naming its id are
    decoded). What cannot be read leaves the table's run line and end status."""
    info: RunInfo = table.runs[run]
    fallback = Run(info.meta, [], info.end, info.source)
    if not info.run_id:
        return fallback
    try:
        found = reader.read_run(info.source, info.run_id)
    except (OSError, UsageError):  # a file gone or changed since: the table's view stands
        return fallback
    if found is None:
        return fallback
    if not found.meta:
        found.meta = info.meta
    return found

"""The results a report shows, read once, through the columnar reader (``results.load.load_table``): every
verdict, curve, history and table is computed from that table.

Past ``newest`` runs the page aggregates: per configuration the median over runs with its band, the newest
``newest`` runs individually, history points binned (``report.history``); ``Loaded.aggregation`` says what
on the page. The only records read a second time are those of the runs shown individually, for their
OMB-style tables (a column the table does not hold: the first call's latency): ``run_records`` reads the
lines of one run from its file, decoding only that run's lines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

import msgspec

from microbench.results.columns import RunInfo, Table
from microbench.results.load import load_table, run_time, unique_labels

DEFAULT_NEWEST = 5  #: runs shown individually unless ``--newest`` says otherwise


@dataclass
class Loaded:
    table: Table  #: the gate's rows of the results
    order: list[int]  #: the table's runs with results, by start time (runs without a time last)
    names: list[str]  #: per table run: its name on the page (run id, start time)
    newest: list[int] = field(default_factory=list)  #: the runs shown individually, in ``order``'s order

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


def load(paths: Iterable[str | os.PathLike], newest: int = DEFAULT_NEWEST) -> Loaded:
    """Read the results (one UsageError line when there are none); ``newest``: runs shown individually."""
    table = load_table(list(paths))
    used = table.used_runs()
    order = sorted(used, key=lambda i: (run_time(table.runs[i]) is None, run_time(table.runs[i]) or 0))
    shown = order[-newest:] if newest > 0 else []
    return Loaded(table, order, run_names(table.runs), shown)


_LINE = msgspec.json.Decoder(dict)


def run_records(table: Table, run: int) -> list[dict]:
    """The result records of one table run, read from its file: with a run id, only lines naming it are
    decoded; without one, the file's id-less runs are matched by their place (as the table met them)."""
    info: RunInfo = table.runs[run]
    try:
        with open(info.source, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if info.run_id:
        needle = info.run_id.encode()
        out = []
        for line in data.splitlines():
            if needle in line:
                try:
                    rec = _LINE.decode(line)
                except msgspec.DecodeError:
                    continue
                if rec.get("type") == "result" and rec.get("run_id") == info.run_id:
                    out.append(rec)
        return out
    from microbench.records import read_runs

    place = sum(1 for r in table.runs[:run] if not r.run_id and r.source == info.source)
    idless = [r for r in read_runs([info.source]) if not r.run_id]
    return idless[place].results if place < len(idless) else []

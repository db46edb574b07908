"""A history's numbers: runs in time order, one column per configuration, the steps of each column.

Everything ``microbench history`` prints or draws comes from ``History``: the runs ordered by start time,
the columns (configurations at the sizes asked for), each run's value per column (the median should a
run hold the configuration twice), and per column the steps ``steps.detect`` finds, each with the
conditions that changed at the run where it starts (``conditions.changes`` against the run before it
in that column). The columns are judged as one family: the chance of a false step in any of them is at
most ``alpha`` (``steps``: each split's p-value times its column's split points times the columns judged);
a column too short for any split to reach that level is listed in ``too_short`` with the runs it needs; a
judged column without a step has ``findable``: the smallest step at its middle it would have found (90 %).

The gate (``outcome``, three outcomes as ``gate/outcome.py``): FAIL on a step for the worse that starts where no
recorded condition changed and the machine's state did not change either; INCONCLUSIVE on a step for the worse
whose only explanation is the machine's state (other processes' load rose with it), on a column too short to
judge, or on a judged column without a step that could not have found a step of ``must_see``; PASS otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from microbench.gate.conditions import changes, machine_change
from microbench.gate.outcome import FAIL, INCONCLUSIVE, PASS
from microbench.gate.steps import Step, can_reach, detect, findable_ratio, runs_needed, split_points
from microbench.results import keys
from microbench.results.columns import RunInfo, Table, per_run_medians
from microbench.results.keys import ConfigKey
from microbench.results.load import run_label, run_time
from microbench.results.metrics import higher_is_better
from microbench.units import format_size


@dataclass
class FoundStep:
    column: int
    step: Step
    run: int  #: position (in History.runs) of the run where the step starts
    previous: int  #: position of the column's run before it
    changed: list[str]  #: recorded conditions that differ between those two runs
    worse: bool  #: a rise in latency, a fall in bandwidth
    machine: str | None = None  #: the machine's state changed with the step, in the direction that explains it

    @property
    def explained(self) -> bool:
        """A recorded condition changed where the step starts (the machine's state is not a condition)."""
        return bool(self.changed)

    @property
    def fails(self) -> bool:
        """For the worse, and nothing explains it: not a recorded condition, not the machine's state."""
        return self.worse and not self.changed and not self.machine


class Cells(Mapping):
    """(run position, column key) -> value, read from a History's arrays (no Python object per cell)."""

    def __init__(self, hist: "History"):
        self.hist = hist
        self.index = {key: c for c, key in enumerate(hist.columns)}

    def __getitem__(self, item: tuple[int, ConfigKey]) -> float:
        i, key = item
        c = self.index.get(key)
        if c is not None:
            runs, values = self.hist.column(c)
            at = int(np.searchsorted(runs, i))
            if at < len(runs) and runs[at] == i:
                return float(values[at])
        raise KeyError(item)

    def __iter__(self):
        for c, key in enumerate(self.hist.columns):
            for i in self.hist.column(c)[0].tolist():
                yield i, key

    def __len__(self) -> int:
        return len(self.hist.cell_run)


@dataclass
class History:
    """Runs by start time, columns, and per column its runs' values as arrays: ``cell_run`` (run positions)
    and ``cell_value``, column by column (``bounds``), each column's runs in time order."""

    metric: str
    stat: str
    runs: list[RunInfo]  #: by start time
    columns: list[ConfigKey]
    labels: list[str]
    cell_run: np.ndarray  #: int64 run position of each cell, grouped by column
    cell_value: np.ndarray  #: float64 value of each cell
    bounds: np.ndarray  #: column c's cells are [bounds[c], bounds[c + 1])
    steps: list[FoundStep] = field(default_factory=list)
    alpha: float | None = None  #: the chance of any false step over the columns judged (None: not searched)
    family: int = 0  #: columns long enough for a split: the p-values are adjusted for this many series
    judged: list[int] = field(default_factory=list)  #: columns where a step can be found at all
    too_short: dict[int, int] = field(default_factory=dict)  #: column -> runs it would need
    findable: dict[int, float | None] = field(default_factory=dict)  #: judged column without a step -> its 90 % step
    min_step: float = 0.05

    @cached_property
    def values(self) -> Cells:
        """(run position, column key) -> value, as a read-only mapping."""
        return Cells(self)

    def column(self, column: int) -> tuple[np.ndarray, np.ndarray]:
        """(run positions, values) of a column, in time order."""
        a, b = int(self.bounds[column]), int(self.bounds[column + 1])
        return self.cell_run[a:b], self.cell_value[a:b]

    def points(self, column: int) -> list[int]:
        """Positions of the runs that have a value in ``column``, in time order."""
        return self.column(column)[0].tolist()

    def used_runs(self, columns: list[int] | None = None) -> list[int]:
        """Positions of the runs with a value in any column (of ``columns``, when given), in time order."""
        picked = [self.column(c)[0] for c in (range(len(self.columns)) if columns is None else columns)]
        return np.unique(np.concatenate(picked)).tolist() if picked else []

    def find_steps(self, min_step: float, alpha: float, min_segment: int = 3) -> None:
        """The steps of every column, with a false step anywhere among them at most ``alpha`` likely."""
        worse_up = not higher_is_better(self.metric)
        self.alpha, self.steps, self.judged, self.too_short, self.findable = alpha, [], [], {}, {}
        self.min_step = min_step
        series = [self.column(c) for c in range(len(self.columns))]
        family = self.family = sum(split_points(len(v), min_segment) > 0 for _, v in series)  # columns with a split
        for c, (runs, values) in enumerate(series):
            logs = bool(np.all(values > 0))
            if not can_reach(len(values), alpha, family, min_segment, logs):
                self.too_short[c] = runs_needed(alpha, max(family, 1), min_segment, logs)
                continue
            self.judged.append(c)
            at = runs.tolist()
            found = detect(values, min_step, alpha, min_segment, series=family)
            bounds = [0, *(s.index for s in found), len(at)]
            for k, step in enumerate(found):
                run, previous = at[step.index], at[step.index - 1]
                worse = (step.ratio > 1) == worse_up
                before = [self.runs[i] for i in at[bounds[k]:bounds[k + 1]]]
                after = [self.runs[i] for i in at[bounds[k + 1]:bounds[k + 2]]]
                self.steps.append(FoundStep(c, step, run, previous,
                                            changes(self.runs[previous].meta, self.runs[run].meta), worse,
                                            machine_change(before, after, worse)))
            if not found:
                self.findable[c] = findable_ratio(values, alpha, family, min_segment, min_step)

    def blind(self, must_see: float) -> list[int]:
        """Judged columns without a step that could not have found a step of ``must_see`` (a ratio 1 + must_see
        or its inverse), or whose spread is unknown."""
        return [c for c, r in self.findable.items() if r is None or not r <= 1 + must_see]

    def outcome(self, must_see: float) -> tuple[str, list[str]]:
        """The gate's outcome and why (``--fail-on-step``)."""
        failing = [f for f in self.steps if f.fails]
        if failing:
            return FAIL, [f"{len(failing)} step(s) for the worse with no recorded change"]
        reasons = []
        machine = [f for f in self.steps if f.worse and not f.changed and f.machine]
        if machine:
            reasons.append(f"{len(machine)} step(s) for the worse that came with a change of the machine's state "
                           "(rerun on a steady machine to tell it from the code)")
        if self.too_short:
            reasons.append(f"{len(self.too_short)} series too short to judge")
        blind = self.blind(must_see)
        if blind:
            reasons.append(f"{len(blind)} series could not have found a step of {must_see * 100:g} %")
        return (INCONCLUSIVE if reasons else PASS), reasons


def build(table: Table, sizes: list[int], metric: str, stat: str, lookback: int | None = None) -> History:
    """Runs by start time (the last ``lookback`` days with runs, if given), columns small sizes first."""
    order = sorted(range(len(table.runs)), key=lambda i: _time_order(table.runs[i]))
    if lookback:
        days = sorted({t.date() for t in (run_time(table.runs[i]) for i in order) if t})[-lookback:]
        order = [i for i in order if run_time(table.runs[i]) and run_time(table.runs[i]).date() in set(days)]
    position = np.full(len(table.runs), -1, dtype=np.int64)
    position[order] = np.arange(len(order))
    values = table.values(metric, stat)
    rows = np.flatnonzero(table.size_mask(sizes) & np.isfinite(values) & (position[table.run] >= 0))
    configs, runs, medians = per_run_medians(table.config[rows], position[table.run[rows]], values[rows])
    present = np.unique(configs)
    ordered = sorted(present.tolist(), key=lambda c: ConfigKey.sort_key(table.configs[c]))
    columns = [table.configs[c] for c in ordered]
    place = np.zeros(len(table.configs), dtype=np.int64)  # table config -> its column
    place[ordered] = np.arange(len(ordered))
    col = place[configs]
    by_column = np.lexsort((runs, col))  # per_run_medians sorted by config, then run: here by column, then run
    col, runs, medians = col[by_column], runs[by_column], medians[by_column]
    bounds = np.searchsorted(col, np.arange(len(columns) + 1))
    return History(metric, stat, [table.runs[i] for i in order], columns, column_labels(columns), runs, medians,
                   bounds)


def _time_order(run: RunInfo) -> tuple:
    when = run_time(run)
    return (when is None, when.timestamp() if when else 0, run_label(run))


def column_labels(columns: list[ConfigKey]) -> list[str]:
    """``benchmark size`` plus the options that tell apart columns of the same benchmark and size."""
    out = []
    for key in columns:
        twins = [k for k in columns if (k.benchmark, k.size_bytes) == (key.benchmark, key.size_bytes)]
        extra = keys.describe_options(key, keys.varying_options(twins)) if len(twins) > 1 else ""
        out.append(f"{key.benchmark} {format_size(key.size_bytes)}" + (f" {extra}" if extra else ""))
    return out

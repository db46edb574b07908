"""Regression comparison of new runs against baseline runs, with runs as the unit of sampling.

Per configuration (``keys.config_key``: benchmark, size, ranks, backend, options):

- each run gives one value: by default its p50 latency (``metrics.metric_value``; a run that measured
  the configuration twice gives the median of the two);
- ratio = median(new run values) / median(baseline run values);
- a test of "no change" on the (winsorized) log run values (``ratiotest``): Welch's t with the variance of
  each side inflated by the correlation of back-to-back runs (measured from the runs themselves, pooled
  over all configurations, or given); a paired t on the log ratios when baseline and new runs alternate in
  time; or, with days of history (``by_day``), the new runs judged against the spread between those days;
- error control over the whole comparison: the p-values of all configurations are Holm-adjusted
  (``family``), so the chance that a comparison reports any false REGRESSION is at most
  alpha = 1 - confidence however many configurations it holds;
- regression: the ratio is beyond the threshold in the bad direction (latency up, bandwidth down) AND
  its adjusted p-value is at most alpha. Beyond the threshold with too few runs for any test (a side
  with one run, no history) is *unconfirmed* ("regression?"); beyond it and not significant is noise.
- the interval shown is for the ratio of geometric means at 1 - alpha / m (Bonferroni), so all m
  intervals hold together with at least the confidence asked;
- what it could see (``compare_power``): per configuration the smallest change in the bad direction it would
  have flagged with 90 % probability, and with ``plan`` the runs a side a given change needs;
- one run on a side against 3 or more on the other: the single run judged against the others' spread
  (``ratiotest.prediction_test``);
- the outcome (``compare_outcome``): FAIL on a REGRESSION; INCONCLUSIVE where no regression was seen but a
  configuration could not have seen a change of ``must_see`` (or had too few runs for any test), or where the
  regressions came with a change of the machine's state (``gate.conditions.machine_change``); PASS otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from microbench.gate import compare_power as power
from microbench.gate.conditions import machine_change, machine_text
from microbench.gate.family import holm
from microbench.gate.ratiotest import (RatioTest, alternate, block_test, paired_test, permutation_p, permutation_reaches,
                                       prediction_test, run_correlation, run_test)
from microbench.results.columns import Table, median_of, per_run_medians
from microbench.results.keys import ConfigKey
from microbench.results.load import run_label, run_time
from microbench.results import metrics
from microbench.results.metrics import higher_is_better

#: verdicts; a regression makes ``microbench compare`` exit 1 (an unconfirmed one with --fail-unconfirmed)
REGRESSION, UNCONFIRMED, NOISE, OK, IMPROVED, IMPROVED_UNCONFIRMED = (
    "regression", "regression?", "noise", "ok", "improved", "improved?")


class RunLabels(Sequence):
    """The labels of some runs, by their index into a table's runs: one shared list of names and an index
    array, so that thousands of runs a configuration cost 8 bytes each rather than a list of references."""

    def __init__(self, names: list[str], runs: np.ndarray):
        self.names, self.runs = names, runs

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.names[r] for r in self.runs[i].tolist()]
        return self.names[int(self.runs[i])]

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (Sequence, np.ndarray)) else NotImplemented

    def __repr__(self) -> str:
        return f"RunLabels({list(self)!r})"


@dataclass
class Side:
    """One configuration's runs on one side of a comparison, in start-time order, as arrays (a decade of
    nightlies is thousands of runs for each of hundreds of configurations): its values and runs (``labels``
    holds their indices); their days and start times are looked up from per-run arrays when asked for."""

    values: np.ndarray  #: float64, one value per run
    labels: RunLabels
    run_days: np.ndarray  #: per table run: a code for its UTC start day (runs without a time: one code each)
    run_stamps: np.ndarray  #: per table run: its start time (s since the epoch; inf when unknown)

    @property
    def days(self) -> np.ndarray:
        """A code per run for its UTC start day."""
        return self.run_days[self.labels.runs]

    @property
    def order(self) -> np.ndarray:
        """The start time of each run."""
        return self.run_stamps[self.labels.runs]


@dataclass
class Row:
    """One configuration measured on both sides."""

    key: ConfigKey
    baseline: np.ndarray  #: per-run values (float64), in start-time order
    new: np.ndarray
    baseline_runs: Sequence[str]  #: their run labels
    new_runs: Sequence[str]
    ratio: float
    test: RatioTest | None
    p_adjusted: float | None = None
    interval: tuple[float, float] | None = None
    verdict: str = OK
    days: int | None = None  #: baseline days the new runs were judged against (by_day), else None
    detectable: float | None = None  #: smallest bad change (fraction) flagged with 90 % probability; None: untested
    runs_needed: int | None = None  #: with a plan: runs a side for the planned change (None: out of reach)
    launch_bound: bool = False  #: a record of either side was marked launch-bound (issue 44)
    blind: bool = False  #: could not have seen a change of the comparison's must_see (or had no test)

    @property
    def baseline_median(self) -> float:
        return median_of(self.baseline)

    @property
    def new_median(self) -> float:
        return median_of(self.new)

    def as_dict(self) -> dict:
        t, iv = self.test, self.interval
        return {"config": self.key.as_dict(), "baseline_values": np.asarray(self.baseline).tolist(),
                "new_values": np.asarray(self.new).tolist(),
                "baseline_run_ids": list(self.baseline_runs), "new_run_ids": list(self.new_runs),
                "baseline_median": self.baseline_median, "new_median": self.new_median, "ratio": self.ratio,
                "test": t.method if t else None, "baseline_days": self.days,
                "ratio_geometric_means": math.exp(t.log_diff) if t else None, "p": t.p if t else None,
                "p_adjusted": self.p_adjusted, "ci_low": iv[0] if iv else None, "ci_high": iv[1] if iv else None,
                "verdict": self.verdict, "se_log": t.se if t else None, "df": t.df if t else None,
                "detectable_change_90": self.detectable, "plan_runs_per_side": self.runs_needed,
                "launch_bound": self.launch_bound, "could_see_must_see": not self.blind}


@dataclass
class Comparison:
    metric: str
    stat: str
    threshold: float
    confidence: float
    rho: float = 0.0  #: correlation of back-to-back runs used
    rho_source: str = "measured"
    rows: list[Row] = field(default_factory=list)
    only_baseline: list[ConfigKey] = field(default_factory=list)
    only_new: list[ConfigKey] = field(default_factory=list)
    plan: float | None = None  #: a change (fraction, bad direction) to plan run counts for (compare --plan)
    by_day: bool = False
    must_see: float = 0.25  #: a PASS needs every configuration to have been able to see a change this large
    machine: dict = field(default_factory=dict)  #: each side's machine state, and the change between them

    @property
    def tested(self) -> int:
        return sum(r.test is not None for r in self.rows)

    @property
    def untested(self) -> list[Row]:
        """Rows beyond the threshold, either way, that no test could judge (too few runs or days)."""
        return [r for r in self.rows if r.verdict in (UNCONFIRMED, IMPROVED_UNCONFIRMED)]

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    @property
    def interval_confidence(self) -> float:
        """Each row's interval level: 1 - alpha / (rows tested), so that all hold together."""
        tested = sum(r.test is not None for r in self.rows) or 1
        return 1 - self.alpha / tested

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)


def per_run_values(table: Table, metric: str, stat: str, rows: np.ndarray | None = None
                   ) -> dict[ConfigKey, Side]:
    """Configuration -> its runs' values (among ``rows``, a boolean mask; all rows when None), in start-
    time order. Values that are missing or not above 0 are left out. Every side's arrays are views of
    the same few arrays (one value, run and start time per configuration and run): no Python object per run."""
    values = table.values(metric, stat)
    usable = np.isfinite(values) & (values > 0)
    if rows is not None:
        usable &= rows
    labels = [run_label(run) for run in table.runs]
    times = [run_time(run) for run in table.runs]
    stamps = np.array([t.timestamp() if t else math.inf for t in times], dtype=float)
    by_time = np.array(sorted(range(len(labels)), key=lambda i: (stamps[i], labels[i])), dtype=np.int32)
    rank = np.empty(len(table.runs), dtype=np.int32)
    rank[by_time] = np.arange(len(labels), dtype=np.int32)
    days = np.unique([t.strftime("%Y-%m-%d") if t else lab for t, lab in zip(times, labels)] or [""],
                     return_inverse=True)[1].reshape(-1)
    # ranked by start time: the medians come sorted by configuration, then start time
    configs, ranks, medians = per_run_medians(table.config[usable], rank[table.run[usable]], values[usable])
    del usable
    runs = by_time[ranks]
    del ranks
    bounds = np.flatnonzero(np.r_[True, configs[1:] != configs[:-1], True]) if len(configs) else np.array([0])
    out: dict[ConfigKey, Side] = {}
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        out[table.configs[configs[a]]] = Side(medians[a:b], RunLabels(labels, runs[a:b]), days, stamps)
    return out


def untested_remedy(result: Comparison) -> str:
    """What would test the rows no test could judge: more runs a side, or a lookback with more days."""
    rows = [r for r in result.rows if r.test is None]
    if not rows:
        return ""
    if result.by_day:
        fewest = min(r.days or 0 for r in rows)
        return f"the lookback found {fewest} day(s) with runs; it needs 3 or more (a longer --lookback)"
    return ("a side had 1 run and the other fewer than 3: 2 or more runs a side (or 1 against 3 or more) would "
            "test them (see --plan for how many to see a given change), or --lookback DAYS over 3+ days of "
            "nightly runs")


def must_see_default(threshold: float) -> float:
    """The change a PASS must have been able to see when none is given: 25 %, or twice the threshold if larger
    (a configuration flags only changes beyond the threshold, so it can never see the threshold itself)."""
    return max(0.25, 2 * threshold)


def verdict(ratio: float, adjusted: float | None, alpha: float, threshold: float, higher_better: bool) -> str:
    """Classify one ratio (new / baseline) by the threshold and the Holm-adjusted p-value (None: untested)."""
    worse = ratio < 1 - threshold if higher_better else ratio > 1 + threshold
    better = ratio > 1 + threshold if higher_better else ratio < 1 - threshold
    if not (worse or better):
        return OK
    if adjusted is None:
        return UNCONFIRMED if worse else IMPROVED_UNCONFIRMED
    if adjusted > alpha:
        return NOISE
    return REGRESSION if worse else IMPROVED


def compare(baseline: Table, new: Table, metric: str = "latency", stat: str = "p50",
            threshold: float = 0.05, confidence: float = 0.95,
            select: Callable[[Table], np.ndarray] | None = None, by_day: bool = False,
            rho: float | None = None, baseline_rows: np.ndarray | None = None,
            plan: float | None = None, must_see: float | None = None) -> Comparison:
    """Compare every configuration measured on both sides; small messages first. ``select`` gives the
    rows of a table to compare (a boolean mask), ``baseline_rows`` narrows the baseline further (a
    lookback window); ``by_day`` judges against the baseline's days; ``rho`` the correlation of
    back-to-back runs (None: measured from both sides' runs); ``plan`` a change (fraction, bad direction) to
    count the runs a side for; ``must_see`` the change a PASS must have been able to see (default
    ``must_see_default``)."""
    base_mask = select(baseline) if select else np.ones(len(baseline), dtype=bool)
    if baseline_rows is not None:
        base_mask = base_mask & baseline_rows
    base_values = per_run_values(baseline, metric, stat, base_mask)
    new_values = per_run_values(new, metric, stat, select(new) if select else None)
    result = compare_sides(base_values, new_values, metric, stat, threshold, confidence, by_day, rho, plan, must_see)
    result.machine = machine_state(result, baseline.runs, new.runs)
    if metric in metrics.LAUNCH_MARKED:
        bound = launch_bound_configs(baseline, base_mask) | launch_bound_configs(new, select(new) if select else None)
        for row in result.rows:
            row.launch_bound = row.key in bound
    return result


def compare_sides(base_values: dict[ConfigKey, Side], new_values: dict[ConfigKey, Side], metric: str = "latency",
                  stat: str = "p50", threshold: float = 0.05, confidence: float = 0.95, by_day: bool = False,
                  rho: float | None = None, plan: float | None = None, must_see: float | None = None) -> Comparison:
    """``compare`` on each side's per-run values (``per_run_values``): rows, tests, verdicts, what they could see
    (the machine's state is ``compare``'s to add: it needs the runs)."""
    shared = set(base_values) & set(new_values)
    if rho is None:
        series = [side[k].values for side in (base_values, new_values) for k in shared]
        result = Comparison(metric, stat, threshold, confidence, run_correlation(series), "measured")
    else:
        result = Comparison(metric, stat, threshold, confidence, rho, "given")
    result.plan, result.by_day = plan, by_day
    result.must_see = must_see if must_see is not None else must_see_default(threshold)
    for key in sorted(set(base_values) | set(new_values), key=ConfigKey.sort_key):
        if key not in new_values:
            result.only_baseline.append(key)
        elif key not in base_values:
            result.only_new.append(key)
        else:
            result.rows.append(_row(key, base_values[key], new_values[key], result.rho, by_day))
    _judge(result, higher_is_better(metric))
    return result


def launch_bound_configs(table: Table, rows: np.ndarray | None) -> set[ConfigKey]:
    """The configurations with a record marked launch-bound among ``rows`` (a boolean mask; None: all)."""
    bound = metrics.launch_bound(table.numbers)
    if rows is not None:
        bound = bound & rows
    return {table.configs[c] for c in np.unique(table.config[bound]).tolist()}


def machine_state(result: Comparison, baseline: list, new: list) -> dict:
    """Each side's machine state (over the runs its rows used; ``baseline`` and ``new`` are the tables' runs) and
    whether it changed in the direction that would explain a regression (busier on the new side)."""
    base_runs = sorted({int(i) for r in result.rows for i in np.asarray(getattr(r.baseline_runs, "runs", []))})
    new_runs = sorted({int(i) for r in result.rows for i in np.asarray(getattr(r.new_runs, "runs", []))})
    before, after = [baseline[i] for i in base_runs], [new[i] for i in new_runs]
    starts = [t for t in (run_time(r) for r in before) if t], [t for t in (run_time(r) for r in after) if t]
    return {"baseline": machine_text(before), "new": machine_text(after),
            "change": machine_change(before, after, worse=True),
            "other_way": machine_change(before, after, worse=False),
            "new_older": bool(starts[0] and starts[1] and max(starts[1]) < min(starts[0]))}


def _row(key: ConfigKey, base: Side, fresh: Side, rho: float, by_day: bool) -> Row:
    test, days = None, None
    if by_day:
        codes, inverse = np.unique(base.days, return_inverse=True)
        values = np.asarray(base.values)
        days = len(codes)
        test = block_test([float(np.median(values[inverse == d])) for d in range(days)], fresh.values, rho)
    if test is None and alternate(base.order, fresh.order) and \
            not math.isinf(max(float(base.order.max()), float(fresh.order.max()))):
        test = paired_test(base.values, fresh.values)  # the i-th runs of the two sides are neighbours in time
    if test is None:
        test = run_test(base.values, fresh.values, rho)
    if test is None:
        test = prediction_test(base.values, fresh.values, rho)
    ratio = median_of(fresh.values) / median_of(base.values)
    return Row(key, base.values, fresh.values, base.labels, fresh.labels, float(ratio), test, days=days)


def _judge(result: Comparison, higher_better: bool) -> None:
    level = result.alpha / max(result.tested, 1)  # Holm's first step: the smallest p a row must reach
    for row in result.rows:
        if row.test is not None and row.test.method == "runs" and \
                permutation_reaches(len(row.baseline), len(row.new), level):
            row.test = row.test.with_p(max(row.test.p, permutation_p(row.baseline, row.new)))
    adjusted = holm([r.test.p if r.test else None for r in result.rows])
    level = result.interval_confidence
    for row, adj in zip(result.rows, adjusted):
        row.p_adjusted = adj
        row.interval = row.test.interval(level) if row.test else None
        row.verdict = verdict(row.ratio, adj, result.alpha, result.threshold, higher_better)
    _could_see(result, higher_better)


def _could_see(result: Comparison, higher_better: bool) -> None:
    """Each row's detectable change (and, with a plan, its runs a side), by ``compare_power``."""
    log_thr = power.log_threshold(result.threshold, higher_better)
    tested = result.tested
    for row in result.rows:
        if row.test is not None:
            d = power.detectable_log(row.test.se, row.test.df, tested, result.alpha, log_thr)
            try:
                row.detectable = power.as_fraction(d, higher_better)
            except OverflowError:  # a log spread past e ** 709 (latencies near 1e308): no finite change
                row.detectable = math.inf
        row.blind = row.detectable is None or not row.detectable <= result.must_see
        if result.plan is not None:
            sd = power.pooled_log_sd(row.baseline, row.new)
            row.runs_needed = None if sd is None else power.runs_needed(
                sd, result.rho, max(tested, len(result.rows)), result.alpha, log_thr,
                power.from_fraction(result.plan, higher_better))

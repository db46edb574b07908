"""Regression comparison of new runs against baseline runs, with runs as the unit of sampling.

Per configuration (``keys.config_key``: benchmark, size, ranks, backend, options):

- each run gives one value: by default its p50 latency (``metrics.metric_value``; a run that measured
  the configuration twice gives the median of the two);
- ratio = median(new run values) / median(baseline run values);
- a distribution-free confidence interval for the ratio over runs (``intervals.interval``); the change
  is significant when the interval excludes 1;
- regression: the ratio is beyond the threshold in the bad direction (latency up, bandwidth down) AND
  significant. Beyond the threshold with too few runs to judge significance is an *unconfirmed*
  regression ("regression?"); beyond it with an interval that holds 1 is noise.

Launch-to-launch variance dominates small messages (the same binary on an idle machine lands at 1.5 or
3 us from one launch to the next), so iteration-level spread inside one run says nothing about it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from microbench.gate import intervals
from microbench.gate.columns import Table, per_run_medians
from microbench.gate.keys import ConfigKey
from microbench.gate.load import run_label
from microbench.gate.metrics import higher_is_better

#: verdicts; the first two make ``microbench compare`` exit 1 (the second unless allowed)
REGRESSION, UNCONFIRMED, NOISE, OK, IMPROVED, IMPROVED_UNCONFIRMED = (
    "regression", "regression?", "noise", "ok", "improved", "improved?")


@dataclass
class Row:
    """One configuration measured on both sides."""

    key: ConfigKey
    baseline: list[float]
    new: list[float]
    baseline_runs: list[str]
    new_runs: list[str]
    ratio: float
    interval: intervals.Interval | None
    verdict: str

    @property
    def baseline_median(self) -> float:
        return float(statistics.median(self.baseline))

    @property
    def new_median(self) -> float:
        return float(statistics.median(self.new))

    @property
    def significant(self) -> bool | None:
        return None if self.interval is None else self.interval.excludes_one()

    def as_dict(self) -> dict:
        iv = self.interval
        return {"config": self.key.as_dict(), "baseline_values": self.baseline, "new_values": self.new,
                "baseline_run_ids": self.baseline_runs, "new_run_ids": self.new_runs,
                "baseline_median": self.baseline_median, "new_median": self.new_median, "ratio": self.ratio,
                "ci_low": iv.low if iv else None, "ci_high": iv.high if iv else None,
                "ci_confidence": iv.confidence if iv else None, "significant": self.significant,
                "verdict": self.verdict}


@dataclass
class Comparison:
    metric: str
    stat: str
    threshold: float
    confidence: float
    rows: list[Row] = field(default_factory=list)
    only_baseline: list[ConfigKey] = field(default_factory=list)
    only_new: list[ConfigKey] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)


def per_run_values(table: Table, metric: str, stat: str, rows: np.ndarray | None = None
                   ) -> dict[ConfigKey, list[tuple[str, float]]]:
    """Configuration -> [(run label, the run's value)], one entry per run that measured it (among ``rows``,
    a boolean mask; all rows when None). Values that are missing or not above 0 are left out."""
    values = table.values(metric, stat)
    usable = np.isfinite(values) & (values > 0)
    if rows is not None:
        usable &= rows
    picked = np.flatnonzero(usable)
    configs, runs, medians = per_run_medians(table.config[picked], table.run[picked], values[picked])
    labels = [run_label(run) for run in table.runs]
    out: dict[ConfigKey, list[tuple[str, float]]] = {}
    for config, run, value in zip(configs.tolist(), runs.tolist(), medians.tolist()):
        out.setdefault(table.configs[config], []).append((labels[run], value))
    return out


def verdict(ratio: float, interval: intervals.Interval | None, threshold: float, higher_better: bool) -> str:
    """Classify one ratio (new / baseline); see the module docstring."""
    worse = ratio < 1 - threshold if higher_better else ratio > 1 + threshold
    better = ratio > 1 + threshold if higher_better else ratio < 1 - threshold
    if not (worse or better):
        return OK
    if interval is None:
        return UNCONFIRMED if worse else IMPROVED_UNCONFIRMED
    up, down = interval.low > 1, interval.high < 1
    if worse and (down if higher_better else up):
        return REGRESSION
    if better and (up if higher_better else down):
        return IMPROVED
    return NOISE


def compare(baseline: Table, new: Table, metric: str = "latency", stat: str = "p50",
            threshold: float = 0.05, confidence: float = 0.95,
            select: Callable[[Table], np.ndarray] | None = None) -> Comparison:
    """Compare every configuration measured on both sides; small messages first. ``select`` gives the
    rows of a table to compare (a boolean mask)."""
    base_values = per_run_values(baseline, metric, stat, select(baseline) if select else None)
    new_values = per_run_values(new, metric, stat, select(new) if select else None)
    result = Comparison(metric, stat, threshold, confidence)
    for key in sorted(set(base_values) | set(new_values), key=ConfigKey.sort_key):
        if key not in new_values:
            result.only_baseline.append(key)
            continue
        if key not in base_values:
            result.only_new.append(key)
            continue
        b_runs, b = zip(*base_values[key])
        n_runs, n = zip(*new_values[key])
        ratio = statistics.median(n) / statistics.median(b)
        iv = intervals.interval(b, n, confidence)
        result.rows.append(Row(key, list(b), list(n), list(b_runs), list(n_runs), float(ratio), iv,
                               verdict(ratio, iv, threshold, higher_is_better(metric))))
    return result

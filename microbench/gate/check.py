"""Judging runs against a spec: each rule, each configuration it covers, each criterion.

A rule selects result records (benchmark, sizes, filters) and groups them by configuration
(``keys.config_key``); each run contributes one value per configuration (the median, should a run hold
the configuration twice). Per threshold the per-run
values (``metrics.metric_value``) are reduced by the rule's ``runs`` mode (best, median, or all = the
worst run) and compared with the limit loosened by the tolerance. ``require_check`` needs
``check == "pass"`` in every run (a data error is not noise). ``min_runs`` needs that many runs.

Fail closed: a rule that no measurement matches fails, and so does a size the rule lists that no
measurement covers, or a record that lacks the statistic a threshold reads.

Three outcomes (``gate/outcome.py``): a rule FAILs on a fail-closed problem, a broken limit judged on at least
``min_runs`` runs, or a failed data check (a data error is never noise, one run decides it); it is INCONCLUSIVE
where a configuration has fewer runs than ``min_runs`` and nothing else failed (its limits were judged, but on
fewer runs than the rule asks for: one pairs run that flags a node is "repeat before acting", not a FAIL);
PASS otherwise. ``unjudged`` names what was measured that no rule judges (``check --strict`` fails on it).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from microbench.errors import printable
from microbench.gate.outcome import FAIL, INCONCLUSIVE, PASS
from microbench.gate.spec import Rule, Spec
from microbench.gate.text import size_text
from microbench.results.columns import Table
from microbench.results.keys import ConfigKey
from microbench.results.load import unique_labels
from microbench.results import metrics
from microbench.results.metrics import UNITS, higher_is_better, threshold_what


@dataclass
class Judgement:
    """One criterion of a rule on one configuration."""

    key: ConfigKey
    criterion: str  #: threshold key (max_latency_us, ...), "require_check" or "min_runs"
    passed: bool
    run_ids: list[str]
    values: list  #: per-run values (float or None), or per-run check states
    value: float | None = None  #: the judged value (after the runs mode)
    limit: float | None = None
    allowed: float | None = None  #: the limit loosened by the tolerance
    metric: str | None = None
    stat: str | None = None
    detail: str = ""
    launch_bound_runs: int = 0  #: runs with a record marked launch-bound (issue 44)
    short: bool = False  #: judged on fewer runs than the rule's min_runs: a failure is INCONCLUSIVE, not FAIL

    @property
    def state(self) -> str:
        """``pass``, ``FAIL``, or ``inconclusive`` (not passed, on fewer runs than the rule asks for)."""
        return "pass" if self.passed else "inconclusive" if self.short else "FAIL"

    def where(self) -> str:
        k = self.key
        return f"{k.benchmark} {size_text(k.size_bytes)} ({k.get('ranks')} ranks, {k.get('backend')})"

    def message(self) -> str:
        return f"{self.where()}: {self.detail}"

    def as_dict(self) -> dict:
        return {"config": self.key.as_dict(), "criterion": self.criterion, "passed": self.passed,
                "metric": self.metric, "stat": self.stat, "runs": len(self.run_ids), "run_ids": self.run_ids,
                "values": self.values, "value": self.value, "limit": self.limit, "allowed": self.allowed,
                "detail": self.detail, "launch_bound_runs": self.launch_bound_runs, "state": self.state}


@dataclass
class RuleOutcome:
    rule: Rule
    judgements: list[Judgement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  #: fail-closed reasons (nothing matched, sizes missing)

    @property
    def outcome(self) -> str:
        """FAIL (a problem, or a judgement failed on enough runs), INCONCLUSIVE (only short judgements did not
        pass), or PASS."""
        if self.problems or any(j.state == "FAIL" for j in self.judgements):
            return FAIL
        return INCONCLUSIVE if any(j.state == "inconclusive" for j in self.judgements) else PASS

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def failures(self) -> list[str]:
        return self.problems + [j.message() for j in self.judgements if j.state == "FAIL"]

    def inconclusive(self) -> list[str]:
        """What was judged on fewer runs than the rule asks for and did not pass."""
        return [j.message() for j in self.judgements if j.state == "inconclusive"]

    def as_dict(self) -> dict:
        r = self.rule
        return {"index": r.index, "name": r.title(), "passed": self.passed, "outcome": self.outcome,
                "benchmarks": list(r.benchmarks),
                "sizes": list(r.sizes) if r.sizes is not None else None, "filters": r.filters,
                "runs_mode": r.runs, "tolerance": r.tolerance, "min_runs": r.min_runs,
                "require_check": r.require_check, "problems": self.problems,
                "judgements": [j.as_dict() for j in self.judgements]}


def evaluate(spec: Spec, table: Table) -> list[RuleOutcome]:
    """Judge every rule of ``spec`` on the rows of ``table``."""
    labels = unique_labels(table.runs)
    return [evaluate_rule(rule, table, labels) for rule in spec.rules]


def evaluate_rule(rule: Rule, table: Table, labels: list[str]) -> RuleOutcome:
    outcome = RuleOutcome(rule)
    mask = table.config_mask(rule.matches_config)
    if rule.sizes is not None:
        mask &= table.size_mask(rule.sizes)
    rows = np.flatnonzero(mask)
    if not len(rows):
        outcome.problems.append(f"no measurement matches {_selection(rule)} (fail closed)")
        return outcome
    outcome.problems.extend(_missing_sizes(rule, table, rows))
    order = np.argsort(table.config[rows], kind="stable")
    rows = rows[order]
    bounds = np.flatnonzero(np.r_[True, np.diff(table.config[rows]) != 0, True])
    groups = {table.configs[table.config[rows[a]]]: rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])}
    for key in sorted(groups, key=ConfigKey.sort_key):
        by_run = RunGroups.of(table, groups[key])
        run_ids = [labels[i] for i in by_run.runs.tolist()]
        short = len(run_ids) < rule.min_runs
        if rule.min_runs > 1:
            outcome.judgements.append(Judgement(
                key, "min_runs", not short, run_ids, [], value=len(run_ids), limit=rule.min_runs, short=short,
                detail=f"{len(run_ids)} run(s), the rule needs at least {rule.min_runs}"
                       + (f": run {rule.min_runs - len(run_ids)} more before acting" if short else "")))
        for threshold in rule.thresholds:
            judged = _judge_threshold(rule, threshold, key, table, by_run, run_ids)
            judged.short = short
            outcome.judgements.append(judged)
        if rule.require_check:
            outcome.judgements.append(_judge_check(key, table, by_run, run_ids))
    return outcome


def unjudged(spec: Spec, table: Table) -> list[dict]:
    """What was measured that no rule of ``spec`` judges: per benchmark, its configurations and sizes (small
    first), as ``{"benchmark", "configurations", "sizes"}``."""
    covered = np.zeros(len(table), dtype=bool)
    for rule in spec.rules:
        mask = table.config_mask(rule.matches_config)
        if rule.sizes is not None:
            mask &= table.size_mask(rule.sizes)
        covered |= mask
    rows = np.flatnonzero(~covered)
    if not len(rows):
        return []
    out: dict[str, dict] = {}
    for code in np.unique(table.config[rows]).tolist():
        key = table.configs[code]
        entry = out.setdefault(key.benchmark, {"benchmark": key.benchmark, "configurations": 0, "sizes": set()})
        entry["configurations"] += 1
        if key.size_bytes is not None and key.size_bytes >= 0:
            entry["sizes"].add(key.size_bytes)
    return [{**e, "sizes": sorted(e["sizes"])} for _, e in sorted(out.items())]


@dataclass
class RunGroups:
    """The rows of one configuration grouped by run: ``rows[starts[i]:starts[i + 1]]`` belong to ``runs[i]``."""

    runs: np.ndarray
    rows: np.ndarray
    starts: np.ndarray  #: with len(rows) appended

    @classmethod
    def of(cls, table: Table, rows: np.ndarray) -> "RunGroups":
        rows = rows[np.argsort(table.run[rows], kind="stable")]
        owners = table.run[rows]
        starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
        return cls(owners[starts], rows, np.r_[starts, len(rows)])

    def per_run(self, column: np.ndarray) -> list[float | None]:
        """Each run's median of ``column`` over its rows; None where a row lacks the value (NaN)."""
        values = column[self.rows]
        if len(self.runs) == len(self.rows):  # one row per run: the usual case
            return [None if v != v else v for v in values.tolist()]
        lacking = np.logical_or.reduceat(np.isnan(values), self.starts[:-1])
        medians = [float(np.median(values[a:b])) for a, b in zip(self.starts[:-1], self.starts[1:])]
        return [None if bad else m for bad, m in zip(lacking.tolist(), medians)]

    def groups(self):
        """The rows of each run, in run order."""
        return (self.rows[a:b] for a, b in zip(self.starts[:-1], self.starts[1:]))


def _selection(rule: Rule) -> str:
    where = [f"{k}={v}" for k, v in rule.filters.items()]
    sizes = f"at {rule.sizes_text}" if rule.sizes_text else "at any size"
    return " ".join(["/".join(rule.benchmarks), sizes, *where])


def _missing_sizes(rule: Rule, table: Table, rows: np.ndarray) -> list[str]:
    names = table.benchmarks()[rows]
    if rule.sizes is None:
        found = set(names)
        return [f"no measurement of {b} matches (fail closed)" for b in rule.benchmarks if b not in found]
    problems = []
    for bench in rule.benchmarks:
        mine = rows[names == bench]
        covered = set(table.size[mine].tolist()) | set(table.requested[mine].tolist())
        missing = [s for s in rule.sizes if s not in covered]
        if missing:
            shown = ", ".join(size_text(s) for s in missing[:8]) + (" ..." if len(missing) > 8 else "")
            problems.append(f"no measurement of {bench} at {shown} (fail closed)")
    return problems


def reduce_runs(values: list[float], mode: str, higher_better: bool) -> float:
    """The value a rule judges from per-run values: best, median or all (= the worst run)."""
    if mode == "median":
        return float(statistics.median(values))
    pick_best = (mode == "best")
    return float(max(values) if pick_best == higher_better else min(values))


def _judge_threshold(rule: Rule, threshold, key: ConfigKey, table: Table, by_run: RunGroups,
                     run_ids: list[str]) -> Judgement:
    stat = rule.stat_for(threshold.metric)
    values = by_run.per_run(table.values(threshold.metric, stat))
    allowed = threshold.allowed(rule.tolerance)
    base = dict(key=key, criterion=threshold.name, run_ids=run_ids, values=values, limit=threshold.limit,
                allowed=allowed, metric=threshold.metric, stat=stat)
    lacking = sum(v is None for v in values)
    if lacking:
        field_name = metrics.TABLE[threshold.metric].reads(stat)
        return Judgement(passed=False, detail=f"{lacking} of {len(values)} run(s) lack {field_name}", **base)
    value = reduce_runs(values, rule.runs, higher_is_better(threshold.metric))
    passed = threshold.passes(value, rule.tolerance)
    unit = UNITS[threshold.metric]
    what = threshold_what(threshold.metric, stat)
    op = ("<=" if passed else ">") if threshold.bound == "max" else (">=" if passed else "<")
    how = f"{rule.runs} of {len(values)} runs" if len(values) > 1 else "1 run"
    tol = f" ({threshold.limit:g} {'+' if threshold.bound == 'max' else '-'} {rule.tolerance * 100:g} %)" \
        if rule.tolerance else ""
    detail = f"{what} {value:.4g} {unit} {op} allowed {allowed:.4g} {unit}{tol}, {how}"
    explain, always = DETAILS.get(threshold.metric, (None, False))
    if explain is not None and (always or not passed):
        detail += explain(table, by_run)
    bound = launch_bound_runs(table, by_run, threshold.metric)
    if bound:
        detail += f"; {metrics.LAUNCH_BOUND_ADVICE_SHORT} in {bound} of {len(values)} run(s)"
    return Judgement(passed=passed, value=value, detail=detail, launch_bound_runs=bound, **base)


def launch_bound_runs(table: Table, by_run: RunGroups, metric: str) -> int:
    """How many runs of the configuration have a record marked launch-bound (for the metrics it misstates)."""
    if metric not in metrics.LAUNCH_MARKED:
        return 0
    bound = metrics.launch_bound(table.numbers)
    return sum(bool(bound[rows].any()) for rows in by_run.groups())


def _outlier_links(table: Table, by_run: RunGroups) -> str:
    """``; flagged: a-b (2 runs), node n3 (1 run), ...``: the links and nodes pairs records flagged as outliers,
    with how many runs did."""
    count: Counter[str] = Counter()
    for rows in by_run.groups():
        flagged = set()
        for row in rows:
            extra = table.extras.get(int(row), {})
            flagged |= {"-".join(map(str, o.get("labels") or o.get("pair") or ()))
                        for o in extra.get("outliers") or () if isinstance(o, dict)}
            flagged |= {f"node {o.get('label')}" for o in extra.get("node_outliers") or () if isinstance(o, dict)}
        count.update(flagged)
    shown = [f"{link} ({n} run{'s' if n > 1 else ''})" for link, n in count.most_common()]
    return f"; flagged: {', '.join(shown[:8])}{' ...' if len(shown) > 8 else ''}" if shown else ""


def _skewed_ranks(table: Table, by_run: RunGroups) -> str:
    """``; slowest rank 3 on n01 (120 us), fastest rank 5 on n02 (40 us)``: each run's extremes, hosts named.
    The stragglers blocks are not in the table (one per record): they are read back from the runs' files,
    for failing skew judgements only."""
    seen = []
    for rows in by_run.groups():
        for block in straggler_blocks(table, rows):
            text = ", ".join(filter(None, (_side_text(block, side) for side in ("slowest", "fastest"))))
            odd = [f"{printable(str(o.get('label')))} ({printable(str(o.get('side')))})"
                   for o in block.get("outliers") or () if isinstance(o, dict)]
            text += f", standing out: {', '.join(odd)}" if odd else ""
            if text and text not in seen:
                seen.append(text)
    return f"; {'; '.join(seen[:4])}{' ...' if len(seen) > 4 else ''}" if seen else ""


def _side_text(block: dict, side: str) -> str:
    """``slowest rank 3 on n01 (120 us)`` from a stragglers block ('' when the block lacks that side); values
    of an unexpected type are shown as they are, control characters replaced."""
    part = block.get(side)
    if not isinstance(part, dict):
        return ""
    mean = part.get("mean_us")
    mean_text = f"{mean:.4g}" if isinstance(mean, (int, float)) and not isinstance(mean, bool) else "?"
    return f"{side} rank {printable(str(part.get('rank')))} on {printable(str(part.get('host')))} ({mean_text} us)"


class StragglerIndex:
    """The ``stragglers`` blocks of the files behind a table, each file read once (by ``records.read_runs``)
    and its blocks indexed by (run id, configuration)."""

    def __init__(self):
        self.files: dict[str, dict[tuple, list[dict]]] = {}

    def blocks(self, source: str, run_id: str | None, wanted: ConfigKey) -> list[dict]:
        if source not in self.files:
            from microbench.records import read_runs
            from microbench.results import keys

            index: dict[tuple, list[dict]] = {}
            for found in read_runs([source]):
                for r in found.results:
                    if isinstance(r.get("stragglers"), dict):
                        index.setdefault((found.run_id, keys.config_key(r)), []).append(r["stragglers"])
            self.files[source] = index
        return self.files[source].get((run_id, wanted), [])


_STRAGGLERS: dict[int, tuple[Table, StragglerIndex]] = {}  #: id(table) -> (table, its index); the latest only


def straggler_blocks(table: Table, rows: np.ndarray) -> list[dict]:
    """The ``stragglers`` blocks of the records behind ``rows``, read from their runs' files (each file once
    per table)."""
    held = _STRAGGLERS.get(id(table))
    if held is None or held[0] is not table:
        _STRAGGLERS.clear()
        held = _STRAGGLERS[id(table)] = (table, StragglerIndex())
    index = held[1]
    out = []
    for row in rows.tolist():
        run = table.runs[table.run[row]]
        out += index.blocks(run.source, run.run_id, table.configs[table.config[row]])
    return out


#: metric -> (what a judgement adds to its detail, whether also when it passes): the links and nodes a pairs matrix
#: flags; the extreme ranks of a failing skew
DETAILS = {metrics.OUTLIERS: (lambda table, by_run: _outlier_links(table, by_run), True),
           metrics.SKEW: (lambda table, by_run: _skewed_ranks(table, by_run), False)}


def _judge_check(key: ConfigKey, table: Table, by_run: RunGroups, run_ids: list[str]) -> Judgement:
    per_run = [table.check_values(rows) for rows in by_run.groups()]
    states = ["fail" if "fail" in s else None if None in s else s[0] if len(set(s)) == 1 else "mixed"
              for s in per_run]
    failed = [rid for rid, s in zip(run_ids, states) if s == "fail"]
    unchecked = sum(s is None for s in states)
    passed = not failed and not unchecked and all(s == "pass" for s in states)
    if failed:
        detail = f"data check FAILED in run(s) {', '.join(failed)}"
    elif unchecked:
        detail = f"data not checked in {unchecked} of {len(states)} run(s) (run with -c)"
    elif not passed:
        detail = f"unexpected check states {sorted(set(map(str, states)))}"
    else:
        detail = f"data check passed in {len(states)} of {len(states)} run(s)"
    return Judgement(key, "require_check", passed, run_ids, states, detail=detail)

"""Judging runs against a spec: each rule, each configuration it covers, each criterion.

A rule selects result records (benchmark, sizes, filters) and groups them by configuration
(``keys.config_key``); each run contributes one value per configuration (the median, should a run hold
the configuration twice). Per threshold the per-run
values (``metrics.metric_value``) are reduced by the rule's ``runs`` mode (best, median, or all = the
worst run) and compared with the limit loosened by the tolerance. ``require_check`` needs
``check == "pass"`` in every run (a data error is not noise). ``min_runs`` needs that many runs.

Fail closed: a rule that no measurement matches fails, and so does a size the rule lists that no
measurement covers, or a record that lacks the statistic a threshold reads.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from microbench.gate import keys
from microbench.gate.keys import ConfigKey
from microbench.gate.load import unique_labels
from microbench.gate.metrics import OUTLIERS, SKEW, UNITS, higher_is_better, metric_value, threshold_what
from microbench.gate.spec import Rule, Spec
from microbench.gate.table import size_text
from microbench.records import Run


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

    def where(self) -> str:
        k = self.key
        return f"{k.benchmark} {size_text(k.size_bytes)} ({k.get('ranks')} ranks, {k.get('backend')})"

    def message(self) -> str:
        return f"{self.where()}: {self.detail}"

    def as_dict(self) -> dict:
        return {"config": self.key.as_dict(), "criterion": self.criterion, "passed": self.passed,
                "metric": self.metric, "stat": self.stat, "runs": len(self.run_ids), "run_ids": self.run_ids,
                "values": self.values, "value": self.value, "limit": self.limit, "allowed": self.allowed,
                "detail": self.detail}


@dataclass
class RuleOutcome:
    rule: Rule
    judgements: list[Judgement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  #: fail-closed reasons (nothing matched, sizes missing)

    @property
    def passed(self) -> bool:
        return not self.problems and all(j.passed for j in self.judgements)

    def failures(self) -> list[str]:
        return self.problems + [j.message() for j in self.judgements if not j.passed]

    def as_dict(self) -> dict:
        r = self.rule
        return {"index": r.index, "name": r.title(), "passed": self.passed, "benchmarks": list(r.benchmarks),
                "sizes": list(r.sizes) if r.sizes is not None else None, "filters": r.filters,
                "runs_mode": r.runs, "tolerance": r.tolerance, "min_runs": r.min_runs,
                "require_check": r.require_check, "problems": self.problems,
                "judgements": [j.as_dict() for j in self.judgements]}


def evaluate(spec: Spec, runs: list[Run]) -> list[RuleOutcome]:
    """Judge every rule of ``spec`` on ``runs``."""
    return [evaluate_rule(rule, runs) for rule in spec.rules]


#: configuration -> run label -> that run's results of the configuration (usually one)
Groups = dict[ConfigKey, dict[str, list[dict]]]


def evaluate_rule(rule: Rule, runs: list[Run]) -> RuleOutcome:
    outcome = RuleOutcome(rule)
    groups: Groups = {}
    for label, run in zip(unique_labels(runs), runs):
        for result in run.results:
            if rule.matches(result):
                groups.setdefault(keys.config_key(result), {}).setdefault(label, []).append(result)
    if not groups:
        outcome.problems.append(f"no measurement matches {_selection(rule)} (fail closed)")
        return outcome
    outcome.problems.extend(_missing_sizes(rule, groups))
    for key in sorted(groups, key=ConfigKey.sort_key):
        by_run = groups[key]
        if rule.min_runs > 1:
            ok = len(by_run) >= rule.min_runs
            outcome.judgements.append(Judgement(
                key, "min_runs", ok, list(by_run), [], value=len(by_run), limit=rule.min_runs,
                detail=f"{len(by_run)} run(s), the rule needs at least {rule.min_runs}"))
        for threshold in rule.thresholds:
            outcome.judgements.append(_judge_threshold(rule, threshold, key, by_run))
        if rule.require_check:
            outcome.judgements.append(_judge_check(key, by_run))
    return outcome


def _selection(rule: Rule) -> str:
    where = [f"{k}={v}" for k, v in rule.filters.items()]
    sizes = f"at {rule.sizes_text}" if rule.sizes_text else "at any size"
    return " ".join(["/".join(rule.benchmarks), sizes, *where])


def _missing_sizes(rule: Rule, groups: Groups) -> list[str]:
    if rule.sizes is None:
        found = {k.benchmark for k in groups}
        return [f"no measurement of {b} matches (fail closed)" for b in rule.benchmarks if b not in found]
    problems = []
    for bench in rule.benchmarks:
        covered = set()
        for key, by_run in groups.items():
            if key.benchmark == bench:
                for results in by_run.values():
                    covered.update(r.get(f) for r in results for f in ("size_bytes", "requested_bytes"))
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


def _judge_threshold(rule: Rule, threshold, key: ConfigKey, by_run: dict[str, list[dict]]) -> Judgement:
    stat = rule.stat_for(threshold.metric)
    run_ids = list(by_run)
    per_result = [[metric_value(res, threshold.metric, stat) for res in results] for results in by_run.values()]
    values = [None if None in vals else float(statistics.median(vals)) for vals in per_result]
    allowed = threshold.allowed(rule.tolerance)
    base = dict(key=key, criterion=threshold.name, run_ids=run_ids, values=values, limit=threshold.limit,
                allowed=allowed, metric=threshold.metric, stat=stat)
    lacking = sum(v is None for v in values)
    if lacking:
        field_name = f"latency_us.{stat}" if threshold.metric == "latency" else "an outliers list" \
            if threshold.metric == OUTLIERS else "stragglers.skew" if threshold.metric == SKEW \
            else f"{threshold.metric} from {stat}"
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
    if threshold.metric == OUTLIERS:
        detail += _outlier_links(by_run)
    if threshold.metric == SKEW and not passed:
        detail += _skewed_ranks(by_run)
    return Judgement(passed=passed, value=value, detail=detail, **base)


def _outlier_links(by_run: dict[str, list[dict]]) -> str:
    """``; flagged: a-b (2 runs), ...``: the links pairs records flagged as outliers, with how many runs did."""
    count: Counter[str] = Counter()
    for results in by_run.values():
        count.update({"-".join(map(str, o.get("labels") or o.get("pair") or ())) for res in results
                      for o in res.get("outliers") or () if isinstance(o, dict)})
    shown = [f"{link} ({n} run{'s' if n > 1 else ''})" for link, n in count.most_common()]
    return f"; flagged: {', '.join(shown[:8])}{' ...' if len(shown) > 8 else ''}" if shown else ""


def _skewed_ranks(by_run: dict[str, list[dict]]) -> str:
    """``; slowest rank 3 on n01 (120 us), fastest rank 5 on n02 (40 us)``: each run's extremes, hosts named."""
    seen = []
    for results in by_run.values():
        for res in results:
            block = res.get("stragglers") or {}
            text = ", ".join(f"{side} rank {block[side]['rank']} on {block[side]['host']} "
                             f"({block[side]['mean_us']:.4g} us)" for side in ("slowest", "fastest") if side in block)
            odd = [f"{o['label']} ({o['side']})" for o in block.get("outliers") or ()]
            text += f", standing out: {', '.join(odd)}" if odd else ""
            if text and text not in seen:
                seen.append(text)
    return f"; {'; '.join(seen[:4])}{' ...' if len(seen) > 4 else ''}" if seen else ""


def _judge_check(key: ConfigKey, by_run: dict[str, list[dict]]) -> Judgement:
    run_ids = list(by_run)
    per_run = [[res.get("check") for res in results] for results in by_run.values()]
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

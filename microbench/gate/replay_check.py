"""Spec rules on replay records (``microbench replay --out``): bound the exposed share of communication and
the prediction error of a replayed iteration.

```toml
[[replay]]
name = "DDP hides its gradients"        # optional
scheme = "ddp"                          # filters: scheme (or a list), backend; default every replay record
max_exposed_share = 0.2                 # exposed communication / iteration (needs a replay with --tflops)
max_prediction_error = 0.25             # |replayed / predicted - 1| of the whole iteration (the "total" row)
```

Every replay record a rule matches is judged (every one must pass); no matching record fails the rule
(fail closed, as ``[[rule]]`` does); a record without the figure a bound needs (the exposed share of a replay
without ``--tflops``) fails that bound and says why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from microbench.errors import printable
from microbench.records import read_records
from microbench.records.model import ReplayRecord

KEYS = ("name", "scheme", "backend", "max_exposed_share", "max_prediction_error")
BOUNDS = ("max_exposed_share", "max_prediction_error")


@dataclass(frozen=True)
class ReplayRule:
    index: int
    name: str
    schemes: tuple[str, ...]  #: empty: any
    backend: str | None
    bounds: dict  #: bound key -> limit

    def title(self) -> str:
        what = f"scheme {', '.join(self.schemes)}" if self.schemes else "every replay"
        return self.name or f"replay of {what}" + (f" on {self.backend}" if self.backend else "")

    def matches(self, record: dict) -> bool:
        workload = record.get("workload")
        scheme = workload.get("scheme", "trace") if isinstance(workload, dict) else "trace"
        return (not self.schemes or scheme in self.schemes) and (self.backend is None or
                                                                   record.get("backend") == self.backend)


def parse_rules(raw: Any, fail: Callable[[str], None], first_index: int) -> tuple[ReplayRule, ...]:
    """The spec's ``[[replay]]`` tables, validated (``fail`` raises with the message)."""
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        fail("'replay' must be an array of tables: write each replay rule as [[replay]]")
    rules = []
    for i, table in enumerate(raw, first_index):
        for key in table:
            if key not in KEYS:
                fail(f"replay rule {i}: unknown key {key!r} (known: {', '.join(KEYS)})")
        schemes = table.get("scheme", ())
        schemes = (schemes,) if isinstance(schemes, str) else schemes
        if not isinstance(schemes, (list, tuple)) or not all(isinstance(s, str) for s in schemes):
            fail(f"replay rule {i}: scheme must be a string or a list of strings")
        backend = table.get("backend")
        if backend is not None and not isinstance(backend, str):
            fail(f"replay rule {i}: backend must be a string")
        bounds = {}
        for key in BOUNDS:
            if key in table:
                value = table[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                    fail(f"replay rule {i}: {key} must be a number >= 0 (got {value!r})")
                bounds[key] = float(value)
        if not bounds:
            fail(f"replay rule {i}: give max_exposed_share or max_prediction_error")
        name = table.get("name", "")
        if not isinstance(name, str):
            fail(f"replay rule {i}: name must be a string")
        rules.append(ReplayRule(i, name, tuple(schemes), backend, bounds))
    return tuple(rules)


def read_replays(paths: list[str]) -> list[dict]:
    """Every replay record in the files (and folders' *.jsonl) given, in file order, each checked against the
    record model (``records.read_records``)."""
    return [record for _, _, record in read_records(paths, (ReplayRecord,))]


@dataclass
class ReplayOutcome:
    rule: ReplayRule
    rows: list[dict] = field(default_factory=list)  #: run_id, bound, value, limit, passed, detail
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and all(r["passed"] for r in self.rows)

    def lines(self) -> list[str]:
        lines = [f"replay rule {self.rule.index} {'PASS' if self.passed else 'FAIL'}: {self.rule.title()}"]
        lines += [f"  FAIL  {p}" for p in self.problems]
        lines += [f"  {'ok  ' if r['passed'] else 'FAIL'}  run {r['run_id']} {r['what']}: {r['detail']}" for r in self.rows]
        return lines

    def as_dict(self) -> dict:
        r = self.rule
        return {"index": r.index, "name": r.title(), "passed": self.passed, "schemes": list(r.schemes),
                "backend": r.backend, "bounds": r.bounds, "problems": self.problems, "judgements": self.rows}


def _value(bound: str, record: dict) -> tuple[float | None, str]:
    if bound == "max_exposed_share":
        if record.get("compute") is None:
            return None, "no compute in this replay (run it with --tflops): the exposed share is not measured"
        share = record.get("exposed_share")
        if not _finite(share):
            return None, "no exposed share in this record"
        return share, "exposed communication / iteration"
    rows = record.get("comparison")
    total = next((r for r in rows if isinstance(r, dict) and r.get("what") == "total"), None) \
        if isinstance(rows, list) else None
    ratio = total.get("ratio") if total else None
    if not _finite(ratio):
        return None, "no prediction of the whole iteration in this record"
    return abs(ratio - 1), f"|replayed / predicted - 1| (ratio {ratio:.3f})"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def judge(rule: ReplayRule, records: list[dict]) -> ReplayOutcome:
    """Every matching record against every bound of ``rule``."""
    outcome = ReplayOutcome(rule)
    matching = [r for r in records if rule.matches(r)]
    if not matching:
        outcome.problems.append(f"no replay record matches {rule.title()} (fail closed)")
    for record in matching:
        for bound, limit in rule.bounds.items():
            value, what = _value(bound, record)
            passed = value is not None and value <= limit
            detail = (f"{what} = {value:.3f}, limit {limit:g}" if value is not None else what)
            outcome.rows.append({"run_id": printable(str(record.get("run_id"))), "what": bound, "value": value, "limit": limit,
                                 "passed": passed, "detail": detail})
    return outcome

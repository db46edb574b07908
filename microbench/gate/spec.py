"""Acceptance specs: a TOML list of rules, loaded and validated (any mistake is a UsageError, exit 2).

```toml
description = "what this spec accepts"      # optional
[defaults]                                   # optional; every rule inherits these unless it sets them
runs = "median"
tolerance = 0.1
[[rule]]
benchmark = "allreduce"                      # or a list of benchmarks
sizes = "8:1K"                               # size grammar of `microbench run -m`; default: every size
backend = "mpi"                              # filters: any configuration field (see keys.py)
max_latency_us = 50                          # judged on p50 unless stat = "avg" | "p99" | ...
```

Rule keys: ``name``; ``benchmark``; ``sizes``; filters ``backend``, ``ranks`` and every option field of
``keys.OPTION_FIELDS``; thresholds (the spec keys of the metrics table, ``results.metrics``) ``max_latency_us``,
``min_busbw_gbps``, ``min_algbw_gbps``, ``max_first_call_us`` (the first call's slowest rank), and for
the pairwise link test (``benchmark = "pairs"``) ``max_outliers`` (outlier links and nodes its matrix flags);
``max_rank_skew`` (the slowest rank's mean latency over the fastest rank's, at least 1; failures name them);
for the non-blocking benchmarks ``min_overlap_pct`` (OMB's overlap, avg across ranks; ``stat = "p50"``: on
medians);
``stat``; ``tolerance`` (relative margin, 0.1 = limits loosened by 10 %); ``runs`` (``best``, ``median``
or ``all``: how several runs of one configuration are judged); ``min_runs``; ``require_check``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microbench.errors import UsageError
from microbench.gate.replay_check import parse_rules as parse_replay_rules
from microbench.results import keys
from microbench.results.load import benchmark_names
from microbench.records.files import read_small
from microbench.results import metrics
from microbench.results.metrics import LATENCY_STATS, UNITS, threshold_what
from microbench.units import format_size, parse_sizes

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_SPEC_BYTES = 64 << 20  #: a larger spec file is refused (10,000 rules take about 1 MB)

#: threshold key -> (metric, bound): "max" means the value must not exceed the limit (the metrics table's keys).
THRESHOLDS = metrics.SPEC_KEYS

#: How several runs of one configuration are judged.
RUNS_MODES = {
    "best": "the best run's value is judged (lowest latency, highest bandwidth)",
    "median": "the median of the runs' values is judged",
    "all": "every run must pass (the worst run's value is judged)",
}

FILTER_KEYS = ("backend", "ranks", *keys.OPTION_FIELDS)
JUDGING_KEYS = ("stat", "tolerance", "runs", "min_runs", "require_check")
RULE_KEYS = ("name", "benchmark", "sizes", *FILTER_KEYS, *THRESHOLDS, *JUDGING_KEYS)
DEFAULT_KEYS = (*FILTER_KEYS, *JUDGING_KEYS)
TOP_KEYS = ("description", "defaults", "rule", "replay")


@dataclass(frozen=True)
class Threshold:
    """One limit of a rule: ``metric`` must stay at or below (``max``) or above (``min``) ``limit``."""

    name: str  #: the spec key, e.g. max_latency_us
    metric: str  #: latency | busbw | algbw
    bound: str  #: max | min
    limit: float

    def allowed(self, tolerance: float) -> float:
        """The limit loosened by the relative tolerance."""
        return self.limit * (1 + tolerance) if self.bound == "max" else self.limit * (1 - tolerance)

    def passes(self, value: float, tolerance: float) -> bool:
        allowed = self.allowed(tolerance)
        return value <= allowed if self.bound == "max" else value >= allowed


@dataclass(frozen=True)
class Rule:
    """One validated rule; ``index`` counts from 1 in file order."""

    index: int
    benchmarks: tuple[str, ...]
    sizes: tuple[int, ...] | None
    sizes_text: str | None
    filters: dict[str, Any]
    thresholds: tuple[Threshold, ...]
    stat: str | None  #: None: p50 for latency, avg for bandwidth
    tolerance: float = 0.0
    runs: str = "median"
    min_runs: int = 1
    require_check: bool = False
    name: str = ""

    def stat_for(self, metric: str) -> str | None:
        """The statistic a threshold on ``metric`` judges: the rule's ``stat`` where the metric can be read at
        it, else the metric's default (None for a metric no statistic applies to, such as outliers)."""
        return metrics.stat_for(metric, self.stat)

    def matches_config(self, key: keys.ConfigKey) -> bool:
        """Whether a configuration falls under this rule's benchmarks and filters (sizes aside)."""
        return key.benchmark in self.benchmarks and all(key.get(k) == v for k, v in self.filters.items())

    def criteria_text(self) -> str:
        parts = []
        for t in self.thresholds:
            op = "<=" if t.bound == "max" else ">="
            what = threshold_what(t.metric, self.stat_for(t.metric), " latency")
            parts.append(f"{what} {op} {t.limit:g} {UNITS[t.metric]}")
        if self.require_check:
            parts.append("data check passes")
        return ", ".join(parts)

    def title(self) -> str:
        """The rule's name, or a description made from its fields."""
        if self.name:
            return self.name
        where = " ".join(f"{k}={v}" for k, v in self.filters.items())
        return f"{'/'.join(self.benchmarks)} {self.sizes_text or 'all sizes'}{' ' + where if where else ''}: " \
               f"{self.criteria_text()}"

    def judging_text(self) -> str:
        tol = f", tolerance {self.tolerance * 100:g} %" if self.tolerance else ""
        need = f", at least {self.min_runs} runs" if self.min_runs > 1 else ""
        return f"runs={self.runs}{tol}{need}"


@dataclass(frozen=True)
class Spec:
    path: str
    rules: tuple[Rule, ...]
    description: str = ""
    defaults: dict = field(default_factory=dict)
    replay_rules: tuple = ()  #: gate.replay_check.ReplayRule: bounds on replay records ([[replay]])


# ------------------------------------------------------------------------------------------- loading
def load_spec(path: str | os.PathLike) -> Spec:
    """Read and validate a spec file; every problem is one UsageError line naming the file."""
    p = Path(path)
    raw = read_small(p, MAX_SPEC_BYTES, "spec file")
    try:
        data = tomllib.loads(raw.decode())
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{p}:{line}: spec is not UTF-8 text") from None
    except RecursionError:
        raise UsageError(f"{p}: spec nested too deeply (a spec is a few tables of rules)") from None
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"at line (\d+)", str(exc))
        raise UsageError(f"{p}:{line.group(1) if line else 1}: spec is not valid TOML: {exc}") from None
    try:
        return parse_spec(data, str(p))
    except OverflowError:  # an integer beyond a float's range (max_latency_us = 1e400 written out)
        raise UsageError(f"spec {p}: a number too large to compare (beyond {sys.float_info.max:.3g})") from None
    except (TypeError, ValueError, RecursionError) as exc:  # a value of a type no check above expects
        raise UsageError(f"spec {p}: a value of an unexpected type ({type(exc).__name__}: {exc})") from None


def parse_spec(data: dict, source: str = "<spec>") -> Spec:
    """Validate a spec already parsed from TOML."""
    def fail(msg: str):
        raise UsageError(f"spec {source}: {msg}")

    _reject_unknown(data, TOP_KEYS, "at the top level", fail)
    description = data.get("description", "")
    if not isinstance(description, str):
        fail("description must be a string")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        fail("[defaults] must be a table")
    _reject_unknown(defaults, DEFAULT_KEYS, "in [defaults]", fail)
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        fail("'rule' must be an array of tables: write each rule as [[rule]]")
    replay_rules = parse_replay_rules(data["replay"], fail, len(raw_rules) + 1) if "replay" in data else ()
    if not raw_rules and not replay_rules:
        fail("no rules: add at least one [[rule]] (or [[replay]]) table")
    rules = tuple(_parse_rule(i, {**defaults, **raw}, raw, fail) for i, raw in enumerate(raw_rules, 1))
    return Spec(path=source, rules=rules, description=description, defaults=dict(defaults), replay_rules=replay_rules)


def _reject_unknown(table: dict, known: tuple[str, ...], where: str, fail) -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
            fail(f"unknown key {key!r}{' ' + where if where else ''}{hint}")


def _parse_rule(index: int, merged: dict, raw: dict, spec_fail) -> Rule:
    label = f"rule {index}"
    if isinstance(raw.get("benchmark"), str):
        label += f" ({raw['benchmark']})"

    def fail(msg: str):
        spec_fail(f"{label}: {msg}")

    _reject_unknown(raw, RULE_KEYS, "", fail)
    benchmarks = _benchmarks(merged.get("benchmark"), fail)
    sizes, sizes_text = _sizes(merged.get("sizes"), fail)
    filters = {}
    for name in FILTER_KEYS:
        if name in merged:
            filters[name] = _typed(name, merged[name], keys.FIELD_TYPES[name], fail)
    thresholds = []
    for name, (metric, bound) in THRESHOLDS.items():
        if name not in merged:
            continue
        limit = merged[name]
        problem = metrics.TABLE[metric].limit_problem(limit, benchmarks)
        if problem:
            fail(f"{name} {problem}")
        thresholds.append(Threshold(name, metric, bound, float(limit)))
    stat = merged.get("stat")
    if stat is not None and (not isinstance(stat, str) or stat not in LATENCY_STATS):
        fail(f"unknown stat {stat!r}: choose from {', '.join(LATENCY_STATS)}")
    tolerance = merged.get("tolerance", 0.0)
    if not _is_number(tolerance) or not 0 <= tolerance < 1:
        fail(f"tolerance must be a fraction from 0 up to 1, e.g. 0.1 for 10 % (got {tolerance!r})")
    runs = merged.get("runs", "median")
    if not isinstance(runs, str) or runs not in RUNS_MODES:
        fail(f"runs must be one of {', '.join(RUNS_MODES)} (got {runs!r})")
    min_runs = merged.get("min_runs", 1)
    if not isinstance(min_runs, int) or isinstance(min_runs, bool) or min_runs < 1:
        fail(f"min_runs must be a whole number of at least 1 (got {min_runs!r})")
    require_check = merged.get("require_check", False)
    if not isinstance(require_check, bool):
        fail(f"require_check must be true or false (got {require_check!r})")
    name = merged.get("name", "")
    if not isinstance(name, str):
        fail(f"name must be a string (got {name!r})")
    if not thresholds and not require_check:
        fail(f"nothing to judge: give {', '.join(THRESHOLDS)} or require_check = true")
    return Rule(index=index, benchmarks=benchmarks, sizes=sizes, sizes_text=sizes_text, filters=filters,
                thresholds=tuple(thresholds), stat=stat, tolerance=float(tolerance), runs=runs,
                min_runs=min_runs, require_check=require_check, name=name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _benchmarks(value: Any, fail) -> tuple[str, ...]:
    if value is None:
        fail("benchmark is required")
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(n, str) for n in names):
        fail(f"benchmark must be a name or a list of names (got {value!r})")
    try:
        chosen = benchmark_names(names)
    except UsageError as exc:
        fail(str(exc))
    if not chosen:
        fail(f"benchmark must be a name or a list of names (got {value!r})")
    return tuple(chosen)


def _sizes(value: Any, fail) -> tuple[tuple[int, ...] | None, str | None]:
    if value is None:
        return None, None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in items):
        fail(f"sizes must be a size list such as \"8:1K\" or \"8,1M\" (got {value!r})")
    text = ",".join(str(v) for v in items)
    try:
        sizes = parse_sizes(text)
    except UsageError as exc:
        fail(f"sizes: {exc}")
    shown = text if isinstance(value, str) else ",".join(format_size(s) for s in sizes)
    return tuple(sizes), shown


_KIND_WORDS = {bool: "true or false", int: "a whole number", str: "a string"}


def _typed(name: str, value: Any, kind: type, fail) -> Any:
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, kind) and not isinstance(value, bool))
    if not ok:
        fail(f"{name} must be {_KIND_WORDS[kind]} (got {value!r})")
    if name == "ranks" and value < 1:
        fail(f"ranks must be at least 1 (got {value})")
    return value

"""An acceptance spec (TOML, ``microbench check --spec``) as ReFrame references, and back into a test.

``microbench check --spec S --emit-reframe-references [SYSTEM[:PARTITION]]`` prints a JSON document:

```json
{"format": "microbench-reframe-references", "version": 1, "spec": "site.toml", "system": "daint:mc",
 "entries": [{"rule": 2, "title": "small-message allreduce latency", "benchmarks": ["allreduce"],
              "sizes": [8, 16], "filters": {"ranks": 2, "backend": "mpi"}, "require_check": false,
              "reference": {"daint:mc": {"p50_latency_8": [50.0, null, 0.1, "us"],
                                         "p50_latency_16": [50.0, null, 0.1, "us"]}}}],
 "not_converted": [{"rule": 9, "title": "...", "reason": "..."}], "notes": ["..."]}
```

Each ``reference`` is ReFrame's own form, ``{system:partition: {variable: (value, lower, upper, unit)}}``
with fractional, one-sided thresholds: a spec limit ``max_latency_us = L`` with tolerance t becomes
``(L, None, t, "us")`` (pass while value <= L x (1 + t)), ``min_busbw_gbps = B`` becomes
``(B, -t, None, "GB/s")`` (pass while value >= B x (1 - t)), exactly the bounds ``microbench check``
allows. A rule without sizes names its variables with ``*`` in place of the size
(``p50_latency_*``): the test applies it to every size it measured. ``microbench.reframe`` tests read
this file (variable ``reference_files``) and take the entries whose benchmark, ``ranks`` and
``backend`` fit the test; the entry's other filters (``torch_backend``, ``device``, ``dtype`` ...) are
asserted on the test's records by its sanity check.

Performance variable names (units in the reference tuple): ``{stat}_latency_{size}`` (us, stat p50,
p99, avg ...: the record's ``latency_us[stat]``), ``busbw_{size}`` and ``algbw_{size}`` (GB/s, from
the avg latency: the recorded value) or ``busbw_{stat}_{size}`` (from another statistic), and
``first_call_{size}`` (us, the slowest rank's first call). Sizes are written as ``microbench run -m``
reads them (``8``, ``4K``, ``1M``: powers of two).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from microbench.benchmarks.table import PAIRS
from microbench.errors import UsageError
from microbench.gate.spec import Rule, Spec
from microbench.results.metrics import OUTLIERS, UNITS, default_stat, metric_value
from microbench.units import format_size, parse_size

FORMAT = "microbench-reframe-references"
VERSION = 1
FIRST_CALL = "first_call"
ALL_SIZES = "*"
#: filters that choose which tests an entry applies to (the test's own parameters)
TEST_FILTERS = ("ranks", "backend")

NOTES = [
    "runs and min_runs of the spec are not represented: ReFrame judges each run of a test alone "
    "(as runs = \"all\"); use reframe --repeat for several runs",
    "filters other than ranks and backend are asserted by the test's sanity check on its records",
]


@dataclass(frozen=True)
class PerfVar:
    """One performance variable: ``metric`` (latency, busbw, algbw, first_call) at ``size`` bytes."""

    metric: str
    stat: str | None
    size: int | None  #: None: every measured size (``*`` in the name)

    @property
    def unit(self) -> str:
        return UNITS[self.metric]

    @property
    def name(self) -> str:
        size = ALL_SIZES if self.size is None else format_size(self.size)
        if self.metric == "latency":
            return f"{self.stat}_latency_{size}"
        if self.metric == FIRST_CALL:
            return f"{FIRST_CALL}_{size}"
        stat = "" if self.stat == default_stat(self.metric) else f"{self.stat}_"
        return f"{self.metric}_{stat}{size}"

    def at(self, size: int) -> "PerfVar":
        return PerfVar(self.metric, self.stat, size)

    def value(self, result: dict) -> float | None:
        """The variable's value in one result record (None when the record lacks it)."""
        return metric_value(result, self.metric, self.stat)


_NAME = re.compile(r"^(?:(?P<lstat>\w+?)_latency|(?P<first>first_call)|(?P<bw>busbw|algbw)(?:_(?P<bstat>[a-z]\w*?))?)"
                   r"_(?P<size>\*|\d+[KMGT]?)$")


def parse_perf_var(name: str) -> PerfVar:
    """The variable a name such as ``p50_latency_8``, ``busbw_1M`` or ``first_call_*`` stands for."""
    m = _NAME.match(name)
    if not m:
        raise UsageError(f"not a microbench performance variable: {name!r}")
    size = None if m["size"] == ALL_SIZES else parse_size(m["size"])
    if m["first"]:
        return PerfVar(FIRST_CALL, None, size)
    if m["bw"]:
        return PerfVar(m["bw"], m["bstat"] or default_stat(m["bw"]), size)
    return PerfVar("latency", m["lstat"], size)


# ------------------------------------------------------------------------------ spec -> references
def reference_tuple(bound: str, limit: float, tolerance: float, unit: str) -> list:
    """ReFrame's (value, lower, upper, unit) for a spec limit: one-sided, fractional thresholds."""
    return [limit, None, tolerance, unit] if bound == "max" else [limit, -tolerance if tolerance else 0.0, None, unit]


def rule_entry(rule: Rule, system: str) -> dict:
    """One spec rule as an entry of the references document (its thresholds other than outliers)."""
    variables = {}
    for threshold in rule.thresholds:
        var = PerfVar(threshold.metric, rule.stat_for(threshold.metric), None)
        for size in rule.sizes or (None,):
            named = var if size is None else var.at(size)
            variables[named.name] = reference_tuple(threshold.bound, threshold.limit, rule.tolerance, named.unit)
    return {"rule": rule.index, "title": rule.title(), "benchmarks": list(rule.benchmarks),
            "sizes": list(rule.sizes) if rule.sizes else None, "filters": dict(rule.filters),
            "require_check": rule.require_check, "reference": {system: variables}}


def spec_references(spec: Spec, system: str = "*") -> dict:
    """The references document for ``spec`` under ReFrame scope ``system`` (``*``, ``sys`` or ``sys:part``)."""
    if not re.fullmatch(r"\*|[\w.-]+(:[\w.-]+)?", system):
        raise UsageError(f"bad ReFrame system {system!r}: give SYSTEM, SYSTEM:PARTITION or *")
    entries, skipped = [], []
    for rule in spec.rules:
        if PAIRS in rule.benchmarks or any(t.metric == OUTLIERS for t in rule.thresholds):
            skipped.append({"rule": rule.index, "title": rule.title(),
                            "reason": "the pairwise link test has no microbench.reframe test"})
            continue
        entries.append(rule_entry(rule, system))
    return {"format": FORMAT, "version": VERSION, "spec": spec.path, "description": spec.description,
            "system": system, "entries": entries, "not_converted": skipped, "notes": NOTES}


def emit(spec: Spec, system: str | None) -> str:
    """The references document as JSON text (what ``--emit-reframe-references`` prints)."""
    text = json.dumps(spec_references(spec, system or "*"), indent=1)
    return _FLAT_LIST.sub(lambda m: "[" + ", ".join(part.strip() for part in m.group(1).split(",")) + "]", text)


#: a JSON list of scalars spread over lines by indent=1 (kept on one line: the reference tuples)
_FLAT_LIST = re.compile(r"\[\s*\n([^\[\]{}]*?)\s*\]")


# ------------------------------------------------------------------------------ references -> a test
def load_references(path: str) -> dict:
    """Read a references document; anything else is a UsageError naming the file."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"no such references file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read references {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f"{path} is not a microbench references file (made by microbench check "
                         f"--emit-reframe-references)")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise UsageError(f"{path}: references version {doc.get('version')!r} is newer than this microbench reads")
    return doc


def entries_for(docs: list[dict], benchmark: str, ranks: int, backend: str) -> list[dict]:
    """The entries of the documents that apply to a test of this benchmark, rank count and backend."""
    out = []
    for doc in docs:
        for entry in doc.get("entries", []):
            filters = entry.get("filters") or {}
            if benchmark in entry.get("benchmarks", []) and filters.get("ranks", ranks) == ranks \
                    and filters.get("backend", backend) == backend:
                out.append(entry)
    return out


def why_none_applies(docs: list[dict], benchmark: str, ranks: int, backend: str) -> str:
    """Why no entry of the documents applies to this test (``entries_for`` found none), in words: what the
    entries for the benchmark were made for (other rank counts, another backend), or that none names it."""
    made_for = sorted({f"{(e.get('filters') or {}).get('ranks', 'any')} ranks, "
                       f"backend {(e.get('filters') or {}).get('backend', 'any')}"
                       for doc in docs for e in doc.get("entries", []) if benchmark in e.get("benchmarks", [])})
    if made_for:
        return f"their {benchmark} entries are for {'; '.join(made_for)}"
    named = sorted({b for doc in docs for e in doc.get("entries", []) for b in e.get("benchmarks", [])})
    return f"they name no {benchmark} rule" + (f" (only {', '.join(named)})" if named else "")


def scopes_of(docs: list[dict]) -> set[str]:
    """Every ReFrame scope (``*``, ``SYSTEM``, ``SYSTEM:PARTITION``) the documents' entries name."""
    return {scope for doc in docs for e in doc.get("entries", []) for scope in (e.get("reference") or {})}


def asserted_filters(entry: dict) -> dict:
    """The entry's filters a test must find in its records (all but those that chose the test)."""
    return {k: v for k, v in (entry.get("filters") or {}).items() if k not in TEST_FILTERS}


def _allowed(ref: list) -> tuple[str, float]:
    value, lower, upper = ref[0], ref[1], ref[2]
    return ("max", value * (1 + upper)) if upper is not None else ("min", value * (1 + (lower or 0)))


def merged_reference(entries: list[dict], sizes: list[int]) -> dict:
    """ReFrame's reference dict from the entries, ``*`` variables expanded to ``sizes``.

    Where two rules name the same variable under the same scope, the stricter bound is kept.
    """
    merged: dict[str, dict[str, list]] = {}
    for entry in entries:
        for scope, variables in entry.get("reference", {}).items():
            target = merged.setdefault(scope, {})
            for name, ref in variables.items():
                var = parse_perf_var(name)
                for each in ([var.at(s) for s in sizes] if var.size is None else [var]):
                    old = target.get(each.name)
                    if old is None or _stricter(ref, old):
                        target[each.name] = list(ref)
    return merged


def _stricter(new: list, old: list) -> bool:
    (bound, allowed), (_, old_allowed) = _allowed(new), _allowed(old)
    return allowed < old_allowed if bound == "max" else allowed > old_allowed

"""Mutation testing as a habit (scripts/mutation.py, docs/mutation-testing.md): the committed baseline, the
page that explains every surviving mutant, and the script's own rules hold together.

The mutation runs themselves take minutes to hours (cosmic-ray runs a target's tests once per mutant); a
developer runs ``python scripts/mutation.py check`` before a change to the measurement core or the gates lands.
These tests are the cheap part: they fail when the baseline names a survivor the page does not explain, when the
page's scores are not the baseline's, or when the script's filter, sample or score rule changes meaning.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("mutation", REPO / "scripts" / "mutation.py")
mutation = sys.modules["mutation"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)

BASELINE = json.loads(mutation.BASELINE.read_text())
PAGE = (REPO / "docs" / "mutation-testing.md").read_text()
EXCLUDED, TARGETS = mutation.load_config()


def test_targets_name_modules_and_tests_that_exist():
    names = [t["name"] for t in TARGETS]
    assert len(names) == len(set(names))
    for t in TARGETS:
        assert t["modules"] and all((REPO / m).is_file() for m in t["modules"]), t
        assert t["tests"] and all((REPO / p).is_file() for p in t["tests"]), t
    core = {m for t in TARGETS for m in t["modules"]}
    assert {"microbench/measure/stats.py", "microbench/measure/engine.py", "microbench/benchmarks/table.py",
            "microbench/results/metrics.py", "microbench/gate/check.py", "microbench/gate/compare.py"} <= core


def test_every_baseline_survivor_is_explained_on_the_page():
    assert set(BASELINE) <= {t["name"] for t in TARGETS}
    missing = [(name, key) for name, b in BASELINE.items() for key in b["survivors"] if key not in PAGE]
    assert missing == [], "survivors the page does not list (each needs its reason or a test)"
    for name, b in BASELINE.items():
        assert 0 <= b["score"] <= 1 and b["killed"] + len(b["survivors"]) <= b["ran"] <= b["mutants"], name
        assert f"`{name}`" in PAGE and f"{b['score']:.1%}" in PAGE, f"the page's score of {name}"


def test_a_fallen_score_fails_and_an_equal_or_better_one_passes():
    base = {"t": {"score": 0.8, "survivors": ["m.py | AddNot | if x:"]}}
    now = {"score": 0.75, "survivors": [{"key": "m.py | AddNot | if x:"}, {"key": "m.py | AddNot | if y:"}]}
    fallen = mutation.compare({"t": now}, base)
    assert len(fallen) == 1 and "75.0% < baseline 80.0%" in fallen[0] and "if y:" in fallen[0]
    assert "if x:" not in fallen[0]  # only the survivors the baseline does not already explain
    assert mutation.compare({"t": {**now, "score": 0.8}}, base) == []
    assert mutation.compare({"t": {**now, "score": 0.9}}, base) == []
    assert mutation.compare({"new-target": now}, base) == []  # no baseline yet: nothing to fall from


def test_the_operator_filter_keeps_one_natural_replacement_each():
    import re

    drop = re.compile("|".join(f"(?:{e})" for e in EXCLUDED))
    kept = ["core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Mul_Div",
            "core/ReplaceComparisonOperator_Lt_LtE", "core/ReplaceComparisonOperator_Eq_NotEq",
            "core/ReplaceUnaryOperator_Delete_Not", "core/NumberReplacer", "core/AddNot",
            "core/ZeroIterationForLoop", "core/ReplaceAndWithOr", "core/ExceptionReplacer"]
    dropped = ["core/ReplaceBinaryOperator_Add_BitXor", "core/ReplaceBinaryOperator_Add_Mul",
               "core/ReplaceComparisonOperator_Lt_Gt", "core/ReplaceComparisonOperator_Eq_Is",
               "core/VariableReplacer", "core/RemoveDecorator"]
    assert [op for op in kept if drop.match(op)] == []
    assert [op for op in dropped if not drop.match(op)] == []


def test_the_sample_is_chosen_by_what_a_mutant_changes(tmp_path):
    keys = [f"microbench/x.py | NumberReplacer | n = {i} | 1" for i in range(2000)]
    chosen = [k for k in keys if mutation.chosen_by_hash(k, 0.1, 40)]
    assert 150 < len(chosen) < 250  # about a tenth
    assert chosen == [k for k in keys if mutation.chosen_by_hash(k, 0.1, 40)]  # the same code, the same sample
    assert all(mutation.chosen_by_hash(k, 1.0, 40) for k in keys)
    module = tmp_path / "m.py"
    module.write_text("from __future__ import annotations\n\ndef f(a: int | None, b=1 | 2) -> dict | None:\n"
                      "    x: list[int] | None = None\n    return a\n")
    spans = mutation.annotation_spans(module)
    inside = lambda line, col: any(lo <= (line, col) < hi for lo, hi in spans)  # noqa: E731
    assert inside(3, 13) and inside(3, 38) and inside(4, 17)  # the `|` of `int | None`, `dict | None`, `list[int] | None`
    assert not inside(3, 25)  # the `|` of `1 | 2`, a default value: it runs


@pytest.mark.parametrize("name", sorted(BASELINE))
def test_the_page_tables_the_baseline(name):
    b = BASELINE[name]
    row = next((line for line in PAGE.splitlines() if line.startswith(f"| `{name}`")), None)
    assert row is not None, name
    assert f"{b['killed']}" in row and f"{len(b['survivors'])}" in row and f"{b['score']:.1%}" in row, row

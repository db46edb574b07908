"""CI fails when a group of tests it is meant to run skips, or passes no test (MICROBENCH_REQUIRED_GROUPS, set by
.ci/run; the rules are in tests/conftest.py).

The canaries (tests/canaries.py, group "canary") run in a pytest of their own, with and without their group
required; MICROBENCH_CANARY picks where they skip.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from conftest import ALLOWED_SKIPS, REPO, run_process

CANARIES = "tests/canaries.py"


def _pytest(*args: str, required: str, canary: str = "") -> tuple[int, str]:
    env = {"MICROBENCH_REQUIRED_GROUPS": required, "MICROBENCH_CANARY": canary, "PYTEST_ADDOPTS": ""}
    proc = run_process([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env=env, cwd=REPO,
                       timeout=120)
    return proc.returncode, proc.output


@pytest.mark.parametrize("case,reason,code", [
    ("skip-at-import", "canary: skipped at import", 2),  # a collection error: pytest stops
    ("skip-in-fixture", "canary: skipped in a fixture", 1),
    ("skip-in-test", "canary: skipped in the test", 1),
])
def test_a_skip_of_a_required_group_fails_the_run(case, reason, code):
    got, out = _pytest(CANARIES, required="canary", canary=case)
    assert got == code and f"required group 'canary' skipped (MICROBENCH_REQUIRED_GROUPS): {reason}" in out, out
    # where the group is not required, the same skip stays a skip
    got, out = _pytest(CANARIES, required="", canary=case)
    expected = (5, "1 skipped") if case == "skip-at-import" else (0, "1 passed, 1 skipped")  # 5: nothing ran
    assert got == expected[0] and expected[1] in out and "required group" not in out, out


def test_a_required_group_that_passes_no_test_fails_the_run_naming_it():
    code, out = _pytest(CANARIES, required="canary,torch")
    assert code == 1 and "2 passed" in out, out
    assert "required group 'torch' passed no test" in out and "group 'canary' passed no test" not in out, out


def test_deselecting_tests_of_a_required_group_fails_the_run():
    code, out = _pytest(CANARIES, "-k", "not test_allowed_skip", required="canary")  # the group still passes one
    assert code == 1 and "1 passed, 1 deselected" in out, out
    assert "1 tests of required groups deselected" in out and "canaries.py::test_allowed_skip" in out, out
    code, out = _pytest(CANARIES, "-k", "no_such_test", required="canary")  # pytest alone would exit 5
    assert code == 1 and "required group 'canary' passed no test" in out, out


def test_an_unknown_required_group_is_an_error():
    code, out = _pytest(CANARIES, required="canary,torhc")
    assert code == 4 and "unknown groups ['torhc']" in out, out


def test_a_mark_outside_the_allowlist_exempts_nothing():
    code, out = _pytest(CANARIES, required="", canary="self-exempt")
    assert code == 1 and "marked may_skip but not in ALLOWED_SKIPS" in out, out


def test_an_allowlisted_skip_stays_a_skip_only_for_its_reason():
    code, out = _pytest(CANARIES, required="canary", canary="allowed")
    assert code == 0 and "1 passed, 1 skipped" in out, out
    code, out = _pytest(CANARIES, required="canary", canary="allowed-other-reason")
    assert code == 1 and "required group 'canary' skipped" in out and "a reason ALLOWED_SKIPS does not" in out, out


def test_every_allowlisted_test_exists_and_says_why():
    for key, (why, pattern) in ALLOWED_SKIPS.items():
        module, function = key.split("::")
        assert re.search(rf"^def {function}\(", (REPO / "tests" / module).read_text(), re.M), key
        assert why.strip() and re.compile(pattern), key


def test_gpu_tests_may_skip_where_their_group_is_required():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here (the group canary is never required)")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the GPU test would run, not skip")
    code, out = _pytest("tests/test_torch.py::test_staged_in_place_moves_the_device_data", required="torch")
    # its skip is allowed; the run still fails, since the group passed no test
    assert "1 skipped" in out and "required group 'torch' skipped" not in out, out
    assert code == 1 and "required group 'torch' passed no test" in out, out


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None,
                    reason="pytest-xdist is not installed (the test extra has it)")
def test_the_rules_hold_when_workers_run_the_tests():
    """Under pytest-xdist (the README's `-n auto`) workers run the tests and the controller judges the groups from
    their reports: a skip, a group that passes nothing and a deselection are each still a failure."""
    code, out = _pytest(CANARIES, "-n", "2", required="canary", canary="skip-in-test")
    assert code == 1 and "required group 'canary' skipped (MICROBENCH_REQUIRED_GROUPS): canary: skipped in the test" \
        in out, out
    code, out = _pytest(CANARIES, "-n", "2", required="canary,torch")
    assert code == 1 and "2 passed" in out, out
    assert "required group 'torch' passed no test" in out and "group 'canary' passed no test" not in out, out
    code, out = _pytest(CANARIES, "-n", "2", "-k", "not test_allowed_skip", required="canary")
    assert code == 1 and "1 tests of required groups deselected" in out and "canaries.py::test_allowed_skip" in out, out

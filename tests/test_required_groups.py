"""CI fails when a group of tests it is meant to run skips (MICROBENCH_REQUIRED_GROUPS, set by .ci/run).

``test_canary`` belongs to the group "canary" and skips unless MICROBENCH_CANARY is set; the other tests run it,
and the canaries of tests/canaries/ (a skip at import, in a fixture, listed and unlisted skips), in a pytest of
their own with and without their group required, and check that a required group which passed no test fails.
"""

from __future__ import annotations

import os
import sys

import pytest

from conftest import REPO, run_process


def test_canary():
    if not os.environ.get("MICROBENCH_CANARY"):
        pytest.skip("canary: MICROBENCH_CANARY is not set")


def _pytest_nodes(nodes: list[str], required: str) -> tuple[int, str]:
    env = {"MICROBENCH_REQUIRED_GROUPS": required, "MICROBENCH_CANARY": "", "PYTEST_ADDOPTS": ""}
    proc = run_process([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodes], env=env, cwd=REPO,
                       timeout=120)
    return proc.returncode, proc.output


CANARIES = "tests/canaries/"


def test_a_skip_of_a_required_group_fails_the_run():
    code, out = _pytest_nodes(["tests/test_required_groups.py::test_canary"], "canary")
    assert code == 1 and "required group 'canary' skipped" in out and "MICROBENCH_CANARY is not set" in out, out


def test_a_skip_outside_the_required_groups_stays_a_skip():
    code, out = _pytest_nodes(["tests/test_sizes.py::test_ranges_double_and_lists_merge",
                               "tests/test_required_groups.py::test_canary"], "core")
    assert code == 0 and "1 passed, 1 skipped" in out, out


def test_a_skip_at_module_import_fails_a_required_group():
    code, out = _pytest_nodes([CANARIES + "canary_import_skip.py", CANARIES + "canary_skips.py::test_passes"],
                              "canary")
    assert code != 0 and "required group 'canary' skipped" in out and "canary: skipped at import" in out, out


def test_a_skip_in_a_fixture_fails_a_required_group():
    code, out = _pytest_nodes([CANARIES + "canary_fixture_skip.py", CANARIES + "canary_skips.py::test_passes"],
                              "canary")
    assert code == 1 and "required group 'canary' skipped" in out and "canary: skipped in a fixture" in out, out


def test_only_the_listed_tests_may_skip():
    code, out = _pytest_nodes([CANARIES + "canary_skips.py::test_passes", CANARIES + "canary_skips.py::test_listed_skip"],
                              "canary")
    assert code == 0 and "1 passed, 1 skipped" in out, out
    code, out = _pytest_nodes([CANARIES + "canary_skips.py::test_passes", CANARIES + "canary_skips.py::test_unlisted_skip"],
                              "canary")
    assert code == 1 and "required group 'canary' skipped" in out, out


@pytest.mark.parametrize("how", ["deselected", "all skipped"])
def test_a_required_group_that_passed_no_test_fails_the_run(how):
    nodes = [CANARIES + "canary_skips.py::test_passes"]
    if how == "all skipped":
        nodes.append(CANARIES + "canary_skips.py::test_listed_skip")
    # core is required, but none of its tests ran (as with -k, -m, --deselect, PYTEST_ADDOPTS or a deleted module)
    code, out = _pytest_nodes(nodes, "canary,core")
    assert code == 1 and "required group 'core' passed no test" in out, out
    assert "required group 'canary' passed no test" not in out


def test_gpu_tests_may_skip_where_their_group_is_required():
    code, out = _pytest_nodes(["tests/test_torch.py::test_staged_in_place_moves_the_device_data",
                               "tests/test_torch.py::test_missing_backend_and_device_are_refused_clearly"], "torch")
    if "No module named 'torch'" in out or "PyTorch is not installed" in out or "could not import 'torch'" in out:
        pytest.skip("torch is not installed here")  # this module is core: only CI requires torch
    assert code == 0 and "1 passed" in out, out

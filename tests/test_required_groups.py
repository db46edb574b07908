"""CI fails when a group of tests it is meant to run skips (MICROBENCH_REQUIRED_GROUPS, set by .ci/run).

``test_canary`` belongs to the group "canary" and skips unless MICROBENCH_CANARY is set; the other tests run
it in a pytest of its own with and without the group required.
"""

from __future__ import annotations

import os
import sys

import pytest

from conftest import REPO, run_process


def test_canary():
    if not os.environ.get("MICROBENCH_CANARY"):
        pytest.skip("canary: MICROBENCH_CANARY is not set")


def _pytest(node: str, required: str) -> tuple[int, str]:
    env = {"MICROBENCH_REQUIRED_GROUPS": required, "MICROBENCH_CANARY": ""}
    proc = run_process([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node], env=env, cwd=REPO,
                       timeout=120)
    return proc.returncode, proc.output


def test_a_skip_of_a_required_group_fails_the_run():
    code, out = _pytest("tests/test_required_groups.py::test_canary", "core,canary")
    assert code == 1 and "required group 'canary' skipped" in out and "MICROBENCH_CANARY is not set" in out, out


def test_a_skip_outside_the_required_groups_stays_a_skip():
    code, out = _pytest("tests/test_required_groups.py::test_canary", "core,torch")
    assert code == 0 and "1 skipped" in out, out


def test_gpu_tests_may_skip_where_their_group_is_required():
    code, out = _pytest("tests/test_torch.py::test_staged_in_place_moves_the_device_data", "torch")
    if "No module named 'torch'" in out or "PyTorch is not installed" in out:
        pytest.skip("torch is not installed here")  # this module is core: only CI requires torch
    assert code == 0, out

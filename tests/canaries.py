"""Canaries for the required groups (tests/conftest.py), run only by tests/test_required_groups.py in a pytest of
their own (the file name does not match test_*.py, so the suite does not collect it). MICROBENCH_CANARY picks
the case: skip-at-import, skip-in-fixture, skip-in-test, self-exempt (a may_skip mark outside ALLOWED_SKIPS),
allowed (the skip ALLOWED_SKIPS lists for test_allowed_skip); unset, everything passes."""

from __future__ import annotations

import os

import pytest

CASE = os.environ.get("MICROBENCH_CANARY", "")
if CASE == "skip-at-import":
    pytest.skip("canary: skipped at import", allow_module_level=True)


@pytest.fixture
def setup_that_may_skip():
    if CASE == "skip-in-fixture":
        pytest.skip("canary: skipped in a fixture")


def test_canary(setup_that_may_skip):
    if CASE == "skip-in-test":
        pytest.skip("canary: skipped in the test")


if CASE == "self-exempt":
    test_canary = pytest.mark.may_skip("canary: exempts itself")(test_canary)


def test_allowed_skip():
    if CASE == "allowed":
        pytest.skip("canary: allowed")
    if CASE == "allowed-other-reason":
        pytest.skip("canary: a reason ALLOWED_SKIPS does not give")

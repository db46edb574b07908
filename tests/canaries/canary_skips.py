"""Canaries of the required-groups rule (tests/conftest.py), run only by tests/test_required_groups.py in a pytest
of their own (their names keep them out of the suite's collection): a passing test, a skip on the MAY_SKIP list,
and a skip marked ``may_skip`` that is not on it."""

import os

import pytest


def test_passes():
    assert os.environ.get("MICROBENCH_REQUIRED_GROUPS") is not None


def test_listed_skip():
    pytest.skip("canary: a skip MAY_SKIP lists")


@pytest.mark.may_skip("marked, but not on the MAY_SKIP list")
def test_unlisted_skip():
    pytest.skip("canary: a marked skip MAY_SKIP does not list")

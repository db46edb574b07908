"""Canary: a test whose fixture skips (as the Slurm, Chromium and emulated-cluster fixtures do without them)."""

import pytest


@pytest.fixture
def absent_part():
    pytest.skip("canary: skipped in a fixture")


def test_needs_the_absent_part(absent_part):
    raise AssertionError("the fixture should have skipped")

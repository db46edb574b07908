"""Canary: a module that skips while it is imported (as the torch and ReFrame modules do without them)."""

import pytest

pytest.importorskip("microbench_canary_no_such_module", reason="canary: skipped at import")


def test_never_runs():
    raise AssertionError("the module should have been skipped at import")

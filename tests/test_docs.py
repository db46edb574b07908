"""The docs' sample tables, checked by running the command each names (scripts/check_docs.py's cheap blocks).

A fenced block right after a ``<!-- docs-check: ARGS -->`` line in README.md or docs/*.md shows what
``microbench ARGS`` prints: its ``#`` lines must be lines the command prints and its table rows must have the
columns the command's rows have, numbers aside. The slow blocks run with ``python scripts/check_docs.py --all``;
the worked example of adding a benchmark runs in test_adding_a_benchmark.py.
"""

from __future__ import annotations

import importlib.util
import shlex

import pytest

from conftest import REPO, microbench

_spec = importlib.util.spec_from_file_location("check_docs", REPO / "scripts" / "check_docs.py")
check_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_docs)


def test_the_pages_have_checked_blocks():
    assert {page for page, _, _ in check_docs.checked_blocks()} >= {"README.md", "docs/definitions.md",
                                                                    "docs/overlap.md"}
    assert any(page == "README.md" for page, _ in check_docs.run_blocks())  # the slow sweep commands


@pytest.mark.parametrize("page, args, block", check_docs.checked_blocks(),
                         ids=lambda v: v if "\n" not in v else "block")
def test_a_sample_table_is_what_the_command_prints(page, args, block):
    proc = microbench(*shlex.split(args), timeout=180)
    assert proc.returncode == 0, proc.output
    assert check_docs.mismatches(block, proc.stdout) == [], f"{page}: microbench {args}"


def test_a_changed_header_is_caught():
    printed = "# allreduce: x\n#    Size(B)    Avg(us)\n           8       1.00\n"
    assert check_docs.mismatches("#    Size(B)    Avg(us)\n           8       2.50\n", printed) == []
    assert check_docs.mismatches("#    Size(B)    Mean(us)\n           8       2.50\n", printed)
    assert check_docs.mismatches("#    Size(B)    Avg(us)\n           8       2.50   pass\n", printed)

"""The docs' sample tables, checked by running the command each names.

A fenced block right after a ``<!-- docs-check: ARGS -->`` line in README.md or docs/*.md shows what
``microbench ARGS`` prints: its ``#`` lines (a trailing ``...`` abbreviates a line) must be lines the command
prints, and its table rows must have the columns the command's rows have, numbers aside (figures and versions
differ from run to run). The worked example of adding a benchmark runs in test_adding_a_benchmark.py.
"""

from __future__ import annotations

import re
import shlex

import pytest

from conftest import REPO, microbench

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CHECK = re.compile(r"^<!-- docs-check: (.+?) -->\n```[a-z]*\n(.*?)^```", re.S | re.M)


def checked_blocks() -> list[tuple[str, str, str]]:
    return [(page.relative_to(REPO).as_posix(), args, block)
            for page in PAGES for args, block in CHECK.findall(page.read_text())]


def shape(line: str) -> str:
    """A line with its figures and versions made alike."""
    return re.sub(r"[+-]?\d+(\.\d+)*", "N", line.rstrip())


def test_the_pages_have_checked_blocks():
    assert {page for page, _, _ in checked_blocks()} >= {"README.md", "docs/definitions.md", "docs/overlap.md"}


@pytest.mark.parametrize("page, args, block", checked_blocks(), ids=lambda v: v if "\n" not in v else "block")
def test_a_sample_table_is_what_the_command_prints(page, args, block):
    proc = microbench(*shlex.split(args), timeout=180)
    assert proc.returncode == 0, proc.output
    printed = [shape(l) for l in proc.stdout.splitlines() if l.startswith("#")]
    for line in (l for l in block.splitlines() if l.startswith("#")):
        if line.endswith("..."):
            assert any(p.startswith(shape(line[:-3])) for p in printed), f"{page}: {line!r} not printed"
        else:
            assert shape(line) in printed, f"{page}: {line!r} not in what `microbench {args}` printed:\n" + \
                "\n".join(printed)
    rows = [len(l.split()) for l in proc.stdout.splitlines() if l.strip() and not l.startswith("#")]
    shown = [len(l.split()) for l in block.splitlines() if l.strip() and not l.startswith("#")]
    assert shown and set(shown) <= set(rows), f"{page}: rows of {set(shown)} columns, printed {set(rows)}"

#!/usr/bin/env python3
"""The docs checked by running them: every marked block of README.md and docs/*.md.

Two marks, each an HTML comment on the line before a fenced block:

- ``<!-- docs-check: ARGS -->`` (cheap; tests/test_docs.py runs these in CI) or ``<!-- docs-check slow: ARGS -->``:
  the block shows what ``microbench ARGS`` prints. Its ``#`` lines (a trailing ``...`` abbreviates one) must be
  lines the command prints and its table rows must have the columns the command's rows have, figures and
  versions aside; the command must exit 0.
- ``<!-- docs-run slow -->``: every ``microbench ...`` line of the bash block runs (its comment dropped) in a
  scratch folder and must exit 0.

    python scripts/check_docs.py            # the cheap blocks
    python scripts/check_docs.py --all      # and the slow ones (minutes: whole sweeps)
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CHECK = re.compile(r"^<!-- docs-check( slow)?: (.+?) -->\n```[a-z]*\n(.*?)^```", re.S | re.M)
RUN = re.compile(r"^<!-- docs-run slow -->\n```[a-z]*\n(.*?)^```", re.S | re.M)


def checked_blocks(slow: bool = False) -> list[tuple[str, str, str]]:
    """(page, ARGS, block) of every sample block (the slow ones too with ``slow``)."""
    return [(page.relative_to(REPO).as_posix(), args, block) for page in PAGES
            for is_slow, args, block in CHECK.findall(page.read_text()) if slow or not is_slow]


def run_blocks() -> list[tuple[str, str]]:
    """(page, command) of every ``microbench`` line of the blocks marked to run."""
    return [(page.relative_to(REPO).as_posix(), line.split("  #")[0].strip()) for page in PAGES
            for block in RUN.findall(page.read_text()) for line in block.splitlines()
            if line.strip().startswith("microbench ")]


def shape(line: str) -> str:
    """A line with its figures and versions made alike."""
    return re.sub(r"[+-]?\d+(\.\d+)*", "N", line.rstrip())


def mismatches(block: str, stdout: str) -> list[str]:
    """What the sample block shows that the command did not print (empty: they agree)."""
    printed = [shape(line) for line in stdout.splitlines() if line.startswith("#")]
    out = []
    for line in (line for line in block.splitlines() if line.startswith("#")):
        if line.endswith("...") and not any(p.startswith(shape(line[:-3])) for p in printed):
            out.append(f"not printed: {line!r}")
        elif not line.endswith("...") and shape(line) not in printed:
            out.append(f"not printed: {line!r}")
    rows = {len(line.split()) for line in stdout.splitlines() if line.strip() and not line.startswith("#")}
    shown = {len(line.split()) for line in block.splitlines() if line.strip() and not line.startswith("#")}
    if not shown or not shown <= rows:
        out.append(f"rows of {sorted(shown)} columns shown, {sorted(rows)} printed")
    return out


def microbench(args: list[str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "microbench", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="the slow blocks too")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per command (default 900)")
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for page, args, block in checked_blocks(a.all):
            proc = microbench(shlex.split(args), scratch, a.timeout)
            problems = [f"exit {proc.returncode}: {proc.stderr[-300:]}"] if proc.returncode else \
                mismatches(block, proc.stdout)
            failed += bool(problems)
            print(f"{'FAIL' if problems else 'ok  '}  {page}: microbench {args}" + "".join(f"\n      {p}" for p in problems))
        for page, command in run_blocks() if a.all else ():
            proc = microbench(shlex.split(command)[1:], scratch, a.timeout)
            failed += proc.returncode != 0
            print(f"{'FAIL' if proc.returncode else 'ok  '}  {page}: {command}"
                  + (f"\n      exit {proc.returncode}: {proc.stderr[-300:]}" if proc.returncode else ""))
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

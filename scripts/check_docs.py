#!/usr/bin/env python3
"""The docs checked by running them: every command block of README.md and docs/*.md.

Marks are HTML comments (invisible on the rendered page) on the line before a fenced block; the pages are parsed
with markdown-it-py (CommonMark), so a block is what a reader sees as one.

- ``<!-- docs-check[ slow][ exit=N]: [NAME=VALUE ...] ARGS -->``: the block shows what ``microbench ARGS``
  prints (stdout and stderr). Its ``#`` lines must be lines the command prints (a trailing ``...`` abbreviates
  one), word for word and integer for integer: dtypes, rank and host counts, iteration counts, sizes; only
  measured figures and versions (numbers with a decimal point), run ids and times may differ. Its table rows must
  be rows the command prints, in order, with the same size (first column), the same words (the Check column:
  pass, FAIL, -) and the same number of columns; every row unless a ``...`` line abbreviates them. The command
  must exit N (default 0).
- ``<!-- docs-run[ slow][ exit=N[,M]][ records=FILE:COUNT ...] -->``: every command line of the bash block runs,
  in order, in the page's scratch folder (one per page, so a page's blocks build on each other); each must exit
  0 (or N where its comment ends "(exit N)"), the last one N (or any of N,M: a verdict that depends on this
  machine's figures); each FILE must then hold
  COUNT records (lines). Lines that need what this machine has not are skipped and listed with why
  (``CANNOT``): Slurm, a GPU, several hosts, a site's modules, an install into the environment.
- ``<!-- docs-skip: WHY -->``: a block not run, and why.
- ``<!-- docs-file: PATH -->``: the block is a file (a config, a check) a later block uses: written to PATH in
  the page's scratch folder.
- ``<!-- docs-setup: COMMAND -->`` (no block): a command run in the page's scratch folder at that point, to
  make an input the page assumes (a log, a results file); ``$REPO`` is the checkout.

Every block with a command line in it must carry one of these (tests/test_docs.py), so a command a newcomer can
run is either run here or says why it is not. Blocks without ``slow`` take seconds and run in the default test
command (tests/test_docs.py); ``slow`` ones (sweeps, replays, ReFrame sessions: minutes) with ``--all``.

Why not a kept executable-docs tool: the transcript tools (prysk, cram, byexample) compare output exactly or
through a placeholder written into every varying line, which would put ``(re)`` or ``<...>`` into every table row
of the pages; the runners (mktestdocs, pytest-codeblocks, pytest-markdown-docs, pytest-examples) run Python or
shell blocks for their exit status or compare output exactly; Sybil would carry our evaluator and collect the
Markdown files as tests, but the evaluator (which numbers may differ, which may not) is the part that matters and
is ours either way. The parsing is a kept library's (markdown-it-py), the rest is this file.

    python scripts/check_docs.py            # the fast blocks
    python scripts/check_docs.py --all      # and the slow ones (tens of minutes)
    python scripts/check_docs.py --list     # every command line of the docs: run (fast/slow) or why not
    python scripts/check_docs.py --page docs/import.md --all    # one page
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARK = re.compile(r"^<!--\s*docs-(check|run|skip|file|setup)\b(.*?)-->\s*$", re.S)
COMMAND = re.compile(r"^\s*(\$ )?([A-Z_]+=\S+ )*(microbench|python3?|mpirun|mpiexec|srun|sbatch|salloc|torchrun|"
                     r"reframe|pip|module|scripts/|for \S+ in |\.?/?\S*\.sh\b)")
#: what a command line needs that this machine has not: (pattern, why)
CANNOT = [
    (re.compile(r"(^|[\s;(])(srun|sbatch|salloc)\s|\bup --slurm\b"), "Slurm"),
    (re.compile(r"--device cuda|--buffer cupy|--cuda-graph|DEVICE=cuda|gpu_node_checks|-m gpu\b|\[[^]]*cuda"),
     "a GPU"),
    (re.compile(r"(^|\s)(mpirun|mpiexec) (-n \d{2,}|.*--host|.*--map-by ppr)|HOSTS=|--nproc-per-node=8"),
     "several hosts (or more cores than this machine has)"),
    (re.compile(r"^\s*module (load|swap)"), "a site's environment modules"),
    (re.compile(r"^\s*(pip|python3? -m pip) install|^\s*MPICC=|python3? -m venv"),
     "an install into the environment (.ci/run installs into a fresh one)"),
    (re.compile(r"cross_check_omb|--omb-dir"), "an OSU Micro-Benchmarks build"),
    (re.compile(r"--duration \d+h"), "hours by design (a soak; docs/diagnostics.md has one of seconds)"),
    (re.compile(r"scripts/bench_\w+\.py(?!.*--(help|replot))"),
     "a measurement campaign, minutes to hours (docs/benchmarks.md gives its figures; tests run each one small)"),
    (re.compile(r"(^|\s)OLD/|PYTHONPATH=OLD"), "an older checkout of microbench beside this one"),
    (re.compile(r"scripts/mutation\.py (run|check|adopt)\b"),
     "a mutation run, minutes to hours (docs/mutation-testing.md gives the last run's figures)"),
]


@dataclass
class Block:
    """One marked block of a page."""

    page: str
    line: int  #: 1-based line of the block's first line on the page
    kind: str  #: check, run, skip, file, setup
    options: dict = field(default_factory=dict)  #: slow, exit (set of codes), records {file: count}
    args: str = ""  #: check: the microbench arguments; skip: why; file: the path; setup: the command
    text: str = ""  #: the block's content

    @property
    def slow(self) -> bool:
        return bool(self.options.get("slow"))

    @property
    def exits(self) -> set[int]:
        return self.options.get("exit", {0})

    def commands(self) -> list[tuple[str, str | None]]:
        """(command line, why it cannot run here or None) of a run block: continuation lines joined, comments
        and blank lines dropped."""
        return [(c, why) for c, why, _ in self.command_lines()]

    def command_lines(self) -> list[tuple[str, str | None, set[int] | None]]:
        """(command line, why it cannot run here or None, the exits its comment allows ("exit 1") or None)."""
        out, pending = [], ""
        for raw in self.text.splitlines():
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            comment = re.search(r"\s#(?!!)(.*)$", line)
            said = re.search(r"\(exit (\d+)\)", comment.group(1)) if comment else None
            line = re.sub(r"\s+#(?!!).*$", "", line) if not line.startswith("#") else ""
            line = re.sub(r"\s\[[^]]*\]", "", line)  # a synopsis's [optional] parts: run without them
            if line:
                out.append((line, next((why for rx, why in CANNOT if rx.search(line)), None),
                            {int(said.group(1))} if said else None))
        return out


def _options(words: str) -> dict:
    out: dict = {}
    for word in words.split():
        if word == "slow":
            out["slow"] = True
        elif word.startswith("exit="):
            out["exit"] = {int(c) for c in word[5:].split(",")}
        elif word.startswith("records="):
            name, _, count = word[8:].rpartition(":")
            out.setdefault("records", {})[name] = int(count)
        else:
            raise ValueError(f"unknown docs mark option {word!r}")
    return out


def blocks(page: Path) -> list[Block]:
    """Every marked block of a page (and its setup marks), in page order; unmarked command blocks as kind
    ``unmarked``."""
    name, text = page.relative_to(REPO).as_posix(), page.read_text()
    tokens = MarkdownIt("commonmark").parse(text)
    out, mark = [], None
    for tok in tokens:
        if tok.type == "html_block" and (m := MARK.match(tok.content.strip())):
            kind, rest = m.group(1), m.group(2).strip()
            words, _, arg = rest.partition(":") if kind != "run" else (rest, "", "")
            block = Block(name, tok.map[0] + 1, kind, _options(words), arg.strip())
            if kind == "setup":
                out.append(block)
            else:
                mark = block
            continue
        if tok.type in ("fence", "code_block"):
            if mark is not None:
                mark.text, mark.line = tok.content, tok.map[0] + 1
                out.append(mark)
            elif any(COMMAND.match(line) for line in tok.content.splitlines()):
                out.append(Block(name, tok.map[0] + 1, "unmarked", text=tok.content))
        mark = None
    return out


def every_block(pages: list[Path] = PAGES) -> list[Block]:
    return [b for page in pages for b in blocks(page)]


# ---------------------------------------------------------------------------------------------- comparing output
_VOLATILE = [
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "TIME"),  # ISO times
    (re.compile(r"\brun [0-9a-f]{12}\b"), "run ID"),                      # run ids
    (re.compile(r"[+-]?\d*\.\d+(\.\d+)*(rc\d+)?"), "N.N"),                # measured figures, versions
]


def shape(line: str) -> str:
    """A ``#`` line with what differs from run to run made alike: figures and versions (decimal points), run
    ids, times. Integers (ranks, hosts, iterations, sizes, the 32 of float32) stay."""
    line = line.rstrip()
    for rx, repl in _VOLATILE:
        line = rx.sub(repl, line)
    return re.sub(r"\s+", " ", line)


def row_shape(line: str) -> tuple:
    """A table row: its first column (the size) as printed, measured figures (a decimal point) made alike, every
    other column (Check, names, integers) as printed."""
    cols = line.split()
    return (cols[0], *("N.N" if re.fullmatch(r"[+-]?\d*\.\d+%?", c) else c for c in cols[1:]))


def _is_row(line: str) -> bool:
    return bool(line.strip()) and not line.startswith("#") and not line.startswith("microbench:")


def mismatches(block: str, stdout: str) -> list[str]:
    """What the sample block shows that the command did not print (empty: they agree)."""
    printed_lines = stdout.splitlines()
    printed = [shape(line) for line in printed_lines if line.startswith(("#", "microbench:"))]
    out = []
    for line in (line for line in block.splitlines() if line.startswith(("#", "microbench:"))):
        if line.rstrip().endswith("..."):
            if not any(p.startswith(shape(line.rstrip()[:-3])) for p in printed):
                out.append(f"not printed: {line!r}")
        elif shape(line) not in printed:
            out.append(f"not printed: {line!r}")
    rows = [row_shape(line) for line in printed_lines if _is_row(line)]
    shown_lines = [line for line in block.splitlines() if _is_row(line)]
    abbreviated = any(line.strip() == "..." for line in shown_lines)
    shown = [row_shape(line) for line in shown_lines if line.strip() != "..."]
    if not shown:
        return out
    at = 0
    for row in shown:
        while at < len(rows) and rows[at] != row:
            at += 1
        if at == len(rows):
            out.append(f"row not printed (in this order, with these sizes and words): {' '.join(row)!r}; printed: "
                       + "; ".join(" ".join(r) for r in rows[:6]))
            break
        at += 1
    if not abbreviated and len(shown) != len(rows):
        out.append(f"{len(shown)} rows shown, {len(rows)} printed (abbreviate with a '...' line)")
    return out


# --------------------------------------------------------------------------------------------------- running
#: before a block's commands: ``microbench`` is this checkout's (python -m, with PYTHONPATH below)
LINKED = ("scripts", "tests")  #: folders of the checkout linked into each scratch folder
PRELUDE = 'microbench() { python -m microbench "$@"; }; export -f microbench'

def _env(scratch: str) -> dict:
    """The environment commands run with: this checkout's microbench (PYTHONPATH), its venv's commands first."""
    return {**os.environ, "PYTHONPATH": str(REPO), "REPO": str(REPO), "MICROBENCH_INDEX": f"{scratch}/.index",
            "MPLCONFIGDIR": f"{scratch}/.mpl", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def run_check(block: Block, scratch: str, timeout: float) -> list[str]:
    words = shlex.split(block.args)
    env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    args = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    proc = subprocess.run([sys.executable, "-m", "microbench", *args], capture_output=True, text=True, cwd=scratch,
                          timeout=timeout, env={**_env(scratch), **env})
    if proc.returncode not in block.exits:
        return [f"exit {proc.returncode}, not {'/'.join(map(str, sorted(block.exits)))}: {proc.stderr[-400:]}"]
    return mismatches(block.text, proc.stdout + proc.stderr)


def run_script(block: Block, scratch: str, timeout: float) -> tuple[list[str], list[str]]:
    """(problems, lines skipped with why) of a run block."""
    lines = block.command_lines()
    runnable = [(c, said) for c, why, said in lines if why is None]
    skipped = [f"{c}  ({why})" for c, why, _ in lines if why]
    if not runnable:
        return [], skipped
    script = [PRELUDE, "failed=0"]  # every line runs (a later `down` cleans up after a failed one)
    for i, (command, said) in enumerate(runnable):
        allowed = said or (block.exits if i == len(runnable) - 1 else {0})
        test = " || ".join(f"[ $rc -eq {c} ]" for c in sorted(allowed))
        script.append(f"{command}\nrc=$?; if ! {{ {test}; }}; then echo \"docs-run: exit $rc, not "
                      f"{'/'.join(map(str, sorted(allowed)))}: {command.replace(chr(34), chr(39))}\" >&2; failed=1; fi")
    script.append("exit $((failed * 90))")
    proc = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, cwd=scratch,
                          timeout=timeout, env=_env(scratch))
    problems = [line for line in proc.stderr.splitlines() if line.startswith("docs-run:")]
    if proc.returncode and not problems:
        problems = [f"exit {proc.returncode}: {proc.stderr[-400:]}"]
    if problems:
        problems.append(f"stderr: {proc.stderr[-600:]}")
    for name, count in block.options.get("records", {}).items():
        path = Path(scratch) / name
        n = sum(1 for line in path.read_text().splitlines() if line.strip()) if path.exists() else None
        if n != count:
            problems.append(f"{name}: {n} records, the page says {count}")
    return problems, skipped


def run_page(page_blocks: list[Block], slow: bool, timeout: float, report) -> int:
    """Run one page's blocks in a scratch folder of its own; the number that failed."""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="microbench-docs-") as scratch:
        for name in LINKED:  # the pages' commands run from a checkout: scripts/specs/..., tests/emulated_cluster.py
            os.symlink(REPO / name, Path(scratch) / name)
        for block in page_blocks:
            where = f"{block.page}:{block.line}"
            if block.kind == "file":
                path = Path(scratch) / block.args
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block.text)
            elif block.kind == "setup":
                proc = subprocess.run(["bash", "-c", f"{PRELUDE}\n{block.args}"], capture_output=True, text=True, cwd=scratch,
                                      timeout=timeout, env=_env(scratch))
                if proc.returncode:
                    failed += 1
                    report(f"FAIL  {where}: setup {block.args}\n      exit {proc.returncode}: {proc.stderr[-300:]}")
            elif block.kind in ("check", "run") and (slow or not block.slow):
                started = time.monotonic()
                if block.kind == "check":
                    problems, skipped = run_check(block, scratch, timeout), []
                    what = f"microbench {block.args}"
                else:
                    problems, skipped = run_script(block, scratch, timeout)
                    what = f"{len(block.commands()) - len(skipped)} command(s)"
                failed += bool(problems)
                report(f"{'FAIL' if problems else 'ok  '}  {where}: {what} ({time.monotonic() - started:.1f} s)"
                       + "".join(f"\n      {p}" for p in problems)
                       + "".join(f"\n      not run here: {s}" for s in skipped))
    return failed


def listing(all_blocks: list[Block]) -> list[str]:
    """Every command line of the docs and what becomes of it."""
    out = []
    for b in all_blocks:
        if b.kind == "check":
            out.append(f"{b.page}:{b.line}  {'slow' if b.slow else 'fast'}  microbench {b.args}  (output compared)")
        elif b.kind == "run":
            for command, why in b.commands():
                out.append(f"{b.page}:{b.line}  {'not run: ' + why if why else ('slow' if b.slow else 'fast')}  "
                           f"{command}")
        elif b.kind == "skip":
            out += [f"{b.page}:{b.line}  not run: {b.args}  {line.strip()}" for line in b.text.splitlines()
                    if COMMAND.match(line)]
        elif b.kind == "unmarked":
            out.append(f"{b.page}:{b.line}  UNMARKED  {b.text.splitlines()[0]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--all", action="store_true", help="the slow blocks too")
    ap.add_argument("--list", action="store_true", help="list every command line and whether it runs")
    ap.add_argument("--page", action="append", help="only this page (repeatable)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per block (default 900)")
    a = ap.parse_args()
    pages = [REPO / p for p in a.page] if a.page else PAGES
    all_blocks = every_block(pages)
    if a.list:
        print("\n".join(listing(all_blocks)))
        return 0
    failed = 0
    for page in pages:
        name = page.relative_to(REPO).as_posix()
        failed += run_page([b for b in all_blocks if b.page == name], a.all, a.timeout, lambda s: print(s, flush=True))
    unmarked = [b for b in all_blocks if b.kind == "unmarked"]
    for b in unmarked:
        print(f"FAIL  {b.page}:{b.line}: a command block with no docs- mark (run it, or say why not)")
    failed += len(unmarked)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

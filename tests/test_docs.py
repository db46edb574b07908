"""The docs checked by running them (scripts/check_docs.py): every command block of README.md and docs/*.md is
marked, the fast ones run here, and the comparison catches what a reader would be misled by.

Each page's fast blocks run in a scratch folder of their own (a sample table compared with what its command
prints: dtypes, rank and host counts, iteration counts, sizes, the Check column, row counts; a command block run
line by line with its stated exit status and record counts). The slow blocks (sweeps, replays, a ReFrame
session) run with ``python scripts/check_docs.py --all``; the worked example of adding a benchmark runs in
test_adding_a_benchmark.py.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys

import pytest

from conftest import REPO, microbench

_spec = importlib.util.spec_from_file_location("check_docs", REPO / "scripts" / "check_docs.py")
check_docs = sys.modules["check_docs"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up there
_spec.loader.exec_module(check_docs)

BLOCKS = check_docs.every_block()
FAST_PAGES = sorted({b.page for b in BLOCKS if b.kind in ("check", "run") and not b.slow})
SAMPLES = {b.args: b for b in BLOCKS if b.kind == "check" and b.page in ("README.md", "docs/definitions.md")}


def test_every_command_block_is_run_or_says_why_not():
    unmarked = [f"{b.page}:{b.line}" for b in BLOCKS if b.kind == "unmarked"]
    assert unmarked == [], "command blocks with no docs- mark (run them, or <!-- docs-skip: why -->)"
    assert all(b.args.strip() for b in BLOCKS if b.kind == "skip"), "a docs-skip without its reason"
    listed = check_docs.listing(BLOCKS)
    assert len(listed) > 100 and sum("  fast  " in line for line in listed) >= 25, listed
    # what cannot run here says why, in the words of CANNOT; the rest runs
    assert {line.split("not run: ")[1].split("  ")[0] for line in listed if "not run: " in line} >= {
        "Slurm", "a GPU", "several hosts (or more cores than this machine has)"}


@pytest.mark.parametrize("page", FAST_PAGES)
def test_a_page_s_fast_blocks_do_what_it_says(page):
    out = []
    failed = check_docs.run_page([b for b in BLOCKS if b.page == page], False, 240, out.append)
    assert failed == 0, "\n".join(out)


@pytest.fixture(scope="module")
def printed():
    """What the README's and definitions.md's sample commands print (one run each)."""
    out = {}
    for args in SAMPLES:
        proc = microbench(*shlex.split(args), timeout=180)
        assert proc.returncode == 0, proc.output
        out[args] = proc.stdout
    return out


@pytest.mark.parametrize("wrong, right", [
    ("dtype float64", "dtype float32"),
    ("64 ranks on 1 host(s)", "2 ranks on 1 host(s)"),
    ("2 ranks on 8 host(s)", "2 ranks on 1 host(s)"),
    ("iterations 10 / 1 and warmup 0 / 0", "iterations 1000 / 100 and warmup 100 / 10"),
    ("loop python", "loop native"),
    ("busbw = algbw x (n-1)/n", "busbw = algbw x 2(n-1)/n"),
    ("  FAIL", "  pass"),
    ("      16       0.42", "       8       0.42"),
])
def test_what_a_reader_would_be_misled_by_is_caught(printed, wrong, right):
    """A sample that differs from the output in a dtype, a rank, host or iteration count, the loop, a formula,
    the Check column or a size fails; its measured figures (decimal points) may differ."""
    args = "run --np 2 allreduce -m 8 -c"
    block = SAMPLES[args].text
    assert right in block
    assert check_docs.mismatches(block, printed[args]) == []
    assert check_docs.mismatches(block.replace(right, wrong), printed[args])
    figures = block.replace("0.42", "7.77").replace("0.0190", "0.0001")
    assert check_docs.mismatches(figures, printed[args]) == []


def test_a_row_too_many_or_too_few_is_caught(printed):
    args = "run --np 2 allreduce -m 8 -c"
    block, out = SAMPLES[args].text, printed[args]
    row = [line for line in block.splitlines() if line.strip().startswith("8 ")][0]
    assert "rows shown" in " ".join(check_docs.mismatches(block + row + "\n", out))
    two = out + row.replace("       8 ", "      16 ") + "\n"  # as if the command printed a second size
    assert "rows shown" in " ".join(check_docs.mismatches(block, two))
    assert check_docs.mismatches(block + "...\n", two) == []  # abbreviated on purpose
    assert check_docs.mismatches(block.replace(row, row.replace("       8 ", "      16 ")), out)


def test_a_stated_exit_status_and_record_count_are_held(tmp_path):
    refused = check_docs.Block("t", 1, "check", {"exit": {2}}, "run --np 2 nosuch",
                               "microbench: error: unknown benchmark 'nosuch': choose from ...\n")
    assert check_docs.run_check(refused, str(tmp_path), 60) == []
    assert check_docs.run_check(check_docs.Block("t", 1, "check", {}, refused.args, refused.text), str(tmp_path), 60)
    wrong_words = check_docs.Block("t", 1, "check", {"exit": {2}}, refused.args,
                                   "microbench: error: unknown benchmark 'nosuch': pick one of ...\n")
    assert check_docs.run_check(wrong_words, str(tmp_path), 60)

    # records: an import of a made OMB log (two benchmarks: a run, 5 results and an end line each); no launch
    run = "python $REPO/scripts/docs_inputs.py omb o.out\nmicrobench import omb o.out --ranks 2 --out r.jsonl\n"
    for name in "abc":
        (tmp_path / name).mkdir()
    ok = check_docs.Block("t", 1, "run", {"records": {"r.jsonl": 14}}, text=run)
    assert check_docs.run_script(ok, str(tmp_path / "a"), 120) == ([], [])
    miscounted = check_docs.Block("t", 1, "run", {"records": {"r.jsonl": 15}}, text=run)
    problems, _ = check_docs.run_script(miscounted, str(tmp_path / "b"), 120)
    assert problems == ["r.jsonl: 14 records, the page says 15"]
    failing = check_docs.Block("t", 1, "run", {}, text="microbench run --np 2 nosuch\nmicrobench info\n")
    problems, _ = check_docs.run_script(failing, str(tmp_path / "c"), 120)
    assert problems and problems[0].startswith("docs-run: exit 2, not 0: microbench run --np 2 nosuch")


def test_lines_this_machine_cannot_run_are_named_with_why():
    block = check_docs.Block("t", 1, "run", text=(
        "srun -N 4 microbench run allreduce            # Slurm\n"
        "torchrun --nproc-per-node=8 --no-python microbench run --backend torch --device cuda\n"
        "mpirun -n 64 --map-by ppr:8:node microbench run latency\n"
        "microbench compare --baseline a/ --new b/ [--threshold 5%] [--json]\n"
        "microbench check slow.jsonl --spec s.toml   # FAIL: node2's links (exit 1)\n"))
    assert block.command_lines() == [
        ("srun -N 4 microbench run allreduce", "Slurm", None),
        ("torchrun --nproc-per-node=8 --no-python microbench run --backend torch --device cuda", "a GPU", None),
        ("mpirun -n 64 --map-by ppr:8:node microbench run latency",
         "several hosts (or more cores than this machine has)", None),
        ("microbench compare --baseline a/ --new b/", None, None),
        ("microbench check slow.jsonl --spec s.toml", None, {1})]

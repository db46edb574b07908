"""Results files from anywhere: the reading verbs end with a clear error or a true result, never hang, never write
outside the folder asked for, never judge impossible values (docs/records.md; shared/reviews/hostile-input.md).

Each command runs under a timeout far below what a hang would take (a two-link loop walked 2^40 paths; a FIFO
blocked forever), so a hang fails the test rather than the run."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from conftest import microbench

HANG = 60  #: seconds: every command here ends in a few; one that hangs is killed and fails the test
SPEC = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8:64"\nmax_latency_us = 100000\n'


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A real 2-rank run's records."""
    folder = tmp_path_factory.mktemp("good")
    out = folder / "good.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8:64", "-i", "20", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.output
    return out


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def spec(tmp_path: Path) -> str:
    (tmp_path / "spec.toml").write_text(SPEC)
    return str(tmp_path / "spec.toml")


def test_a_folder_with_link_loops_fifos_and_devices_is_read_once_and_the_rest_noted(good, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "good.jsonl").write_bytes(good.read_bytes())
    os.symlink(".", folder / "a")
    os.symlink(".", folder / "b")
    os.mkfifo(folder / "pipe.jsonl")
    os.symlink("/dev/zero", folder / "zero.jsonl")
    (folder / "sub.jsonl").mkdir()
    env = {"MICROBENCH_INDEX": str(tmp_path / "index")}
    for verb in (["check", str(folder), "--spec", spec(tmp_path)], ["history", str(folder)],
                 ["report", str(folder), "-o", str(tmp_path / "r.html")]):
        proc = microbench(*verb, timeout=HANG, env=env)
        assert proc.returncode == 0, proc.output
        for name, kind in (("pipe.jsonl", "a FIFO"), ("zero.jsonl", "a character device"), ("sub.jsonl", "a folder")):
            assert f"skipped {folder / name}: not a regular file ({kind})" in proc.stderr, (verb[0], proc.stderr)
    check = microbench("check", str(folder), "--spec", spec(tmp_path), timeout=HANG, env=env)
    assert "1 run" in check.stdout.replace("1 run(s)", "1 run"), check.stdout  # the good file once, not 3 times


def test_plot_writes_only_inside_its_folder_whatever_the_run_id(tmp_path):
    out = tmp_path / "pairs.jsonl"
    proc = microbench("run", "--np", "2", "pairs", "-m", "8", "-i", "5", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.output
    recs = records(out)
    for r in recs:
        if "run_id" in r:
            r["run_id"] = "x/../../ESCAPED"
    evil = write(tmp_path / "evil.jsonl", recs)
    plots = tmp_path / "a" / "plots"
    proc = microbench("plot", str(evil), "-o", str(plots), "--svg", timeout=HANG, cwd=tmp_path)
    assert proc.returncode == 0, proc.output
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.suffix in (".png", ".svg")}
    assert written and all(p.parts[:2] == ("a", "plots") and len(p.parts) == 3 for p in written), written
    assert not (tmp_path / "ESCAPED.png").exists()


@pytest.mark.parametrize("verb", ["check", "compare", "history", "plot"])
def test_negative_latencies_are_refused_naming_file_and_line(verb, good, tmp_path):
    recs = records(good)
    for r in recs:
        if r["type"] == "result":
            r["latency_us"] = {k: -abs(v) if isinstance(v, float) else v for k, v in r["latency_us"].items()}
    bad = write(tmp_path / "foreign-neg.jsonl", recs)  # foreign-: deliberately against the schema
    args = {"check": ["check", str(bad), "--spec", spec(tmp_path)],
            "compare": ["compare", "--baseline", str(good), "--new", str(bad)],
            "history": ["history", str(bad)], "plot": ["plot", str(bad), "-o", str(tmp_path / "p")]}[verb]
    proc = microbench(*args, timeout=HANG, env={"MICROBENCH_INDEX": "off"})
    assert proc.returncode == 2, proc.output
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"microbench: error: {bad}:2: latency_us."), proc.stderr
    assert "PASS" not in proc.stdout


def test_the_same_run_id_twice(good, tmp_path):
    copy = write(tmp_path / "copy.jsonl", records(good))
    recs = records(good)
    for r in recs:
        if r["type"] == "result":
            r["latency_us"] = {k: v * 100 if isinstance(v, float) else v for k, v in r["latency_us"].items()}
    edited = write(tmp_path / "edited.jsonl", recs)
    env = {"MICROBENCH_INDEX": "off"}
    same = microbench("history", str(good), str(copy), timeout=HANG, env=env)
    assert same.returncode == 0 and "1 run(s)" in same.stdout, same.output  # an identical copy counts once
    for order in ((good, edited), (edited, good)):  # the verdict no longer depends on the order
        proc = microbench("check", *map(str, order), "--spec", spec(tmp_path), timeout=HANG, env=env)
        assert proc.returncode == 2, proc.output
        assert f"is in {order[0]} and in {order[1]} with different results" in proc.stderr


def test_control_characters_from_records_never_reach_the_terminal(good, tmp_path):
    recs = records(good)
    recs[0]["mpi"]["library_version"] = "\x1b]0;owned\x07\x1b[2J\x1b[31mFAKE: all rules PASS\x1b[0m"
    bad = write(tmp_path / "esc.jsonl", recs)
    for args in (["history", str(bad)], ["check", str(bad), "--spec", spec(tmp_path)]):
        proc = microbench(*args, timeout=HANG, env={"MICROBENCH_INDEX": "off"})
        assert proc.returncode == 0, proc.output
        assert "\x1b" not in proc.output and "\x07" not in proc.output
    assert "\\x1b[2J" in microbench("history", str(bad), timeout=HANG, env={"MICROBENCH_INDEX": "off"}).stdout


def test_json_output_is_strict():
    from microbench.printing import dump_json, printable

    out = io.StringIO()
    dump_json({"a": float("inf"), "b": [1.5, float("nan")], "c": "x"}, out)
    assert json.loads(out.getvalue()) == {"a": None, "b": [1.5, None], "c": "x"}
    assert "Infinity" not in out.getvalue() and "NaN" not in out.getvalue()
    assert printable("a\x1b[2Jb\tc\nd\x9b") == "a\\x1b[2Jb\tc\nd\\x9b"


@pytest.mark.parametrize("change, shown", [
    (lambda r: r.update(size_bytes=10**30), "size_bytes is '1000000000000000000000000000000'"),
    (lambda r: r.update(size_bytes="8"), "size_bytes is '8'"),
    (lambda r: r.update(ranks=0), "ranks is '0'"),
    (lambda r: r.update(busbw_gbps=-1.0), "busbw_gbps is -1.0"),
])
def test_impossible_sizes_and_figures_are_refused(change, shown, good, tmp_path):
    recs = records(good)
    change(recs[2])
    bad = write(tmp_path / "foreign-bad.jsonl", recs)
    proc = microbench("check", str(bad), "--spec", spec(tmp_path), timeout=HANG, env={"MICROBENCH_INDEX": "off"})
    assert proc.returncode == 2 and f"microbench: error: {bad}:3: {shown}: not a possible result" in proc.stderr, \
        proc.output


def test_lines_that_cannot_be_decoded_are_skipped_with_their_place(good, tmp_path):
    lines = good.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"allreduce", b"allre\xffduce")  # invalid UTF-8
    deep = b'{"type":"result","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    bad = tmp_path / "foreign-undecodable.jsonl"
    bad.write_bytes(b"\n".join(lines[:-1] + [deep, b""]))
    proc = microbench("history", str(bad), "-m", "16:64", timeout=HANG, env={"MICROBENCH_INDEX": "off"})
    assert proc.returncode == 0, proc.output
    assert f"{bad}:2" in proc.stderr and f"{bad}:{len(lines)}" in proc.stderr and "Traceback" not in proc.output

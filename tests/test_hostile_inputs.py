"""Hostile inputs to every verb that reads files (docs: shared review "hostile inputs"): each case asserts the
exact error shape (one ``microbench: error: FILE:LINE: ...`` line, exit 2) or the clean result, and bounds.

Bounds: every command runs with a wall-clock limit (``LIMIT_S``: a hang or a quadratic blow-up fails the test;
this is a guard, not a performance threshold, which the project keeps out of tests) and reports its own peak
resident memory, which must stay under a bound derived from the option that caps the input (the trace
reader's ``MAX_ELEMENT_BYTES``, ``MICROBENCH_MAX_FILE_BYTES``). Inputs are named ``foreign-*`` so that the
session's schema check leaves them alone.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import run_process
from fixtures.gate.synth import pairs_result, private_index, result, run_line, with_latency, write_run

from microbench.records import read_runs
from microbench.records.model import MAX_DURATION_US
from microbench.results.load import load_table
from microbench.workload.traces.jsonread import MAX_ELEMENT_BYTES

LIMIT_S = 60  #: wall-clock limit of one command (the inputs below took minutes, or forever, before)
BASE_RSS = 400 << 20  #: a verb's own peak resident memory with numpy, msgspec and matplotlib loaded (bytes)
STATS = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")
SPEC = '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\n'

# The process's own high-water RSS (VmHWM, KiB): ru_maxrss would carry the forking parent's RSS across the
# exec (Linux keeps the larger of the old and new address spaces' peaks), so a pytest process grown large by
# earlier tests would read as this command's peak.
_WRAPPER = ("import atexit, os, resource, runpy, sys\n"
            "def _peak():\n"
            "    try:\n"
            "        for line in open('/proc/self/status'):\n"
            "            if line.startswith('VmHWM:'):\n"
            "                return int(line.split()[1])\n"
            "    except OSError:\n"
            "        pass\n"
            "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "atexit.register(lambda: open(os.environ['HOSTILE_RSS'], 'w').write(str(_peak())))\n"
            "sys.argv = ['microbench', *sys.argv[1:]]\n"
            "runpy.run_module('microbench', run_name='__main__', alter_sys=True)\n")


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def mb(tmp_path: Path, *args: str, env: dict | None = None, rss_bound: int = BASE_RSS):
    """``microbench ARGS`` in a subprocess limited to LIMIT_S; asserts its peak RSS stays under ``rss_bound``."""
    rss_file = tmp_path / f"rss-{len(list(tmp_path.glob('rss-*')))}"
    args = [os.path.relpath(a, tmp_path) if isinstance(a, Path) else str(a) for a in args]  # messages name FILE
    done = run_process([sys.executable, "-c", _WRAPPER, *args], timeout=LIMIT_S,
                       env={"HOSTILE_RSS": str(rss_file), "MPLCONFIGDIR": str(tmp_path / "mpl"), **(env or {})},
                       cwd=tmp_path)
    peak = int(rss_file.read_text()) * 1024  # ru_maxrss is in KiB on Linux
    assert peak < rss_bound, f"peak RSS {peak >> 20} MiB over the bound {rss_bound >> 20} MiB"
    return done


def one_error(done, pattern: str) -> None:
    """Exit 2 and exactly one stderr line (notes aside): ``microbench: error: `` then ``pattern``."""
    errors = [line for line in done.stderr.splitlines() if not line.startswith("# note:")]
    assert done.returncode == 2, done.output
    assert len(errors) == 1 and re.fullmatch(f"microbench: error: {pattern}", errors[0]), done.stderr


def lines_file(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def good_run(run_id: str = "run0", p50: float = 10.0, **meta) -> list[dict]:
    return [run_line(run_id, **meta), *[result("allreduce", s, p50, run_id=run_id) for s in (8, 64)],
            {"type": "end", "run_id": run_id, "status": "complete", "reason": "", "results": 2}]


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


# ------------------------------------------------------------------ finding and opening files (F2, F3, F16)
def test_two_links_to_the_folder_itself_are_followed_once(tmp_path, spec):
    folder = tmp_path / "d"
    folder.mkdir()
    lines_file(folder / "foreign-good.jsonl", good_run())
    (folder / "a").symlink_to(".")
    (folder / "b").symlink_to(".")
    done = mb(tmp_path, "check", folder, "--spec", spec)
    assert done.returncode == 0 and "-> PASS" in done.stdout, done.output


def test_fifo_device_and_folder_named_jsonl_are_skipped_with_a_note(tmp_path, spec):
    folder = tmp_path / "f"
    folder.mkdir()
    lines_file(folder / "foreign-good.jsonl", good_run())
    os.mkfifo(folder / "foreign-pipe.jsonl")
    (folder / "foreign-zero.jsonl").symlink_to("/dev/zero")
    (folder / "foreign-sub.jsonl").mkdir()  # a folder named like a file: walked into by every reader alike
    lines_file(folder / "foreign-sub.jsonl" / "foreign-inner.jsonl", good_run("run1"))
    for verb in (["check", folder, "--spec", spec], ["report", folder, "-o", tmp_path / "r.html"]):
        done = mb(tmp_path, *verb)
        assert done.returncode == 0, done.output
        assert "skipped 2 name(s) that are not regular files" in done.stderr or verb[0] == "report", done.stderr
    assert {r.run_id for r in read_runs([folder])} == {r.run_id for r in load_table([folder]).runs} == {"run0", "run1"}


def test_a_file_over_the_size_cap_is_one_error(tmp_path, spec):
    path = lines_file(tmp_path / "foreign-big.jsonl", good_run())
    done = mb(tmp_path, "check", path, "--spec", spec, env={"MICROBENCH_MAX_FILE_BYTES": "1000"})
    one_error(done, re.escape(f"{path.name}: ") + r"\d+ bytes: larger than a results file may be \(1000 bytes; "
              + "MICROBENCH_MAX_FILE_BYTES.*")


# ------------------------------------------------------------------ values as the schema says (F4, F6, F7, F13)
def records_with(**change) -> list[dict]:
    recs = good_run()
    recs[1] = {**recs[1], **change}
    return recs


@pytest.mark.parametrize("change,pattern", [
    ({"latency_us": {"avg": -1.0, "p50": -1.0}}, r"a result record that breaks the record model: .*>= 0.*latency_us.*"),
    ({"latency_us": {"p50": 0.5, "avg": "x"}}, r"a result record that breaks the record model: .*latency_us.*"),
    ({"size_bytes": 10 ** 30}, r"a result record that breaks the record model: .*size_bytes.*"),
    ({"size_bytes": "8"}, r"a result record that breaks the record model: Expected `int.*size_bytes.*"),
    ({"ranks": "two"}, r"a result record that breaks the record model: .*ranks.*"),
    ({"run_id": {"a": 1}}, r"a result record that breaks the record model: .*run_id.*"),
], ids=["negative", "string", "huge-size", "string-size", "string-ranks", "object-id"])
def test_a_record_that_breaks_the_schema_is_refused_naming_file_and_line(tmp_path, spec, change, pattern):
    path = lines_file(tmp_path / "foreign-bad.jsonl", records_with(**change))
    for verb in (["check", path, "--spec", spec], ["compare", "--baseline", path, "--new", path],
                 ["history", path], ["plot", path, "-o", tmp_path / "plots"]):
        one_error(mb(tmp_path, *verb), re.escape(f"{path.name}:2: ") + pattern)


def test_invalid_utf8_and_deep_nesting_name_the_line(tmp_path, spec):
    recs = good_run(hosts=["vXm"])
    data = "".join(json.dumps(r) + "\n" for r in recs).encode().replace(b"vXm", b"v\xffm")
    bad = tmp_path / "foreign-u.jsonl"
    bad.write_bytes(data)
    for verb in (["check", bad, "--spec", spec], ["report", bad, "-o", tmp_path / "r.html"]):
        one_error(mb(tmp_path, *verb), re.escape(f"{bad.name}:1: not UTF-8 text"))
    deep = tmp_path / "foreign-deep.jsonl"
    deep.write_text(json.dumps(good_run()[0]) + "\n" + '{"type": "result", "x": ' + "[" * 100_000 + "]" * 100_000
                    + "}\n")
    for verb in (["check", deep, "--spec", spec], ["report", deep, "-o", tmp_path / "r.html"]):
        one_error(mb(tmp_path, *verb), re.escape(f"{deep.name}:2: JSON nested too deeply to be a record"))


def test_schema_is_checked_on_the_raw_line_first(tmp_path, spec):
    recs = good_run()
    recs[0] = {**recs[0], "schema": 2, "time_utc": 1764021351}
    path = lines_file(tmp_path / "foreign-s2.jsonl", recs)
    one_error(mb(tmp_path, "check", path, "--spec", spec),
              re.escape(f"{path.name}:1: record schema 2 is newer than this microbench reads (1)") + ".*")
    recs[0] = {**recs[0], "schema": "1", "time_utc": "2026-11-22T07:00:00Z"}
    lines_file(path, recs)
    one_error(mb(tmp_path, "check", path, "--spec", spec),
              re.escape(f"{path.name}:1: record schema '1' is not a schema version") + ".*")


def test_results_without_a_run_line_are_outside_a_selection_and_a_bom_is_read(tmp_path, spec):
    orphans = lines_file(tmp_path / "foreign-orphans.jsonl", good_run()[1:3])
    done = mb(tmp_path, "check", orphans, "--spec", spec, "--hosts", "otherhost")
    one_error(done, re.escape(f"no result records in results ({orphans.name}) within the selection") + ".*")
    assert "1 without a readable run line" in done.stderr
    bom = tmp_path / "foreign-bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in good_run()).encode())
    done = mb(tmp_path, "check", bom, "--spec", spec, "--hosts", "otherhost")
    one_error(done, re.escape(f"no result records in results ({bom.name}) within the selection") + ".*")
    assert "1 on hosts h0" in done.stderr and "unreadable" not in done.stderr
    done = mb(tmp_path, "check", bom, "--spec", spec, "--hosts", "h0")
    assert done.returncode == 0 and "-> PASS" in done.stdout, done.output


# ------------------------------------------------------------------ the same run id in two files (F5)
def test_identical_copies_count_once_and_different_ones_are_an_error(tmp_path, spec):
    a = lines_file(tmp_path / "foreign-a.jsonl", good_run(p50=10.0))
    a2 = lines_file(tmp_path / "foreign-a2.jsonl", good_run(p50=10.0))
    b = lines_file(tmp_path / "foreign-b.jsonl", good_run(p50=1000.0))
    assert len(load_table([a, a2]).runs) == 1
    done = mb(tmp_path, "check", a, a2, "--spec", spec)
    assert done.returncode == 0 and "-> PASS" in done.stdout, done.output
    for first, second in ((a, b), (b, a)):
        one_error(mb(tmp_path, "check", first, second, "--spec", spec),
                  re.escape(f"run 'run0' is in {first.name} and in {second.name} with different contents; ") + ".*")


# ------------------------------------------------------------------ output paths (F1)
def test_pairs_heatmap_names_from_data_stay_inside_the_output_folder(tmp_path):
    rec = {**pairs_result(), "run_id": "x/../../ESCAPED"}
    path = tmp_path / "foreign-evil.jsonl"
    write_run(path, [rec], run_id="x/../../ESCAPED")
    out = tmp_path / "deep" / "plots"
    done = mb(tmp_path, "plot", path, "-o", out, "--svg")
    assert done.returncode == 0, done.output
    written = [Path(line.split("wrote ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert written and all((tmp_path / w).resolve().parent == out.resolve() for w in written), written
    assert not list(tmp_path.rglob("ESCAPED*"))


# ------------------------------------------------------------------ terminal and --json (F14, F15)
def test_control_characters_in_records_never_reach_the_terminal(tmp_path, spec):
    evil = "\x1b[2J\x1b[31mFAKE: all rules PASS\x1b[0m\x1b]0;owned\x07\x9b"
    path = lines_file(tmp_path / "foreign-ansi.jsonl", good_run(library=evil + " Open MPI", hosts=["h" + evil])
                      + good_run("run1"))
    for verb in (["check", path, "--spec", spec], ["check", path, "--spec", spec, "--hosts", "x"], ["history", path]):
        done = mb(tmp_path, *verb)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", done.stdout + done.stderr), done.output


def test_json_output_is_strict_json(tmp_path):
    """Latencies near the largest float (their bandwidths follow, near the smallest): medians of two overflow
    unless computed with care, and every figure printed is strict JSON."""
    recs = [r if r["type"] != "result" else with_latency(r, {k: MAX_DURATION_US for k in STATS if k in r["latency_us"]})
            for r in good_run()]
    again = [{**r, "run_id": "run1", **({"command": "again"} if r["type"] == "run" else {})} for r in recs]
    path = lines_file(tmp_path / "foreign-huge.jsonl", recs + again)

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    for verb in (["history", path, "--json"], ["compare", "--baseline", path, "--new", path, "--json"]):
        done = mb(tmp_path, *verb)
        assert done.returncode in (0, 1), done.output
        json.loads(done.stdout, parse_constant=refuse)


def test_an_index_folder_others_may_write_to_is_not_used(tmp_path, spec):
    folder = tmp_path / "shared-index"
    folder.mkdir()
    folder.chmod(0o777)
    path = lines_file(tmp_path / "foreign-good.jsonl", good_run())
    done = mb(tmp_path, "check", path, "--spec", spec, env={"MICROBENCH_INDEX": str(folder)})
    assert done.returncode == 0 and f"index folder {folder} not used (others may write to it)" in done.stderr
    assert not list(folder.iterdir())


# ------------------------------------------------------------------ imports (F4, F12, F13)
OMB_HEAD = "# OSU MPI Allreduce Latency Test v7.4\n# Size  Avg Latency(us)\n"


@pytest.mark.parametrize("value", ["nan", "inf", "-5.0", "1e400"])
def test_an_import_refuses_impossible_values_and_writes_nothing(tmp_path, value):
    log = tmp_path / "omb.log"
    log.write_text(OMB_HEAD + f"8  {value}\n")
    out = tmp_path / "foreign-out.jsonl"
    one_error(mb(tmp_path, "import", "omb", log, "--ranks", "2", "--out", out),
              re.escape(f"{log.name}:3: ") + r"(the tool's figures break the record model: (.*latency_us.*|a value "
              r"that is not a finite number.*)|unexpected value .*); nothing imported")
    assert not out.exists()


@pytest.mark.parametrize("doc,pattern", [
    ({"config": [1], "results": [], "args": ["all_reduce_perf"]}, r"unexpected value \(AttributeError: .*"),
    ({"config": {"devices": [{}]}, "results": [{"size": "big"}], "args": ["all_reduce_perf"]},
     r"results\[0\]: unexpected value \(ValueError: .*"),
], ids=["config-list", "size-string"])
def test_nccl_json_of_unexpected_types_is_one_error(tmp_path, doc, pattern):
    path = tmp_path / "n.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "foreign-out.jsonl"
    one_error(mb(tmp_path, "import", "nccl-tests", path, "--out", out), re.escape(f"{path.name}: ") + pattern)
    assert not out.exists()


# ------------------------------------------------------------------ specs, sizes, traces, skew (F9, F10, F11, F8)
@pytest.mark.parametrize("text,pattern", [
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", r"{name}: spec nested too deeply.*"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\nruns = ["median"]\n',
     r"spec {name}: rule 1 \(allreduce\): runs must be one of best, median, all \(got \['median'\]\)"),
    ("a = \xff\n", r"{name}:1: spec is not UTF-8 text"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\nsizes = "1' + " " * 200_000 + 'x:8"\n',
     r"spec {name}: rule 1 \(allreduce\): sizes: bad size '1 {{39}}\.\.\. \(200002 characters\)'.*"),
], ids=["deep", "runs-list", "utf8", "redos-sizes"])
def test_hostile_specs_are_one_line_in_bounded_time(tmp_path, text, pattern):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    path = lines_file(tmp_path / "foreign-good.jsonl", good_run())
    done = mb(tmp_path, "check", path, "--spec", bad)
    one_error(done, pattern.format(name=re.escape(bad.name)))
    assert len(done.stderr) < 400


def test_one_huge_trace_element_is_refused_in_bounded_memory(tmp_path):
    blocks = (4 * MAX_ELEMENT_BYTES) // (1 << 20)
    path = tmp_path / "array.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [{"ph": "X", "name": "x", "args": {"a": [')
        for _ in range(blocks):
            f.write(b"0," * (1 << 19))
        f.write(b'0]}}]}')
    done = mb(tmp_path, "workload", "--trace", path, rss_bound=BASE_RSS + 8 * MAX_ELEMENT_BYTES)
    one_error(done, re.escape(f"cannot read trace {path.name}: one JSON element holds more than "
                              f"{MAX_ELEMENT_BYTES} bytes") + ".*")


def test_a_run_of_backslashes_in_a_trace_is_linear(tmp_path):
    path = tmp_path / "bs.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [{"ph": "X", "name": "')
        for _ in range(128):  # 128 MiB of backslashes: 95 s with a quadratic guard
            f.write(b"\\" * (1 << 20))
        f.write(b'"}]}')
    done = mb(tmp_path, "workload", "--trace", path, rss_bound=BASE_RSS + 8 * MAX_ELEMENT_BYTES)
    one_error(done, re.escape(f"cannot read trace {path.name}: one JSON element holds more than") + ".*")


def test_the_depth_guard_carries_one_byte_at_most():
    from microbench.workload.traces.jsondepth import DepthGuard

    guard = DepthGuard(64, "x")
    for _ in range(64):
        guard.feed(b"\\" * 1001)
        assert len(guard.carry) <= 1
    guard.feed(b'"')  # 64 x 1001 backslashes: an even run, so this quote opens a string
    assert guard.in_string


def test_a_failing_skew_rule_reads_each_file_once(tmp_path):
    skewed = {"slowest": {"rank": 0, "host": "h\x1b[2J", "mean_us": 50.0}, "fastest": {"rank": 1, "host": "h",
              "mean_us": 1.0}, "skew": 50.0, "unit": "rank", "nodes": 2, "node_means_us": {}, "listed": "extremes",
              "node_skew": None, "outliers": [], "outlier_rule": {}}
    path = tmp_path / "foreign-skew.jsonl"
    for i in range(100):
        write_run(path, [result("allreduce", 8, 10.0, stragglers=skewed)], run_id=f"r{i}")
    spec = tmp_path / "skew.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 2\n')
    done = mb(tmp_path, "check", path, "--spec", spec)
    assert done.returncode == 1 and "slowest rank 0 on h\\x1b[2J (50 us)" in done.stdout, done.output
    assert "\x1b" not in done.stdout


def test_microbench_records_the_gate_tools_do_not_read_are_not_called_another_tools(tmp_path):
    """samples, bisect, soak, cycle and replay lines are microbench's own: skipped without the "another tool's
    output?" note, which stays for lines that are not microbench records."""
    from microbench.records.model import RECORD_TYPES
    from microbench.results.scan import ScanNotes, decode_file

    path = tmp_path / "foreign-mixed.jsonl"  # deliberately not schema-valid records: the session's check skips it
    own = [json.dumps({"type": t, "run_id": "r1"}) for t in RECORD_TYPES if t not in ("run", "result", "end")]
    path.write_text("\n".join([*own, '{"tool": "osu_latency", "size": 8}']) + "\n")
    decoded = decode_file(path)
    assert decoded.records == [] and decoded.foreign == 1
    notes = ScanNotes()
    notes.add(path, decoded.bad_lines, decoded.foreign, decoded.size)
    assert any("skipped 1 line(s) that are not microbench records" in line for line in notes.lines())

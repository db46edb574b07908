"""Inputs outside what any real run produces end with one ``microbench: error:`` line (exit 2) naming the file,
the line or the option, in bounded time and memory: importer lines, ``report --workload`` files, trace sizes,
option values and workload shapes (review hostile-input-2: N8, N11, N14, N18, N21, the spec overflow)."""

from __future__ import annotations

import copy
import gzip
import json
import re
import signal
import sys
from pathlib import Path

import pytest
from conftest import run_process
from fixtures.gate.synth import private_index, result, write_run
from fixtures.importers import make

from microbench.cli import main as microbench_main
from microbench.importers import omb
from microbench.report.workload import MAX_WORKLOAD_BYTES
from microbench.workload.traces.samples import nccl_call, nccl_init

LIMIT_S = 60  #: a command's hang guard (each takes about a second)


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = microbench_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(code: int, err: str, pattern: str) -> None:
    lines = [l for l in err.splitlines() if not l.startswith("# note:")]
    assert code == 2 and len(lines) == 1, err
    assert re.fullmatch(f"microbench: error: {pattern}", lines[0]), lines[0]


@pytest.fixture
def results(tmp_path) -> Path:
    return write_run(tmp_path / "r.jsonl", [result("allreduce", s, 10.0) for s in (8, 1 << 20, 1 << 26)])


# ------------------------------------------------------------------------------------------- importers (N8)
class _Alarm(Exception):
    pass


def test_importer_patterns_are_linear():
    # a hang guard 1000 times what the linear patterns take; the old _BUFFERS, (.+?)\s*$, took about 35 s here
    line = "# Send Buffer on HOST and Receive Buffer on HOST" + " " * 50_000 + "x"

    def alarm(*_):
        raise _Alarm
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        for pattern in (omb._TITLE, omb._DATATYPE, omb._BUFFERS):
            pattern.fullmatch(line)
            pattern.match(line)
    except _Alarm:
        pytest.fail("an importer pattern took more than 10 s on one line")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_an_overlong_import_line_is_one_error_naming_it(capsys, tmp_path):
    lines = make.omb_collective("Allreduce", [8, 16])
    lines.insert(2, "# Send Buffer on HOST and Receive Buffer on HOST" + " " * omb.MAX_LINE_CHARS + "x")
    src = make.write(tmp_path / "long.log", lines)
    code, out, err = run_cli(capsys, "import", "omb", src, "--ranks", "2", "--out", tmp_path / "o.jsonl")
    one_error(code, err, re.escape(f"{src}:3: a line of {omb.MAX_LINE_CHARS + 49} characters: OMB and nccl-tests "
                                   f"print none longer than {omb.MAX_LINE_CHARS}"))
    assert not (tmp_path / "o.jsonl").exists()


def test_line_numbers_count_newlines_only(capsys, tmp_path):
    # a form feed or U+2028 inside a line does not end it for the message's FILE:LINE (str.splitlines would)
    lines = make.omb_collective("Allreduce", [8, 16])
    lines.insert(2, "# a remark\x0cwith a form feed\u2028and a line separator")
    lines[-1] += " 7"  # one column too many, on line 7 of the file
    src = make.write(tmp_path / "ff.log", lines)
    code, out, err = run_cli(capsys, "import", "omb", src, "--ranks", "2", "--out", tmp_path / "o.jsonl")
    one_error(code, err, re.escape(f"{src}:7: 3 columns where OMB's header has 2") + ".*")


# ------------------------------------------------------------------------------------------- report --workload (N14)
@pytest.fixture
def pricing(tmp_path, results) -> dict:
    out = run_process([sys.executable, "-m", "microbench", "workload", "--model", "1.3B", "--scheme", "ddp",
                       "--dp", "2", "--results", str(results), "--json"], timeout=LIMIT_S)
    assert out.returncode == 0, out.output
    data = json.loads(out.stdout)
    assert data["weighting"]["collectives"] and data["weighting"]["bins"] and data["weighting"]["messages"]
    return data


def _set(path: str, value):
    def change(d):
        *where, last = path.split(".")
        for key in where:
            d = d[int(key)] if isinstance(d, list) else d[key]
        d[last] = value
    return change


@pytest.mark.parametrize("change,pattern", [
    (_set("weighting.collectives", {"allreduce": "x"}), r'weighting\.collectives\.allreduce: "x" is not an object'),
    (_set("weighting.collectives", [1]), r"weighting\.collectives: list is not an object"),
    (_set("weighting.collectives", "x"), r'weighting\.collectives: "x" is not an object'),
    (_set("weighting.bins", [1, 2]), r"weighting\.bins\[0\]: 1 is not an object"),
    (_set("weighting.bins.0.from_bytes", "x"), r'weighting\.bins\[0\]\.from_bytes: "x" is not a size in bytes'),
    (_set("weighting.time_per_iteration_us", "x"), r'weighting\.time_per_iteration_us: "x" is not a finite number'),
    (_set("weighting.time_per_iteration_us", 10 ** 400),
     r"weighting\.time_per_iteration_us: 10{39} is not a finite number"),
    (_set("weighting.messages.0.count", [1]), r"weighting\.messages\[0\]\.count: list is not a finite number"),
    (_set("model", [1]), r"model: list is not an object"),
    (_set("compute", {"tflops_per_device": None}), r"compute\.tflops_per_device: null is not a finite number"),
])
def test_a_workload_pricing_of_the_wrong_shape_is_one_line_naming_the_field(capsys, tmp_path, results, pricing,
                                                                            change, pattern):
    data = copy.deepcopy(pricing)
    change(data)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "report", results, "--workload", path, "-o", tmp_path / "r.html")
    one_error(code, err, re.escape(str(path)) + ": " + pattern + r" \(--workload takes a pricing; .*\)")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("body,pattern", [
    ('{"weighting": ' + "[" * 100_000 + "]" * 100_000 + "}", r"--workload {path} is not JSON \(nested too deeply\); .*"),
    ('{"weighting": {"time_per_iteration_us": Infinity, "collectives": {}, "bins": []}}',
     r"--workload {path} is not JSON \(Infinity is not a number JSON allows\); .*"),
])
def test_a_workload_file_that_is_not_a_pricing_is_one_line(capsys, tmp_path, results, body, pattern):
    path = tmp_path / "w.json"
    path.write_text(body)
    code, out, err = run_cli(capsys, "report", results, "--workload", path, "-o", tmp_path / "r.html")
    one_error(code, err, pattern.format(path=re.escape(str(path))))


def test_a_workload_file_is_capped_and_must_be_regular(capsys, tmp_path, results):
    code, out, err = run_cli(capsys, "report", results, "--workload", "/dev/zero", "-o", tmp_path / "r.html")
    one_error(code, err, "cannot read --workload /dev/zero: not a regular file")
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(MAX_WORKLOAD_BYTES + 1)  # a few KB on disk: refused by its size, before reading
    code, out, err = run_cli(capsys, "report", results, "--workload", sparse, "-o", tmp_path / "r.html")
    one_error(code, err, re.escape(f"{sparse}: larger than {MAX_WORKLOAD_BYTES} bytes, the most --workload reads") + ".*")


# ------------------------------------------------------------------------------------------- traces (N18, N11)
def test_a_trace_is_read_up_to_a_stated_number_of_bytes(capsys, tmp_path, monkeypatch):
    path = tmp_path / "big.log.gz"
    call = (nccl_call("AllReduce", 16, 7, "0xa1", 2, pid=1) + "\n").encode()
    with gzip.open(path, "wb") as f:
        f.write((nccl_init("0xa1", 0, 2, pid=1) + "\n").encode())
        f.write(call * 20_000)  # 4 MB of text in a few KB of gzip
    monkeypatch.setenv("MICROBENCH_MAX_TRACE_BYTES", str(1 << 20))
    code, out, err = run_cli(capsys, "workload", "--trace", path)
    one_error(code, err, re.escape(f"cannot read trace {path}: more than {1 << 20} bytes of text (decompressed), the "
                                   "most a trace is read (MICROBENCH_MAX_TRACE_BYTES sets it)"))
    monkeypatch.setenv("MICROBENCH_MAX_TRACE_BYTES", "1e9")
    code, out, err = run_cli(capsys, "workload", "--trace", path)
    one_error(code, err, r"MICROBENCH_MAX_TRACE_BYTES='1e9': expected a whole number of bytes, at least 1")
    monkeypatch.delenv("MICROBENCH_MAX_TRACE_BYTES")
    code, out, err = run_cli(capsys, "workload", "--trace", path)
    assert code == 0 and "20000 collective calls" in out, err


@pytest.mark.parametrize("count,nranks", [(10 ** 308, 2), (16, 10 ** 400)])
def test_a_trace_call_no_machine_makes_is_left_out(capsys, tmp_path, results, count, nranks):
    path = tmp_path / "nccl.log"
    path.write_text("\n".join([nccl_init("0xa1", 0, 2, pid=1), nccl_call("AllReduce", count, 7, "0xa1", nranks, pid=1),
                               nccl_call("AllReduce", 16, 7, "0xa1", 2, pid=1)]) + "\n")
    code, out, err = run_cli(capsys, "workload", "--trace", path, "--results", results)
    assert code == 0, err
    assert "1 collective calls" not in out or "2 collective calls" not in out
    code, out, err = run_cli(capsys, "workload", "--trace", path, "--json")
    skipped = json.loads(out)["trace"]["skipped"]
    assert skipped == {"call of more than 2**62 bytes or calls, or in a group of more than 2147483647 ranks": 1,
                       "line without a call (lines minus call records)": 1}, skipped


# ------------------------------------------------------------------------------------------- options (N21)
@pytest.mark.parametrize("args,pattern", [
    (["compare", "--baseline", "{r}", "--new", "{r}", "--threshold", "1e400%"],
     r"bad --threshold '1e400%': must be a finite number above 0"),
    (["workload", "--hidden", "768", "--layers", "99999999999", "--heads", "12", "--dp", "2"],
     r"--layers 99999999999 is beyond 10000, the most workload models"),
    (["workload", "--model", "13B", "--seq", "99999999999"], r"--seq 99999999999 is beyond 16777216, .*"),
    (["workload", "--model", "13B", "--dp", "99999999999"], r"--dp 99999999999 is beyond 1048576, .*"),
    (["run", "--np", "100000", "allreduce", "-m", "8"],
     r"--np 100000 is more than \d+ ranks, 4 per CPU this process may use \(at least 16\): pass --oversubscribe .*"),
    (["run", "allreduce", "-m", "8", "--timeout", "nan"],
     r"--timeout must be 0 \(off\) or a finite number of positive seconds \(got nan\)"),
    (["run", "allreduce", "-m", "8", "--time-budget", "inf"],
     r"--time-budget must be a finite number of positive seconds \(got inf\)"),
    (["run", "iallreduce", "-m", "8", "--compute-us", "inf"], r"--compute-us must be a finite number, 0 or more .*"),
])
def test_options_beyond_any_real_run_are_refused_before_any_work(tmp_path, results, args, pattern):
    done = run_process([sys.executable, "-m", "microbench", *[a.format(r=results) for a in args]], timeout=LIMIT_S)
    one_error(done.returncode, done.stderr, pattern)


def test_a_worker_count_beyond_the_cap_is_capped_with_a_note(monkeypatch, capsys):
    from microbench.cluster.facts import _CAPPED, fork_workers
    from microbench.errors import UsageError

    _CAPPED.discard("MICROBENCH_READ_WORKERS")
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "100000")
    assert fork_workers("MICROBENCH_READ_WORKERS", 8) in (1, 8)  # 1 where fork is not safe (threads)
    assert capsys.readouterr().err == "# note: MICROBENCH_READ_WORKERS=100000: at most 8 workers are started\n"
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "9" * 5000)  # beyond int()'s 4300 digits
    assert fork_workers("MICROBENCH_READ_WORKERS", 8) in (1, 8)
    for bad in ("0", "x", "-3", "²"):
        monkeypatch.setenv("MICROBENCH_READ_WORKERS", bad)
        with pytest.raises(UsageError, match="expected a whole number of at least 1"):
            fork_workers("MICROBENCH_READ_WORKERS", 8)


def test_a_spec_number_beyond_a_float_is_one_line(capsys, tmp_path, results):
    spec = tmp_path / "big.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 1' + "0" * 400 + "\n")
    code, out, err = run_cli(capsys, "check", results, "--spec", spec)
    one_error(code, err, re.escape(f"spec {spec}: rule 1 (allreduce): max_latency_us must be a positive number (got 1")
              + "0{39}\\)")

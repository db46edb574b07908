"""One way to print: every line microbench writes to stdout and stderr passes one sanitizer (``errors.terminal_safe``
through ``errors.PrintableStream``, installed by ``cli.main`` for the verb's duration), and the exit statuses
(``microbench.errors``): 0 success, 1 a verdict of FAIL, 2 bad input or environment, 3 an internal error.

Hostile strings reach the terminal from file names, OMB headers, spec text, trace names and record fields; each
case here asserts that no control, bidirectional or invisible character is printed raw, and that each is shown
as a visible escape (review hostile-input-2, N12, N20, F14, F15).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import warnings

import pytest
from fixtures.gate.synth import private_index, result, run_line, with_latency
from fixtures.importers import make

import microbench.gate.check_cli
from microbench.cli import main as microbench_main
from microbench.errors import PrintableStream, clean, printable, terminal_safe
from microbench.run.terminal import Progress
from microbench.workload.traces.samples import nccl_call, nccl_init

ESC = "\x1b[2J\x1b[32mALL PASS\x1b[0m\x1b]0;owned\x07\x9b"
BIDI = "\u202eSSAP\u202c\u2066\u200f\u061c"
INVISIBLE = "\u200b\u200d\u2060\ufeff\u00ad\u2028\u2029"
HOSTILE = ESC + BIDI + INVISIBLE
#: what must never be printed raw: C0 (but tab and newline), DEL, C1, bidirectional controls, zero-width and other
#: format characters, line and paragraph separators, lone surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2069"
                 "\ufeff\ud800-\udfff]")
SPEC = '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\n'


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = microbench_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def nothing_raw(*texts: str) -> None:
    for text in texts:
        found = RAW.search(text)
        assert found is None, f"{found.group()!r} printed raw in {text!r}"


def write_lines(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def good_run(run_id="run0", **meta) -> list[dict]:
    return [run_line(run_id, **meta), *[result("allreduce", s, 10.0, run_id=run_id) for s in (8, 64)],
            {"type": "end", "run_id": run_id, "status": "complete", "reason": "", "results": 2}]


# ------------------------------------------------------------------------------------------- the sanitizer
@pytest.mark.parametrize("text,shown", [
    ("\x1b[2J", "\\x1b[2J"), ("a\x00b\x7f\x9b", "a\\x00b\\x7f\\x9b"), ("\t\n\r", "\\t\\n\\r"),
    ("\u202eSSAP\u202c", "\\u202eSSAP\\u202c"), ("\u2066x\u2069\u200e\u200f\u061c", "\\u2066x\\u2069\\u200e\\u200f\\u061c"),
    ("\u2028\u2029", "\\u2028\\u2029"), ("id\u200b\u200c\u200d\u2060\ufeff", "id\\u200b\\u200c\\u200d\\u2060\\ufeff"),
    ("soft\u00adhyphen\u00a0nbsp", "soft\\xadhyphen\\xa0nbsp"), ("r\udce9.jsonl", "r\\udce9.jsonl"),
    ("tag\U000e0041", "tag\\U000e0041"), ("vs\ufe0f\u3164", "vs\\ufe0f\\u3164"),
    ("héllo 日本 Ωmega", "héllo 日本 Ωmega"), ("plain ascii ~!", "plain ascii ~!"),
])
def test_printable_shows_each_hidden_character_as_an_escape(text, shown):
    assert printable(text) == shown
    assert terminal_safe(text) == shown.replace("\\t", "\t").replace("\\n", "\n")


def test_ids_that_differ_only_by_invisible_characters_print_differently():
    ids = ["id", "id\u200b", "id\u200b\u200b", "id\u2060", "id\ufeff", "i\u200dd"]
    assert len({printable(i) for i in ids}) == len(ids)


def test_terminal_safe_keeps_newline_and_tab_and_clean_matches_printable():
    assert terminal_safe("a\tb\nc\x1bd\re") == "a\tb\nc\\x1bd\\re"
    assert clean({"k\u202e": ["v\x1b", 1, None, {"x": "\u200b"}]}) == {"k\\u202e": ["v\\x1b", 1, None, {"x": "\\u200b"}]}
    same = {"a": ["b", 1.5]}
    assert clean("plain") == "plain" and clean(same) == same


def test_the_stream_sanitizes_what_is_written_and_json_passes_byte_identical():
    raw = io.StringIO()
    stream = PrintableStream(raw)
    print("x" + HOSTILE, "\ty", file=stream)
    assert raw.getvalue() == "x" + terminal_safe(HOSTILE) + " \ty\n"
    nothing_raw(raw.getvalue())
    document = json.dumps({"id": HOSTILE + "\udce9", "n": [1.5, None], "é": "日本"}, indent=1) + "\n"
    raw.seek(0), raw.truncate()
    stream.write(document)
    assert raw.getvalue() == document  # JSON (ensure_ascii) is printable ASCII: nothing changes


def test_a_terminal_that_cannot_show_a_character_gets_its_escape():
    raw = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # LANG=C, PYTHONIOENCODING=ascii
    print("h\u00e9llo \u65e5", file=PrintableStream(raw))
    raw.flush()
    assert raw.buffer.getvalue() == b"h\\xe9llo \\u65e5\n"


def test_the_progress_bar_gets_the_raw_stream_and_lines_above_it_are_sanitized():
    raw = io.StringIO()
    bar = Progress(2, stream=PrintableStream(raw), enabled=True)
    bar.next("allreduce 8 B")
    bar.write("# host h" + ESC)
    bar.done()
    bar.close()
    assert "\r" in raw.getvalue()  # tqdm's carriage returns reach the terminal, so the bar redraws in place
    assert "# host h" + terminal_safe(ESC) in raw.getvalue() and "\x1b[2J" not in raw.getvalue()


# ------------------------------------------------------------------------------------------- every verb's output
def test_a_results_file_name_in_an_error_line_is_escaped(capsys, tmp_path):
    recs = good_run()
    recs[1]["latency_us"]["p50"] = -1.0  # refused, naming FILE:LINE
    name = tmp_path / f"foreign-{HOSTILE}.jsonl"
    write_lines(name, recs)
    code, out, err = run_cli(capsys, "history", tmp_path)
    assert code == 2
    nothing_raw(out, err)
    line, = [l for l in err.splitlines() if l.startswith("microbench: error:")]
    assert f"foreign-{printable(HOSTILE)}.jsonl:2:" in line


def test_an_omb_header_in_import_output_is_escaped(capsys, tmp_path):
    lines = make.omb_collective("Allreduce", [8, 16])
    lines[1] = lines[1] + ESC.replace(" ", "") + BIDI + "\u200b\ufeff"  # in the version (spaces, U+2028 would end it)
    src = make.write(tmp_path / f"omb{ESC}.log", lines)
    code, out, err = run_cli(capsys, "import", "omb", src, "--ranks", "2", "--out", tmp_path / "foreign-o.jsonl")
    assert code == 0, err
    nothing_raw(out, err)
    assert printable(ESC.replace(" ", "")) in out


def test_a_spec_description_and_rule_name_are_escaped_in_check_output_and_spec_errors(capsys, tmp_path):
    results = write_lines(tmp_path / "r.jsonl", good_run())
    spec = tmp_path / "spec.toml"
    spec.write_text(f'description = {json.dumps(HOSTILE)}\n[[rule]]\nname = {json.dumps("r" + HOSTILE)}\n'
                    'benchmark = "allreduce"\nmax_latency_us = 50\n')
    code, out, err = run_cli(capsys, "check", results, "--spec", spec)
    assert code == 0, err
    nothing_raw(out, err)
    assert printable(HOSTILE) in out
    spec.write_text(f'[[rule]]\nbenchmark = {json.dumps("allreduce" + HOSTILE)}\nmax_latency_us = 50\n')
    code, out, err = run_cli(capsys, "check", results, "--spec", spec)
    assert code == 2
    nothing_raw(out, err)
    assert f"rule 1 (allreduce{printable(HOSTILE)})" in err


def test_nccl_log_host_names_are_escaped_in_workload_trace_output(capsys, tmp_path):
    host = "node1" + ESC.replace(" ", "") + BIDI
    log = tmp_path / "nccl.log"
    log.write_text("\n".join([nccl_init("0xa1", 0, 2, host=host, pid=1), nccl_init("0xb2", 1, 2, pid=2, dev=1),
                              nccl_call("AllReduce", 16, 7, "0xa1", 2, host=host, pid=1),
                              nccl_call("AllReduce", 16, 7, "0xb2", 2, pid=2, dev=1)]) + "\n")
    code, out, err = run_cli(capsys, "workload", "--trace", log)
    assert code == 0, err
    nothing_raw(out, err)
    assert printable(host) in out


@pytest.mark.parametrize("verb", [["check", "{path}", "--spec", "{spec}"], ["history", "{path}"],
                                  ["compare", "--baseline", "{path}", "--new", "{path}"]])
def test_run_ids_and_hosts_are_escaped_in_tables(capsys, tmp_path, verb):
    bad_id = "r\u202eSSAP\u202c\u200b"
    path = write_lines(tmp_path / "foreign-ids.jsonl",
                       good_run(bad_id, hosts=["h" + HOSTILE], library=HOSTILE + " Open MPI")
                       + good_run("run1", time_utc="2026-11-23T07:00:00Z"))
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    code, out, err = run_cli(capsys, *[a.format(path=path, spec=spec) for a in verb])
    assert code in (0, 1), err
    nothing_raw(out, err)


# ------------------------------------------------------------------------------------------- exit statuses
def test_an_internal_error_is_exit_3_and_one_escaped_line(capsys, monkeypatch, tmp_path):
    def crash(args):
        raise ZeroDivisionError("boom " + ESC)
    monkeypatch.setattr(microbench.gate.check_cli, "main", crash)
    monkeypatch.delenv("MICROBENCH_DEBUG", raising=False)
    code, out, err = run_cli(capsys, "check", tmp_path, "--spec", tmp_path / "s.toml")
    assert code == 3  # never 1, which is check's FAIL
    nothing_raw(out, err)
    assert err.splitlines() == [f"microbench: internal error: ZeroDivisionError: boom {printable(ESC)} "
                                "(a bug; set MICROBENCH_DEBUG=1 for the traceback)"]
    monkeypatch.setenv("MICROBENCH_DEBUG", "1")
    code, out, err = run_cli(capsys, "check", tmp_path, "--spec", tmp_path / "s.toml")
    assert code == 3 and err.startswith("microbench: internal error: ZeroDivisionError") and "Traceback" in err


def test_a_system_error_is_exit_2_naming_the_file(capsys, monkeypatch, tmp_path):
    def refused(args):
        raise PermissionError(13, "Permission denied", "secret" + ESC + ".jsonl")
    monkeypatch.setattr(microbench.gate.check_cli, "main", refused)
    code, out, err = run_cli(capsys, "check", tmp_path, "--spec", tmp_path / "s.toml")
    assert code == 2
    assert err.splitlines() == [f"microbench: error: secret{printable(ESC)}.jsonl: Permission denied"]


def test_interrupt_is_130(capsys, monkeypatch, tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(microbench.gate.check_cli, "main", interrupted)
    assert run_cli(capsys, "check", tmp_path, "--spec", tmp_path / "s.toml")[0] == 130


def test_a_full_stdout_is_exit_2_and_one_line(tmp_path):
    results = write_lines(tmp_path / "r.jsonl", good_run())
    (tmp_path / "spec.toml").write_text(SPEC)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "microbench", "check", results, "--spec", tmp_path / "spec.toml"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["microbench: error: cannot write the output: No space left on device"]


def test_no_numpy_warning_reaches_the_terminal(tmp_path):
    recs = []
    for run_id, when in (("run0", "2026-11-22T07:00:00Z"), ("run1", "2026-11-23T07:00:00Z")):
        recs += [run_line(run_id, when), *[result("allreduce", s, 10.0, run_id=run_id) for s in (8, 4096)],
                 {"type": "end", "run_id": run_id, "status": "complete", "reason": "", "results": 2}]
    stats = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")
    recs = [with_latency(r, {k: 1e13 for k in stats}) if r["type"] == "result" else r
            for r in recs]  # the longest a record may hold: tiny bandwidths, huge ratios
    path = write_lines(tmp_path / "foreign-huge.jsonl", recs)
    spec = tmp_path / "bw.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = 100\n')
    for verb in (["check", path, "--spec", spec], ["history", path], ["compare", "--baseline", path, "--new", path]):
        done = subprocess.run([sys.executable, "-m", "microbench", *map(str, verb)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode in (0, 1), done.stderr
        assert "Warning" not in done.stderr and "encountered" not in done.stderr, done.stderr


def test_any_other_warning_is_one_escaped_note(capsys, monkeypatch, tmp_path):
    def warns(args):
        warnings.warn("odd " + ESC, UserWarning)
        return 0
    monkeypatch.setattr(microbench.gate.check_cli, "main", warns)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        code, out, err = run_cli(capsys, "check", tmp_path, "--spec", tmp_path / "s.toml")
    assert code == 0 and err.splitlines() == [f"# note: UserWarning: odd {printable(ESC)}"]

"""Results whose samples the host's launch rate set (``launch.bound``) are marked wherever a person reads a result:
the run's table, check, compare and the report (issue 44).

The records are a real run's (MPI on this machine), with the launch block a CUDA run writes added to its 8-byte
results: what a GPU run would have written, read by the real verbs.
"""

from __future__ import annotations

import io
import json

import pytest

from conftest import microbench, read_jsonl
from microbench.measure.loops import LAUNCH_BOUND_ADVICE
from microbench.results.metrics import LAUNCH_BOUND_ADVICE_SHORT
from microbench.run.terminal import LAUNCH_MARK, TerminalTable, format_result_row

BOUND = {"host_us_per_call": 41.0, "device_us_per_call": 43.0, "bound": True}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of allreduce at 8 and 64 B; their 8-byte results marked launch-bound."""
    folder = tmp_path_factory.mktemp("launch-bound")
    paths = []
    for name in ("base", "new"):
        path = folder / f"{name}.jsonl"
        proc = microbench("run", "--np", "1", "allreduce", "-m", "8,64", "-i", "20", "--out", str(path))
        assert proc.returncode == 0, proc.output
        records = read_jsonl(path)
        for rec in records:
            if rec["type"] == "result" and rec["size_bytes"] == 8:
                rec["launch"] = dict(BOUND)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(path)
    return paths


def test_the_terminal_table_marks_the_row_and_says_once_what_it_means():
    stream = io.StringIO()
    table = TerminalTable(stream)
    table("section", {"benchmark": "allreduce", "summary": "s", "lines": []})
    row = {"size_bytes": 8, "latency_us": {"avg": 43.0, "min": 42.0, "max": 44.0, "p50": 43.0, "p99": 50.0},
           "algbw_gbps": 0.0002, "busbw_gbps": 0.0003, "check": None}
    table("result", {**row, "launch": dict(BOUND)})
    table("result", {**row, "size_bytes": 16, "launch": dict(BOUND)})
    table("result", {**row, "size_bytes": 1 << 28, "launch": {**BOUND, "bound": False}})
    lines = stream.getvalue().splitlines()
    assert lines[2].startswith("#") and [line.endswith(LAUNCH_MARK) for line in lines[3:]] == [True, False, True, False]
    assert lines[4] == f"# note: {LAUNCH_BOUND_ADVICE}" and "--cuda-graph" in lines[4]
    assert not format_result_row(row).endswith(LAUNCH_MARK)  # a CPU result has no launch facts


def test_the_columnar_reader_keeps_the_mark(runs):
    from microbench.results.load import load_table
    from microbench.results.metrics import launch_bound

    table = load_table([runs[1]])
    assert sorted(table.size[launch_bound(table.numbers)].tolist()) == [8]


def test_check_names_the_launch_bound_configurations(runs, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 1e6\n')
    proc = microbench("check", "--spec", str(spec), str(runs[1]))
    assert proc.returncode == 0, proc.output
    notes = [line for line in proc.stdout.splitlines() if line.strip().startswith("note")]
    assert len(notes) == 1 and LAUNCH_BOUND_ADVICE_SHORT in notes[0] and "allreduce 8 B" in notes[0], proc.stdout
    assert "64 B" not in notes[0]
    as_json = json.loads(microbench("check", "--spec", str(spec), "--json", str(runs[1])).stdout)
    judged = {j["config"]["size_bytes"]: j for rule in as_json["rules"] for j in rule["judgements"]}
    assert judged[8]["launch_bound_runs"] == 1 and judged[64]["launch_bound_runs"] == 0
    assert LAUNCH_BOUND_ADVICE_SHORT in judged[8]["detail"]


def test_compare_marks_the_rows_and_names_them(runs):
    proc = microbench("compare", "--baseline", str(runs[0]), "--new", str(runs[1]))
    assert proc.returncode in (0, 1, 4), proc.output  # the marks are judged here, not the verdict (1 run a side)
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split() and line.split()[0][0].isdigit()}
    assert "8*" in rows and "64" in rows, proc.stdout
    note = [line for line in proc.stdout.splitlines() if line.startswith("# note: *")]
    assert note == [f"# note: * {LAUNCH_BOUND_ADVICE_SHORT}: allreduce 8"], proc.stdout
    as_json = json.loads(microbench("compare", "--baseline", str(runs[0]), "--new", str(runs[1]), "--json").stdout)
    assert {r["config"]["size_bytes"]: r["launch_bound"] for r in as_json["rows"]} == {8: True, 64: False}


def test_the_report_marks_the_tables_and_the_comparison(runs, tmp_path):
    page = tmp_path / "report.html"
    proc = microbench("report", str(runs[1]), "--baseline", str(runs[0]), "-o", str(page), timeout=300)
    assert proc.returncode in (0, 1, 4), proc.output  # the marks are judged here, not the verdict (1 run a side)
    html = page.read_text()
    assert LAUNCH_BOUND_ADVICE_SHORT.replace("'", "&#x27;") in html or LAUNCH_BOUND_ADVICE_SHORT in html
    assert "1 result(s) at 8<" in html  # the figure's note
    assert LAUNCH_MARK.strip() in html  # the run's table rows, as the run printed them
    assert ">8*<" in html  # the comparison's row

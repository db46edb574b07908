"""microbench check: rules judged on synthetic runs with known values; fail closed; JSON and JUnit output."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fixtures.gate.synth import MULTIPLES, pairs_result, private_index, result, write_run

from microbench.cli import main as microbench_main
from microbench.gate.check import evaluate, reduce_runs
from microbench.gate.spec import load_spec
from microbench.results.load import load_table


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def judge(tmp_path: Path, spec_text: str, *runs: list[dict]):
    """Write each list of results as one run, evaluate the spec; returns the outcomes."""
    path = tmp_path / "results.jsonl"
    for i, results in enumerate(runs):
        write_run(path, results, run_id=f"r{i}", time_utc=f"2026-11-22T0{i}:00:00Z")
    return evaluate(load_spec(spec_file(tmp_path, spec_text)), load_table([path]))


LATENCY_RULE = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8:16"\nmax_latency_us = 50\n'


def test_latency_rule_passes_under_the_limit_and_fails_over_it(tmp_path):
    ok, = judge(tmp_path / "a", LATENCY_RULE, [result(size=8, p50=49.0), result(size=16, p50=50.0)])
    assert ok.passed
    assert [(j.key.size_bytes, j.value, j.allowed) for j in ok.judgements] == [(8, 49.0, 50.0), (16, 50.0, 50.0)]
    bad, = judge(tmp_path / "b", LATENCY_RULE, [result(size=8, p50=49.0), result(size=16, p50=51.0)])
    assert not bad.passed
    assert [j.passed for j in bad.judgements] == [True, False]
    assert "p50 latency 51 us > allowed 50 us" in bad.failures()[0]


def test_stat_chooses_the_latency_statistic(tmp_path):
    spec = '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\nstat = "p99"\n'
    outcome, = judge(tmp_path, spec, [result(p50=30.0)])  # p99 = 2 x p50 = 60
    assert not outcome.passed
    assert outcome.judgements[0].value == pytest.approx(30.0 * MULTIPLES["p99"])


def test_tolerance_loosens_the_limit_relatively(tmp_path):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + "tolerance = 0.1\n"
    assert judge(tmp_path / "a", spec, [result(p50=54.9)])[0].passed
    assert not judge(tmp_path / "b", spec, [result(p50=55.1)])[0].passed
    bw = '[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = 1.0\ntolerance = 0.25\n'
    # allreduce on 2 ranks: busbw = S x 1 / avg latency; 1 MiB at avg 1.05 x 1300 us -> 0.768 GB/s >= 0.75
    assert judge(tmp_path / "c", bw, [result(size=1 << 20, p50=1300.0)])[0].passed
    assert not judge(tmp_path / "d", bw, [result(size=1 << 20, p50=1400.0)])[0].passed


def test_bandwidth_is_the_recorded_busbw_unless_a_stat_is_given(tmp_path):
    rec = result(benchmark="allgather", size=1 << 20, p50=100.0, ranks=4)
    # allgather: S = 4 x size, factor 3/4
    expected_avg = 4 * (1 << 20) / (105e-6) / 1e9 * 0.75
    assert rec["busbw_gbps"] == pytest.approx(expected_avg)
    spec = '[[rule]]\nbenchmark = "allgather"\nmin_busbw_gbps = 1\n'
    outcome, = judge(tmp_path / "a", spec, [rec])
    assert outcome.judgements[0].value == pytest.approx(expected_avg) and outcome.passed
    outcome, = judge(tmp_path / "b", spec + 'stat = "p50"\n', [rec])
    assert outcome.judgements[0].value == pytest.approx(4 * (1 << 20) / 100e-6 / 1e9 * 0.75)
    # just above what the recorded busbw reaches: fails
    outcome, = judge(tmp_path / "c", spec.replace("= 1", f"= {expected_avg * 1.01}"), [rec])
    assert not outcome.passed


@pytest.mark.parametrize("mode,passes", [("best", True), ("median", True), ("all", False)])
def test_runs_mode_judges_best_median_or_every_run(tmp_path, mode, passes):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + f'runs = "{mode}"\n'
    outcome, = judge(tmp_path, spec, [result(p50=10.0)], [result(p50=100.0)], [result(p50=12.0)])
    assert outcome.passed is passes
    j = outcome.judgements[0]
    assert j.values == [10.0, 100.0, 12.0]
    assert j.value == {"best": 10.0, "median": 12.0, "all": 100.0}[mode]


def test_runs_modes_for_bandwidth_pick_the_high_value_as_best():
    assert reduce_runs([1.0, 3.0, 2.0], "best", higher_better=True) == 3.0
    assert reduce_runs([1.0, 3.0, 2.0], "all", higher_better=True) == 1.0
    assert reduce_runs([1.0, 3.0, 2.0, 4.0], "median", higher_better=True) == 2.5


def test_a_rule_no_measurement_matches_fails_closed(tmp_path):
    outcome, = judge(tmp_path / "a", '[[rule]]\nbenchmark = "broadcast"\nmax_latency_us = 1e9\n', [result()])
    assert not outcome.passed and outcome.judgements == []
    assert "no measurement matches broadcast" in outcome.problems[0]
    outcome, = judge(tmp_path / "b", LATENCY_RULE + 'backend = "torch"\n', [result(size=8), result(size=16)])
    assert not outcome.passed and "backend=torch" in outcome.problems[0]


def test_a_listed_size_nobody_measured_fails_closed(tmp_path):
    outcome, = judge(tmp_path, LATENCY_RULE, [result(size=8, p50=1.0)])
    assert not outcome.passed
    assert outcome.judgements[0].passed  # 8 B is fine ...
    assert outcome.problems == ["no measurement of allreduce at 16 B (fail closed)"]  # ... 16 B is missing


def test_a_record_lacking_the_statistic_fails(tmp_path):
    rec = result(p50=1.0)
    del rec["latency_us"]["p99"]
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\nstat = "p99"\n', [rec])
    assert not outcome.passed and "lack latency_us.p99" in outcome.judgements[0].detail


@pytest.mark.parametrize("states,passes,fragment", [
    (["pass", "pass"], True, "passed in 2 of 2"),
    (["pass", "fail"], False, "FAILED in run(s) r1"),
    (["pass", None], False, "not checked in 1 of 1 run(s)"),  # an unchecked run is its own configuration
])
def test_require_check_needs_a_passing_check_in_every_run(tmp_path, states, passes, fragment):
    spec = '[[rule]]\nbenchmark = "allreduce"\nrequire_check = true\nruns = "best"\n'
    outcome, = judge(tmp_path, spec, *[[result(check=s)] for s in states])
    assert outcome.passed is passes
    assert [j for j in outcome.judgements if fragment in j.detail]


def test_min_runs(tmp_path):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + "min_runs = 3\n"
    assert not judge(tmp_path / "a", spec, [result()], [result()])[0].passed
    assert judge(tmp_path / "b", spec, [result()], [result()], [result()])[0].passed


def test_a_run_is_one_sample_even_when_it_holds_a_configuration_twice(tmp_path):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + 'runs = "all"\nmin_runs = 2\n'
    outcome, = judge(tmp_path, spec, [result(p50=10.0), result(p50=70.0)], [result(p50=20.0)])
    runs, latency = outcome.judgements
    assert runs.value == 2 and runs.passed
    assert latency.values == [40.0, 20.0] and latency.value == 40.0 and latency.passed


def test_configurations_are_judged_separately(tmp_path):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"")
    outcome, = judge(tmp_path, spec, [result(p50=10.0), result(p50=90.0, dtype="float64"),
                                      result(p50=10.0, ranks=4)])
    assert len(outcome.judgements) == 3 and not outcome.passed
    failing = [j for j in outcome.judgements if not j.passed]
    assert [(j.key.get("dtype"), j.key.get("ranks")) for j in failing] == [("float64", 2)]


def test_unknown_fields_are_ignored_and_optional_key_fields_split_configurations(tmp_path):
    spec = LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + 'torch_backend = "gloo"\n'
    outcome, = judge(tmp_path, spec, [result(p50=1.0, torch_backend="gloo", flux_capacitor={"x": 1}),
                                      result(p50=99.0, torch_backend="nccl")])
    assert outcome.passed and len(outcome.judgements) == 1


def test_same_run_reached_twice_counts_once(tmp_path):
    path = write_run(tmp_path / "d" / "r.jsonl", [result()], run_id="only")
    spec = spec_file(tmp_path, LATENCY_RULE.replace("sizes = \"8:16\"", "sizes = \"8\"") + "min_runs = 2\n")
    outcome, = evaluate(load_spec(spec), load_table([path, tmp_path / "d"]))
    assert outcome.outcome == "INCONCLUSIVE" and "1 run(s), the rule needs at least 2" in outcome.inconclusive()[0]


def test_pairs_outliers_fail_the_rule_and_name_the_link(tmp_path):
    spec = '[[rule]]\nbenchmark = "pairs"\nmax_outliers = 0\nruns = "all"\n'
    healthy = [pairs_result("latency"), pairs_result("bandwidth", value=10.0)]
    ok, = judge(tmp_path / "a", spec, healthy, healthy)
    assert ok.passed and [j.value for j in ok.judgements] == [0.0, 0.0]
    bad_cable = [pairs_result("latency", bad=(1, 3), bad_value=9.0), pairs_result("bandwidth", value=10.0)]
    outcome, = judge(tmp_path / "b", spec, healthy, bad_cable)
    assert not outcome.passed
    failing, = [j for j in outcome.judgements if not j.passed]
    assert failing.key.get("metric") == "latency" and failing.values == [0.0, 1.0]
    assert "outliers 1 flagged > allowed 0 flagged" in failing.detail and "flagged: node1-node3 (1 run)" in failing.detail
    # the median of three runs forgives a link flagged once
    outcome, = judge(tmp_path / "c", spec.replace('"all"', '"median"'), healthy, bad_cable, healthy)
    assert outcome.passed


def test_pairs_statistics_judge_the_slowest_link(tmp_path):
    spec = ('[[rule]]\nbenchmark = "pairs"\nmetric = "latency"\nstat = "max"\nmax_latency_us = 5\n'
            '[[rule]]\nbenchmark = "pairs"\nmetric = "bandwidth"\nstat = "max"\nmin_busbw_gbps = 5\n')
    records = [pairs_result("latency", bad=(0, 2), bad_value=6.0), pairs_result("bandwidth", value=10.0, bad=(0, 2),
                                                                                bad_value=4.0)]
    latency, bandwidth = judge(tmp_path, spec, records)
    assert not latency.passed and latency.judgements[0].value == 6.0
    assert not bandwidth.passed and bandwidth.judgements[0].value == pytest.approx(4.0)


def test_pairs_schedules_are_separate_configurations(tmp_path):
    spec = '[[rule]]\nbenchmark = "pairs"\nmetric = "latency"\nmax_latency_us = 3\n'
    outcome, = judge(tmp_path, spec, [pairs_result(value=2.0), pairs_result(value=4.0, schedule="serial")])
    assert [(j.key.get("schedule"), j.passed) for j in outcome.judgements] == [("round-robin", True),
                                                                              ("serial", False)]


# ------------------------------------------------------------------------------------------------ CLI
SPEC = """
[[rule]]
benchmark = "allreduce"
sizes = "8:16"
max_latency_us = 50
[[rule]]
benchmark = "allreduce"
sizes = "1M"
min_busbw_gbps = 0.5
[[rule]]
benchmark = "broadcast"
max_latency_us = 50
"""


def cli(*args: str) -> int:
    return microbench_main(["check", *map(str, args)])


@pytest.fixture
def results_file(tmp_path):
    recs = [result(size=8, p50=10.0), result(size=16, p50=60.0), result(size=1 << 20, p50=100.0)]
    return write_run(tmp_path / "r.jsonl", recs)


def test_cli_exit_status_and_table(tmp_path, results_file, capsys):
    spec = spec_file(tmp_path, SPEC)
    assert cli(results_file, "--spec", spec) == 1
    out = capsys.readouterr().out
    assert "rule 1 FAIL" in out and "rule 2 PASS" in out and "rule 3 FAIL" in out
    assert "no measurement matches broadcast at any size (fail closed)" in out
    assert "# 3 rule(s): 1 passed, 2 failed -> FAIL" in out
    passing = spec_file(tmp_path, SPEC.split("[[rule]]\nbenchmark = \"broadcast\"")[0].replace("= 50", "= 70"))
    assert cli(results_file, "--spec", passing) == 0
    assert "-> PASS" in capsys.readouterr().out


def test_cli_json(tmp_path, results_file, capsys):
    assert cli(results_file, "--spec", spec_file(tmp_path, SPEC), "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False
    assert doc["summary"] == {"rules": 3, "passed": 1, "failed": 2}
    first = doc["rules"][0]
    assert [j["value"] for j in first["judgements"]] == [10.0, 60.0]
    assert [j["passed"] for j in first["judgements"]] == [True, False]
    assert first["judgements"][1]["config"]["size_bytes"] == 16
    assert doc["rules"][2]["problems"] and doc["rules"][2]["judgements"] == []


def test_cli_junit_is_well_formed_with_one_testcase_per_rule(tmp_path, results_file, capsys):
    junit = tmp_path / "out" / "check.xml"
    assert cli(results_file, "--spec", spec_file(tmp_path, SPEC), "--junit", junit) == 1
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")
    suite, = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["runs"] == "1" and props["spec"].endswith("spec.toml")
    cases = suite.findall("testcase")
    assert [c.get("name").split(":")[0] for c in cases] == ["rule 1", "rule 2", "rule 3"]
    assert [c.find("failure") is not None for c in cases] == [True, False, True]
    f1, f3 = cases[0].find("failure"), cases[2].find("failure")
    assert f1.get("type") == "threshold" and "allreduce 16 B" in f1.get("message")
    assert f3.get("type") == "fail-closed" and "no measurement matches broadcast" in f3.text
    assert "pass  allreduce 8 B" in cases[0].find("system-out").text


@pytest.mark.parametrize("args,fragment", [
    (["nosuch.jsonl"], "no such results file"),
    (["EMPTY"], "no result records in results"),
])
def test_cli_bad_results_exit_2(tmp_path, capsys, args, fragment):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    spec = spec_file(tmp_path, SPEC)
    args = [str(empty) if a == "EMPTY" else str(tmp_path / a) for a in args]
    assert cli(*args, "--spec", spec) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("microbench: error:") and fragment in err[0]


def test_cli_pairs_rule_table(tmp_path, capsys):
    path = write_run(tmp_path / "r.jsonl", [pairs_result("latency", bad=(1, 3), bad_value=9.0)])
    assert cli(path, "--spec", spec_file(tmp_path, '[[rule]]\nbenchmark = "pairs"\nmax_outliers = 0\n')) == 1
    out = capsys.readouterr().out
    assert "# pairs: statistics are over the links" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("8"))
    assert "metric=latency" not in row  # one configuration: no options column
    assert row.split()[-8:] == ["outliers", "1", "1", "1", "flagged", "<=", "0", "FAIL"]


def test_cli_unwritable_junit_is_a_usage_error(tmp_path, results_file, capsys):
    assert cli(results_file, "--spec", spec_file(tmp_path, SPEC), "--junit", tmp_path) == 2
    assert "cannot write JUnit XML" in capsys.readouterr().err

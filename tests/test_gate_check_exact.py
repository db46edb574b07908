"""The check gate to the letter: each verdict at its threshold, each message's figures, the explanations a gate
gives (conditions, the machine's state), replay bounds and the JUnit counts, on synthetic records with known
values, in process (issue 40: the tests that kill the mutants of ``gate.check``, docs/mutation-testing.md)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from fixtures.gate.synth import pairs_result, private_index, result, write_run

from microbench.gate import conditions, junit, replay_check
from microbench.gate.check import _side_text, evaluate
from microbench.gate.spec import load_spec, parse_spec
from microbench.gate.text import num, render, size_text
from microbench.results.load import load_table
from microbench.results.metrics import LAUNCH_BOUND_ADVICE_SHORT


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def judge(tmp_path, spec_text: str, *runs: list[dict]):
    """Each list of results written as one run; the spec's outcomes on them."""
    path = tmp_path / "results.jsonl"
    for i, results in enumerate(runs):
        write_run(path, results, run_id=f"r{i}", time_utc=f"2026-11-22T0{i}:00:00Z")
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    return evaluate(load_spec(spec), load_table([path]))


# ------------------------------------------------------------------------------------------------ check.py
def _stragglers(slow_rank=3, slow_host="n01", slow_us=120.0, fast_rank=5, fast_host="n02", fast_us=40.0,
                outliers=()):
    return {"slowest": {"rank": slow_rank, "host": slow_host, "mean_us": slow_us},
            "fastest": {"rank": fast_rank, "host": fast_host, "mean_us": fast_us}, "skew": slow_us / fast_us,
            "unit": "rank", "nodes": 2, "node_means_us": {}, "listed": "extremes", "node_skew": None,
            "outliers": list(outliers), "outlier_rule": {}}


def test_a_failing_skew_names_the_extreme_ranks_and_those_standing_out(tmp_path):
    odd = [{"label": "rank 3", "mean_us": 120.0, "z": 4.0, "side": "slow"}]
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 2\n',
                     [result(stragglers=_stragglers(outliers=odd))])
    j, = outcome.judgements
    assert not j.passed and j.value == 3.0
    assert j.detail == ("rank skew (slowest / fastest rank mean) 3 x > allowed 2 x, 1 run; slowest rank 3 on n01 "
                        "(120 us), fastest rank 5 on n02 (40 us), standing out: rank 3 (slow)")


def test_a_passing_skew_names_no_rank(tmp_path):
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 3\n',
                     [result(stragglers=_stragglers())])
    j, = outcome.judgements
    assert j.passed and j.detail == "rank skew (slowest / fastest rank mean) 3 x <= allowed 3 x, 1 run"


def test_a_stragglers_side_of_an_unexpected_type_is_shown_as_it_is():
    block = {"slowest": {"rank": 1, "host": "h", "mean_us": True}, "fastest": {"rank": 2, "host": "g",
                                                                                   "mean_us": "7"}}
    assert _side_text(block, "slowest") == "slowest rank 1 on h (? us)"
    assert _side_text(block, "fastest") == "fastest rank 2 on g (? us)"
    assert _side_text({"slowest": 3}, "slowest") == "" and _side_text(block, "middle") == ""


def test_a_launch_bound_run_is_counted_where_the_metric_misstates_it(tmp_path):
    bound = {"host_us_per_call": 41.0, "device_us_per_call": 43.0, "bound": True}
    spec = '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\nmax_rank_skew = 9\nruns = "all"\n'
    outcome, = judge(tmp_path, spec, [result(launch=bound, stragglers=_stragglers())],
                     [result(stragglers=_stragglers())])
    latency, skew = outcome.judgements
    assert latency.launch_bound_runs == 1
    assert latency.detail == f"p50 latency 10 us <= allowed 50 us, all of 2 runs; {LAUNCH_BOUND_ADVICE_SHORT} in 1 " \
                             "of 2 run(s)"
    assert skew.launch_bound_runs == 0 and LAUNCH_BOUND_ADVICE_SHORT not in skew.detail


def test_missing_sizes_are_listed_eight_at_most(tmp_path):
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nsizes = "8:4K"\nmax_latency_us = 50\n',
                     [result(size=8)])
    assert outcome.problems == ["no measurement of allreduce at 16 B, 32 B, 64 B, 128 B, 256 B, 512 B, 1K, 2K ... "
                                "(fail closed)"]
    nine, = judge(tmp_path / "b", '[[rule]]\nbenchmark = "allreduce"\nsizes = "8:2K"\nmax_latency_us = 50\n',
                  [result(size=8)])
    assert nine.problems == ["no measurement of allreduce at 16 B, 32 B, 64 B, 128 B, 256 B, 512 B, 1K, 2K "
                             "(fail closed)"]


def _slow_node(n: int) -> dict:
    """A pairs record of n nodes whose node 2 is slow on every link: n - 1 links and the node flagged."""
    from microbench.measure.outliers import node_outliers, outliers

    rec = pairs_result("latency", n=n)
    matrix = [[None if i == j else 9.0 if 2 in (i, j) else 2.0 for j in range(n)] for i in range(n)]
    links, _ = outliers(matrix, higher_is_worse=True)
    nodes, _ = node_outliers(matrix, higher_is_worse=True)
    labels = rec["labels"]
    rec.update(matrix=matrix, outliers=[{"pair": [o.i, o.j], "labels": [labels[o.i], labels[o.j]], "value": o.value,
                                         "z": round(o.z, 2)} for o in links],
               node_outliers=[{"index": i, "label": labels[i], "row_median": m, "z": round(z, 2)} for i, m, z in nodes])
    return rec


def test_a_slow_node_is_named_among_the_flagged(tmp_path):
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "pairs"\nmax_outliers = 0\n', [_slow_node(6)])
    j, = outcome.judgements
    assert j.value == 6 and not j.passed  # five links of node 2 and the node itself
    assert "node node2 (1 run)" in j.detail and "node1-node2 (1 run)" in j.detail


@pytest.mark.parametrize("nodes,shown,more", [(8, 8, False), (9, 8, True)])
def test_eight_flagged_links_and_nodes_are_named_at_most(tmp_path, nodes, shown, more):
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "pairs"\nmax_outliers = 0\n', [_slow_node(nodes)])
    j, = outcome.judgements
    assert j.value == nodes
    flagged = j.detail.split("; flagged: ")[1]
    assert flagged.count("(1 run)") == shown and flagged.endswith(" ...") is more


def test_the_stragglers_of_a_table_are_read_once(tmp_path, monkeypatch):
    import microbench.records as records

    reads = []
    real = records.read_runs
    monkeypatch.setattr(records, "read_runs", lambda paths: reads.append(paths) or real(paths))
    outcome, = judge(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 2\n',
                     [result(size=8, stragglers=_stragglers()), result(size=16, stragglers=_stragglers())])
    assert [j.passed for j in outcome.judgements] == [False, False]
    assert all("slowest rank 3 on n01" in j.detail for j in outcome.judgements)
    assert len(reads) == 1


def test_min_runs_says_how_many_more_only_when_short(tmp_path):
    spec = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 50\nmin_runs = 3\n'
    short, = judge(tmp_path / "a", spec, [result()])
    runs = short.judgements[0]
    assert runs.criterion == "min_runs" and runs.state == "inconclusive"
    assert runs.detail == "1 run(s), the rule needs at least 3: run 2 more before acting"
    enough, = judge(tmp_path / "b", spec, [result()], [result()], [result()])
    assert enough.judgements[0].detail == "3 run(s), the rule needs at least 3" and enough.passed


def test_a_lower_bound_passes_at_its_limit_and_says_which_side(tmp_path):
    rec = result(size=1 << 20, p50=100.0)
    busbw = rec["busbw_gbps"]
    at, = judge(tmp_path / "a", f'[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = {busbw!r}\n', [rec])
    assert at.passed and at.judgements[0].detail == f"busbw (from avg) {busbw:.4g} GB/s >= allowed {busbw:.4g} GB/s, 1 run"
    above, = judge(tmp_path / "b", f'[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = {busbw * 2!r}\n', [rec])
    assert not above.passed
    assert above.judgements[0].detail == f"busbw (from avg) {busbw:.4g} GB/s < allowed {busbw * 2:.4g} GB/s, 1 run"


# ------------------------------------------------------------------------------------------------ spec.py
def test_a_spec_file_over_64_mib_is_refused_before_it_is_read(tmp_path):
    from microbench.errors import UsageError

    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: nothing written
    with pytest.raises(UsageError) as info:
        load_spec(big)
    assert str(info.value).endswith(f"{(64 << 20) + 1} bytes, more than a spec file may hold ({64 << 20} bytes)")


def test_a_tolerance_that_is_not_a_number_is_refused_by_name(tmp_path):
    from microbench.errors import UsageError

    spec = tmp_path / "spec.toml"
    for value in ('"0.1"', "true"):
        spec.write_text(f'[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\ntolerance = {value}\n')
        with pytest.raises(UsageError, match="tolerance must be a fraction from 0 up to 1"):
            load_spec(spec)


def test_judging_text_names_the_tolerance_only_when_there_is_one():
    rules = parse_spec({"rule": [{"benchmark": "allreduce", "max_latency_us": 5},
                                 {"benchmark": "allreduce", "max_latency_us": 5, "tolerance": 0.1, "min_runs": 2,
                                  "runs": "best"}]}).rules
    assert [r.judging_text() for r in rules] == ["runs=median", "runs=best, tolerance 10 %, at least 2 runs"]


def test_a_validated_spec_cannot_be_changed(tmp_path):
    spec = parse_spec({"rule": [{"benchmark": "allreduce", "max_latency_us": 5}]})
    with pytest.raises(AttributeError):
        spec.rules = ()
    with pytest.raises(AttributeError):
        spec.rules[0].tolerance = 0.5


# ------------------------------------------------------------------------------------------------ replay_check.py
def _replay(run_id="a", scheme="ddp", backend="mpi", ratio=1.25, share=0.2, compute=True):
    return {"type": "replay", "run_id": run_id, "backend": backend, "workload": {"scheme": scheme},
            "comparison": [{"what": "step", "ratio": 9.0}, {"what": "total", "ratio": ratio}],
            "exposed_share": share, "compute": {"tflops": 1.0} if compute else None}


def test_a_replay_bound_passes_at_its_limit_and_fails_past_it():
    rule, = replay_check.parse_rules([{"max_prediction_error": 0.25, "max_exposed_share": 0.2}], None, 1)
    at = replay_check.judge(rule, [_replay(ratio=1.25, share=0.2)])
    assert at.passed and [r["value"] for r in at.rows] == [0.2, 0.25]
    assert [r["detail"] for r in at.rows] == ["exposed communication / iteration = 0.200, limit 0.2",
                                              "|replayed / predicted - 1| (ratio 1.250) = 0.250, limit 0.25"]
    past = replay_check.judge(rule, [_replay(ratio=0.7, share=0.21)])
    assert [r["passed"] for r in past.rows] == [False, False]
    assert past.lines()[0] == "replay rule 1 FAIL: replay of every replay"


def test_a_replay_without_compute_has_no_exposed_share():
    rule, = replay_check.parse_rules([{"max_exposed_share": 1}], None, 1)
    row, = replay_check.judge(rule, [_replay(compute=False)]).rows
    assert row["value"] is None and not row["passed"] and "run it with --tflops" in row["detail"]


def test_a_replay_rule_matches_its_schemes_and_backend():
    rule, = replay_check.parse_rules([{"scheme": ["ddp", "fsdp"], "backend": "mpi", "max_exposed_share": 1}],
                                     None, 1)
    assert rule.matches(_replay()) and rule.matches(_replay(scheme="fsdp"))
    assert not rule.matches(_replay(backend="torch")) and not rule.matches(_replay(scheme="zero3"))
    anywhere, = replay_check.parse_rules([{"max_exposed_share": 1}], None, 1)
    assert anywhere.matches(_replay(backend="torch", scheme="zero3"))


# ------------------------------------------------------------------------------------------------ conditions.py
def test_changes_name_the_mpi_build_only_when_name_and_version_agree():
    build = lambda text: {"mpi": {"library_version": text}}  # noqa: E731
    same_version = conditions.changes(build("Open MPI v5.0.11, package: a"), build("Open MPI v5.0.11, package: b"))
    assert same_version == ["MPI library: Open MPI v5.0.11, package: a -> Open MPI v5.0.11, package: b"]
    other_version = conditions.changes(build("Open MPI v5.0.11, package: a"), build("Open MPI v5.0.12, package: a"))
    assert other_version == ["MPI: Open MPI v5.0.11 -> Open MPI v5.0.12"]


def test_facts_keep_the_transport_environment_and_drop_per_launch_values():
    meta = {"conditions": {"env": {"UCX_TLS": "rc", "OMPI_MCA_initial_wdir": "/tmp/x"}}}
    facts = conditions.facts(meta)
    assert facts["env UCX_TLS"] == "rc" and "env OMPI_MCA_initial_wdir" not in facts
    assert conditions.changes(meta, {"conditions": {"env": {"UCX_TLS": "tcp"}}}) == ["env UCX_TLS: rc -> tcp"]


def test_facts_name_torch_and_its_backend():
    meta = {"torch": {"version": "2.13", "backend": "gloo", "nccl_version": None}}
    assert {k: v for k, v in conditions.facts(meta).items() if k.startswith("torch")} == {
        "torch version": "2.13", "torch backend": "gloo"}


def _run(load, cpus=2, ranks=2):
    return SimpleNamespace(meta={"ranks_per_host": {"h": ranks}}, end={"machine": [
        {"host": "h", "load_avg": [load, 0.0, 0.0], "cpus": cpus}]})


def test_the_machine_explains_a_change_only_in_its_own_direction():
    quiet, busy = [_run(2.0)] * 3, [_run(4.0)] * 3  # contention 1 and 2
    assert conditions.machine_change(quiet, busy, worse=True) == ("machine: contention x1.00 -> x2.00 (other "
                                                                  "processes' load 0.0 -> 2.0 CPUs)")
    assert conditions.machine_change(quiet, busy, worse=False) is None
    assert conditions.machine_change(busy, quiet, worse=False).startswith("machine: contention x2.00 -> x1.00")
    assert conditions.machine_change(busy, quiet, worse=True) is None
    assert conditions.machine_change(quiet, [_run(2.49)] * 3) is None  # x1.245: under MACHINE_STEP
    assert conditions.machine_change(quiet, [_run(2.5)] * 3) is not None  # x1.25: at it


def test_contention_is_at_least_one():
    assert conditions.contention(_run(0.5, cpus=2, ranks=0)) == 1.0
    assert conditions.contention(_run(6.0, cpus=2, ranks=2)) == 3.0
    assert conditions.busy_cpus(_run(6.0, cpus=2, ranks=2)) == 4.0


def test_every_host_recorded_counts_and_one_without_ranks_runs_none_of_them():
    run = SimpleNamespace(meta={"ranks_per_host": {"h": 2}}, end={"machine": [
        {"host": "h"},  # a state without a load: skipped, not the end of the list
        {"host": "h", "load_avg": [2.5, 0, 0], "cpus": 2},
        {"host": "g", "load_avg": [0.0, 0, 0], "steal_cpus": 1.0, "cpus": 1}]})
    assert conditions.busy_cpus(run) == 1.0  # g: no rank of the run, 1 CPU stolen; h: 0.5
    assert conditions.contention(run) == 1.25  # h: (0.5 + 2) / 2; g: (1 + 0) / 1


def test_machine_text_gives_the_median_and_the_spread():
    runs = [_run(3.0), _run(2.5), _run(4.5)]  # others' load 1.0, 0.5, 2.5; contention 1.5, 1.25, 2.25
    assert conditions.machine_text(runs) == "other processes' load 1.0 CPUs, 0.5..2.5, contention x1.50 (median " \
                                            "of 3 run(s))"
    assert conditions.machine_text([_run(3.0)]) == "other processes' load 1.0 CPUs, contention x1.50 (median of " \
                                                   "1 run(s))"


# ------------------------------------------------------------------------------------------------ text.py
def test_render_aligns_left_columns_left_and_the_others_right():
    assert render(["name", "n"], [["a", "10"], ["bbb", "2"]], left=[0], indent="  ") == [
        "  name   n", "  a     10", "  bbb    2"]
    assert num(None) == "-" and num(1234567.0) == "1.235e+06" and size_text(8) == "8 B" and size_text(4096) == "4K"


# ------------------------------------------------------------------------------------------------ junit.py
def _outcomes(tmp_path):
    spec = ('[[rule]]\nbenchmark = "allreduce"\nsizes = "8:16"\nmax_latency_us = 5\n'  # fails twice
            '[[rule]]\nbenchmark = "allreduce"\nsizes = "8:16"\nmax_latency_us = 50\nmin_runs = 2\n')  # short
    outcomes = judge(tmp_path, spec, [result(size=8), result(size=16)])
    assert [o.outcome for o in outcomes] == ["FAIL", "INCONCLUSIVE"]
    return load_spec(tmp_path / "spec.toml"), outcomes


def test_junit_counts_and_messages(tmp_path):
    spec, outcomes = _outcomes(tmp_path)
    root = junit.build(spec, outcomes, {}).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("2", "2", "0")
    fail, unsure = root.find("testsuite").findall("testcase")
    assert fail.find("failure").get("message") == "allreduce 8 B (2 ranks, mpi): p50 latency 10 us > allowed 5 us, " \
                                                  "1 run (and 1 more)"
    assert unsure.find("failure").get("type") == "inconclusive"
    assert unsure.find("failure").get("message") == (
        "INCONCLUSIVE: judged on fewer runs than the rule asks for: allreduce 8 B (2 ranks, mpi): 1 run(s), the rule "
        "needs at least 2: run 1 more before acting (and 1 more)")
    strict = junit.build(spec, outcomes, {}, unjudged="bw at 8 B").getroot()
    assert (strict.get("tests"), strict.get("failures")) == ("3", "3")
    lenient = junit.build(spec, outcomes, {}, inconclusive_fails=False).getroot()
    assert (lenient.get("failures"), lenient.get("skipped")) == ("1", "1")
    assert lenient.find("testsuite").findall("testcase")[1].find("skipped") is not None


def test_junit_write_fails_an_inconclusive_rule_unless_told_otherwise(tmp_path):
    spec, outcomes = _outcomes(tmp_path)
    junit.write(tmp_path / "j.xml", spec, outcomes, {})
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "2"

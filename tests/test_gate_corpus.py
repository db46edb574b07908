"""The gates on series of real launches (issue 39): the corpus of 60 real 2-rank launches of the core suite
(tests/fixtures/corpus: same code, a shared 2-core machine in several states over five batches), drawn into
nightlies and comparison sides, with slowdowns injected where a test needs a known truth.

What synthetic copies of one run could not show: real launches differ in their per-launch values (temporary
paths, working directories) and in their noise (histogram-binned p50s tie across runs; bimodal sizes).
"""

from __future__ import annotations

import json
import random
import re
from types import SimpleNamespace

import pytest
from fixtures.corpus import corpus, rates
from fixtures.gate.synth import private_index

from microbench.cli import main as microbench_main
from microbench.gate import conditions

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="module")
def real():
    """The corpus as the gates read it (loaded once)."""
    return rates.Corpus()


def run_cli(*args) -> int:
    return microbench_main([*map(str, args)])


def draw(seed: int, count: int, **kwargs) -> list[corpus.Launch]:
    return corpus.draw(random.Random(seed), count, **kwargs)


# ------------------------------------------------------------------------------------------ what may explain
def test_real_launches_keep_per_launch_values_apart_from_conditions():
    for launch in corpus.launches():
        run = launch.run
        assert "MICROBENCH_SIGNAL_NOTE" in run["per_launch"]["env"] and "OMPI_MCA_initial_wdir" in run["per_launch"]["env"]
        assert not [k for k in run["conditions"]["env"] if k in ("MICROBENCH_SIGNAL_NOTE", "OMPI_MCA_initial_wdir")]
    notes = {launch.run["per_launch"]["env"]["MICROBENCH_SIGNAL_NOTE"] for launch in corpus.launches()}
    assert len(notes) == len(corpus.launches())  # a new temporary file for every launch: never a condition


@pytest.mark.parametrize("old_style", [False, True])
def test_a_2x_step_at_night_20_of_30_fails_naming_night_20_and_no_recorded_change(tmp_path, capsys, old_style):
    """30 real launches as nights, every latency 2x from night 20. ``old_style``: the records as written before
    issue 39, the signal note's temporary path and the working directory among the conditions, which then
    "explained" every step (the nightly gate could not fail)."""
    corpus.write_nights(tmp_path / "nightly", draw(20, 30), step_night=19, factor=2.0, old_style=old_style)
    assert run_cli("history", tmp_path / "nightly", "-b", "allreduce,latency", "-m", "8,1K", "--fail-on-step") == 1
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if "step at run" in line]
    assert len(steps) == 4, out
    for line in steps:
        assert "(2026-01-20T" in line and "run 20 of 30" in line and "worse" in line, line
        assert line.endswith("changed: no recorded change"), line
    assert "MICROBENCH_SIGNAL_NOTE" not in out and "initial_wdir" not in out
    assert out.splitlines()[-1].startswith("# 4 step(s), 4 for the worse with no recorded change -> FAIL")


def test_a_recorded_condition_still_explains_a_step(tmp_path, capsys):
    """A new MPI library from night 20 is a condition: the step is reported with it and does not fail."""
    paths = corpus.write_nights(tmp_path / "nightly", draw(21, 24), step_night=16, factor=2.0)
    for path in paths[16:]:
        lines = path.read_text().splitlines()
        run = json.loads(lines[0])
        run["mpi"]["library_version"] = run["mpi"]["library_version"].replace("v5.0.11", "v5.0.12")
        path.write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    assert run_cli("history", tmp_path / "nightly", "-b", "allreduce", "-m", "8", "--fail-on-step", "--json") != 1
    series, = json.loads(capsys.readouterr().out)["series"]
    step, = series["steps"]
    assert step["run_number"] == 17 and step["explained"] and not step["fails"]
    assert any("Open MPI v5.0.12" in c for c in step["changed"])


def test_history_says_no_step_or_the_step_for_every_series(tmp_path, capsys):
    corpus.write_nights(tmp_path / "nightly", draw(22, 12), step_night=8, factor=2.0, benchmarks=("allreduce",))
    run_cli("history", tmp_path / "nightly", "-b", "allreduce,latency", "-m", "8:64")
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert len([line for line in lines if line.startswith("  allreduce") and "step at run" in line]) == 4
    quiet = [line for line in lines if line.startswith("  latency")]
    assert len(quiet) == 4 and all(": no step in 12 runs (a step of x" in line for line in quiet), quiet
    assert out.splitlines()[-1].endswith(" (--fail-on-step): FAIL") or "as a gate" in out.splitlines()[-1]
    run_cli("history", tmp_path / "nightly", "-b", "latency", "-m", "8", "--lookback", "5")
    assert "  latency 8: too short: 5 run(s), needs 6 for a step to be found" in capsys.readouterr().out


def test_same_code_history_over_30_nights_fails_in_at_most_5_percent_of_draws(real):
    rng = random.Random(5)
    every = list(range(len(real.runs)))
    outcomes = [rates.history_once(real, rng.sample(every, 30), None)[0] for _ in range(40)]
    assert outcomes.count("FAIL") <= 2, outcomes  # 40 draws: at most 5 %


def test_a_2x_step_fails_in_every_draw_naming_its_night(real):
    rng = random.Random(6)
    every = list(range(len(real.runs)))
    for _ in range(10):
        word, nights = rates.history_once(real, rng.sample(every, 30), 19)
        assert word == "FAIL" and 20 in nights, (word, nights)


# ------------------------------------------------------------------------------------------ compare
@pytest.mark.parametrize("runs", [1, 2, 3, 4, 8, 16])
def test_compare_never_passes_a_40_percent_slowdown(real, runs):
    rng = random.Random(runs)
    every = list(range(len(real.runs)))
    for _ in range(6):
        picked = rng.sample(every, 2 * runs)
        assert rates.compare_once(real, picked[:runs], picked[runs:], 0.40) != "PASS"


def test_same_code_at_8_a_side_fails_in_at_most_5_percent_of_draws(real):
    rng = random.Random(8)
    every = list(range(len(real.runs)))
    outcomes = [rates.compare_once(real, *(lambda p: (p[:8], p[8:]))(rng.sample(every, 16)), 0.0) for _ in range(40)]
    assert outcomes.count("FAIL") <= 2, outcomes


def test_two_a_side_is_inconclusive_and_says_how_many_runs_would_see(tmp_path, capsys):
    base = corpus.write_side(tmp_path / "base.jsonl", draw(30, 2), corpus.dt.date(2026, 3, 1))
    new = corpus.write_side(tmp_path / "new.jsonl", draw(31, 2), corpus.dt.date(2026, 3, 2))
    assert run_cli("compare", "--baseline", base, "--new", new) == 4
    out = capsys.readouterr().out
    last = out.splitlines()[-1]
    assert "-> INCONCLUSIVE: no regression seen, but" in last and "could not have seen a 25 % rise" in last, last
    assert "runs a side would see it" in last and last.endswith("(exit 4)") and "PASS" not in last
    assert all(re.fullmatch(r">1000|\d{1,3}", figure) for figure in re.findall(r"(\S+) %", last)), last
    assert run_cli("compare", "--baseline", base, "--new", new, "--inconclusive-exit", "0") == 0
    assert run_cli("compare", "--baseline", base, "--new", new, "--inconclusive-exit", "1") == 1
    capsys.readouterr()
    assert run_cli("compare", "--baseline", base, "--new", new, "--json") == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcome"] == "INCONCLUSIVE" and doc["exit_status"] == 4 and doc["blind_rows"] > 0
    assert doc["must_see_runs_per_side_median"] >= 2 and doc["must_see"] == 0.25


def test_one_new_run_is_judged_against_eight_baseline_runs(tmp_path, capsys):
    """Tonight's run against the last 8: judged against their spread (a prediction test), row by row; the
    outcome asks for a rerun rather than failing, since one run cannot rule out a rare mode of the machine."""
    launches = draw(40, 9)
    base = corpus.write_side(tmp_path / "base.jsonl", launches[:8], corpus.dt.date(2026, 3, 1))
    slow = corpus.write_side(tmp_path / "slow.jsonl", launches[8:], corpus.dt.date(2026, 3, 2), factor=2.0)
    same = corpus.write_side(tmp_path / "same.jsonl", launches[8:], corpus.dt.date(2026, 3, 3))
    assert run_cli("compare", "--baseline", base, "--new", slow, "-b", "allreduce", "--json") == 4
    doc = json.loads(capsys.readouterr().out)
    assert {r["test"] for r in doc["rows"]} == {"prediction"} and doc["summary"]["regression"] >= 6
    assert "beyond the other side's spread" in doc["outcome_text"] and "rerun it" in doc["outcome_text"]
    assert run_cli("compare", "--baseline", base, "--new", same, "-b", "allreduce", "--json") != 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["regression"] == 0 and doc["outcome"] in ("PASS", "INCONCLUSIVE")


def test_a_regression_that_came_with_a_busier_machine_is_inconclusive_and_says_so(tmp_path, capsys):
    """The corpus's least and most contended launches (its records say so): 2x slower on the busier side is
    REGRESSION row by row, but the outcome cannot tell the machine from the code."""
    by_load = sorted(corpus.launches(), key=lambda x: conditions.contention(SimpleNamespace(meta=x.run, end=x.records[-1])))
    base = corpus.write_side(tmp_path / "quiet.jsonl", by_load[:4], corpus.dt.date(2026, 3, 1))
    busy = corpus.write_side(tmp_path / "busy.jsonl", by_load[-4:], corpus.dt.date(2026, 3, 2), factor=2.0)
    assert run_cli("compare", "--baseline", base, "--new", busy, "-b", "allreduce") == 4
    out = capsys.readouterr().out
    assert "# machine: baseline other processes' load" in out and "the machine's state changed" in out
    assert "-> INCONCLUSIVE:" in out and "REGRESSION row(s), but the machine's state changed with them" in out
    assert run_cli("compare", "--baseline", busy, "--new", base, "-b", "allreduce") != 1  # quieter: no FAIL either
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ check
SPEC = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 1e6\n'


def test_check_names_what_it_did_not_judge_and_strict_fails_on_it(tmp_path, capsys):
    run = corpus.write_side(tmp_path / "r.jsonl", draw(50, 1), corpus.dt.date(2026, 3, 1))
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    assert run_cli("check", run, "--spec", spec) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("# not judged:"))
    assert "allreduce at 16..1K (7 sizes)" in line and "latency at 8..1K (8 sizes)" in line and "bw at" in line
    assert out.splitlines()[-1].endswith("-> PASS")
    assert run_cli("check", run, "--spec", spec, "--strict", "--junit", tmp_path / "j.xml") == 1
    assert "-> FAIL (--strict)" in capsys.readouterr().out
    assert 'type="not-judged"' in (tmp_path / "j.xml").read_text()
    assert run_cli("check", run, "--spec", spec, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert {e["benchmark"] for e in doc["not_judged"]} == {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                                         "latency", "bw"}


def test_check_on_fewer_runs_than_asked_is_inconclusive(tmp_path, capsys):
    run = corpus.write_side(tmp_path / "r.jsonl", draw(51, 1), corpus.dt.date(2026, 3, 1))
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("1e6", "1e-3") + "min_runs = 3\n")  # a limit no run meets, judged on 1 run of 3
    assert run_cli("check", run, "--spec", spec, "--junit", tmp_path / "j.xml") == 4
    out = capsys.readouterr().out
    assert "rule 1 INCONCLUSIVE" in out and "run 2 more before acting" in out and out.rstrip().endswith("INCONCLUSIVE")
    assert 'type="inconclusive"' in (tmp_path / "j.xml").read_text()
    assert run_cli("check", run, "--spec", spec, "--inconclusive-exit", "0", "--junit", tmp_path / "k.xml") == 0
    assert "<skipped" in (tmp_path / "k.xml").read_text()
    three = corpus.write_side(tmp_path / "three.jsonl", draw(52, 3), corpus.dt.date(2026, 3, 2))
    assert run_cli("check", three, "--spec", spec) == 1  # on 3 runs the broken limit is a FAIL
    capsys.readouterr()


def test_ties_between_real_runs_do_not_hide_a_step(real):
    """Real p50s come from histogram bins and tie across runs (every series of the corpus has ties): 16 nights
    then 8 at 2x, 48 series judged together. The normal approximation of the rank test with ties (p 1e-4 for
    complete separation) cannot reach the level there; the exact count conditional on the ties (3e-6) can."""
    rng = random.Random(9)
    every = list(range(len(real.runs)))
    for _ in range(3):
        word, nights = rates.history_once(real, rng.sample(every, 24), 16)
        assert word == "FAIL" and 17 in nights, (word, nights)

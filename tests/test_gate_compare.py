"""microbench compare on synthetic runs: a known 30 % slowdown is flagged, identical runs are not."""

from __future__ import annotations

import json
import math
import random
import re
from itertools import combinations

import numpy as np
import pytest
from fixtures.corpus import corpus
from fixtures.gate.synth import base_latency, pairs_result, private_index, result, write_run, write_runs

from microbench.cli import main as microbench_main
from microbench.errors import UsageError
from microbench.gate import ranktest, ratiotest, tdist
from microbench.gate.compare import IMPROVED, NOISE, OK, REGRESSION, UNCONFIRMED, compare, verdict
from microbench.gate.compare_cli import parse_threshold
from microbench.gate.family import holm
from microbench.results.load import load_table


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def cli(*args) -> int:
    return microbench_main(["compare", *map(str, args)])


def slower(factor):
    return lambda b, s: base_latency(b, s) * factor


# ------------------------------------------------------------------- the rank test's null distribution
def test_exact_null_distribution_by_enumeration():
    """P(U <= u) from the recursion equals counting every split of 7 ranks into 3 new and 4 baseline."""
    m, n = 4, 3
    counts = [0] * (m * n + 1)
    for new in combinations(range(m + n), n):
        base = [r for r in range(m + n) if r not in new]
        counts[sum(1 for y in new for x in base if y > x)] += 1
    cdf = ranktest.u_cdf(m, n)
    running = 0
    for u, c in enumerate(counts):
        running += c
        assert cdf[u] == pytest.approx(running / math.comb(m + n, n))


def test_complete_separation_is_the_smallest_p():
    assert ranktest.smallest_p(4, 4) == pytest.approx(2 / 70)
    assert ranktest.mann_whitney_p(16, 4, 4) == pytest.approx(ranktest.smallest_p(4, 4))
    assert ranktest.mann_whitney_p(0, 3, 5) == pytest.approx(ranktest.smallest_p(3, 5))


@pytest.mark.parametrize("ratio,adjusted,higher_better,expected", [
    (1.30, 0.01, False, REGRESSION),
    (1.30, 0.20, False, NOISE),
    (1.30, None, False, UNCONFIRMED),
    (1.03, 0.001, False, OK),  # significant but within the threshold
    (0.70, 0.01, False, IMPROVED),
    (0.70, 0.01, True, REGRESSION),  # bandwidth fell
    (1.30, 0.01, True, IMPROVED),
])
def test_verdict(ratio, adjusted, higher_better, expected):
    assert verdict(ratio, adjusted, 0.05, 0.05, higher_better) == expected


# ------------------------------------------------------------------------------------------- compare
def real_sides(tmp_path, runs: int, factor: float, seed: int = 3, new_runs: int | None = None,
               benchmarks=("allreduce", "latency")):
    """Two sides of distinct real launches from the corpus (tests/fixtures/corpus), the new side's latencies of
    ``benchmarks`` x ``factor`` (bandwidths recomputed), on two days."""
    drawn = corpus.draw(random.Random(seed), runs + (new_runs or runs))
    base = corpus.write_side(tmp_path / "base.jsonl", drawn[:runs], corpus.dt.date(2026, 3, 1))
    new = corpus.write_side(tmp_path / "new.jsonl", drawn[runs:], corpus.dt.date(2026, 3, 2), factor, benchmarks)
    return base, new


def test_known_30_percent_slowdown_of_real_runs_is_flagged(tmp_path, capsys):
    base, new = real_sides(tmp_path, 6, 1.3)
    result = compare(load_table([base]), load_table([new]), select=lambda t: t.config_mask(
        lambda k: k.benchmark in ("allreduce", "latency")))
    assert len(result.rows) == 16 and not result.only_baseline and not result.only_new
    flagged = [r for r in result.rows if r.verdict == REGRESSION]
    assert len(flagged) >= 12, [(r.key.benchmark, r.key.size_bytes, r.ratio, r.verdict) for r in result.rows]
    for row in flagged:
        assert row.ratio > 1.05 and row.interval[0] > 1 and row.p_adjusted <= 0.05
        assert len(row.baseline) == len(row.new) == 6
    assert {r.verdict for r in result.rows} <= {REGRESSION, NOISE}
    assert cli("--baseline", base, "--new", new, "-b", "allreduce,latency") == 1
    out = capsys.readouterr().out
    assert "ratio = median(new) / median(baseline)" in out and "-> FAIL" in out


def test_identical_runs_are_not_flagged(tmp_path, capsys):
    """Runs with no spread at all: every configuration could see any change beyond the threshold: PASS."""
    base = write_runs(tmp_path / "base.jsonl", 5, slower(1.0), prefix="b")
    new = write_runs(tmp_path / "new.jsonl", 5, slower(1.0), prefix="n", day=2)
    result = compare(load_table([base]), load_table([new]))
    assert {r.verdict for r in result.rows} == {OK}
    assert all(r.ratio == pytest.approx(1.0) and r.p_adjusted > 0.05 for r in result.rows)
    assert cli("--baseline", base, "--new", new) == 0
    assert "-> PASS (each configuration would have seen a 25 % rise with 90 % probability)" in capsys.readouterr().out


def test_bandwidth_regression_is_a_fall(tmp_path):
    base = write_runs(tmp_path / "base.jsonl", 5, slower(1.0), prefix="b")
    new = write_runs(tmp_path / "new.jsonl", 5, slower(1.3), prefix="n")
    result = compare(load_table([base]), load_table([new]), metric="busbw", stat="avg")
    assert all(r.ratio == pytest.approx(1 / 1.3) and r.verdict == REGRESSION for r in result.rows)
    faster = compare(load_table([new]), load_table([base]), metric="busbw", stat="avg")
    assert {r.verdict for r in faster.rows} == {IMPROVED}


def test_single_real_runs_cannot_be_judged_and_are_inconclusive(tmp_path, capsys):
    """One real run a side, 30 % slower: no test, so no FAIL with a stated error rate and never PASS."""
    base, new = real_sides(tmp_path, 1, 1.3)
    result = compare(load_table([base]), load_table([new]))
    assert {r.verdict for r in result.rows if r.key.benchmark == "allreduce"} <= {UNCONFIRMED, OK}
    assert all(r.interval is None and r.p_adjusted is None and r.test is None for r in result.rows)
    assert cli("--baseline", base, "--new", new) == 4
    out = capsys.readouterr().out
    assert "too few runs" in out and "regression?" in out and "-> PASS" not in out
    last = out.splitlines()[-1]
    assert "-> INCONCLUSIVE: no regression seen, but 48 of 48 configuration(s) could not have seen a 25 % rise: " \
           "no configuration had the runs for a test; 48 had no test (a side had 1 run" in last, last
    assert "--lookback" in last and last.endswith("(exit 4)")
    assert "#   allreduce: nothing (too few runs)" in out
    assert cli("--baseline", base, "--new", new, "--json") == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcome"] == "INCONCLUSIVE" and doc["exit_status"] == 4 and "INCONCLUSIVE" in doc["outcome_text"]
    assert doc["untested"]["worse"] >= 1 and "2 or more" in doc["untested"]["remedy"]
    assert all(r["detectable_change_90"] is None for r in doc["rows"])
    assert cli("--baseline", base, "--new", new, "--fail-unconfirmed") == 1  # the old flag: INCONCLUSIVE fails
    assert cli("--baseline", base, "--new", new, "--inconclusive-exit", "0") == 0
    capsys.readouterr()


def test_real_comparisons_say_what_they_could_see_and_plan_in_whole_runs(tmp_path, capsys):
    base, new = real_sides(tmp_path, 6, 1.0, seed=4)
    code = cli("--baseline", base, "--new", new, "-b", "allreduce,latency", "--plan", "25%")
    out = capsys.readouterr().out
    seen = [line for line in out.splitlines() if line.startswith("#   ")]
    assert [line.split(":")[0] for line in seen] == ["#   allreduce", "#   latency"]
    assert all(re.search(r"25 % needs \d+ / (\d+|more than 1000) runs a side \(median / worst size\)", line)
               for line in seen), seen
    assert cli("--baseline", base, "--new", new, "-b", "allreduce,latency", "--json", "--plan", "25%") == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan_change"] == 0.25 and doc["untested"]["count"] == 0
    blind = [r for r in doc["rows"] if not r["detectable_change_90"] <= 0.25]
    assert doc["outcome"] == ("INCONCLUSIVE" if blind else "PASS") and code == (4 if blind else 0)
    assert doc["blind_rows"] == len(blind)
    for g in doc["could_see"]:
        assert g["detectable_median"] <= g["detectable_max"] and isinstance(g["plan_runs_median"], int)
    assert cli("--baseline", base, "--new", new, "--plan", "4%") == code
    assert "a 4 % change is within the 5 % threshold: never flagged" in capsys.readouterr().out


def test_planned_runs_detect_the_planned_change():
    """runs_needed's n, fed back into the model, detects the change; n - 1 does not."""
    from microbench.gate import compare_power as power

    thr = power.log_threshold(0.05, False)
    goal = power.from_fraction(0.25, False)
    n = power.runs_needed(0.28, 0.0, 20, 0.05, thr, goal)
    assert n is not None and 40 < n < 80  # about 61: 0.05/20 two-sided and 90 % power, log SD 0.28

    def d90(k):
        return power.detectable_log(math.sqrt(2 * 0.28 ** 2 / k), 2 * k - 2, 20, 0.05, thr)
    assert d90(n) <= goal < d90(n - 1)
    assert power.runs_needed(0.28, 0.0, 20, 0.05, thr, power.from_fraction(0.04, False)) is None
    assert power.detection_probability(d90(n), math.sqrt(2 * 0.28 ** 2 / n), 2 * n - 2, 20, 0.05, thr) == \
        pytest.approx(0.9, abs=1e-6)


@pytest.mark.parametrize("runs,sd", [(6, 0.2), (8, 0.28), (16, 0.3)])
def test_predicted_detectable_change_is_caught_nine_times_in_ten(runs, sd):
    """Monte Carlo with compare's own test and verdict: log-normal runs, a true change at the predicted D90 (one
    configuration of 20 tested, the rest null) is flagged REGRESSION in about 90 % of comparisons. (At 3 or 4 runs a
    side Welch's df falls below 2n - 2 and the figure from the nominal df is kind: 0.62 and 0.76.)"""
    from microbench.gate import compare_power as power

    rng = np.random.default_rng(runs)
    thr = power.log_threshold(0.05, False)
    se, df = math.sqrt(2 * sd * sd / runs), 2 * runs - 2
    change = power.detectable_log(se, df, 20, 0.05, thr)
    caught, trials = 0, 1500
    for _ in range(trials):
        base = np.exp(rng.normal(0, sd, runs))
        new = np.exp(rng.normal(change, sd, runs))
        test = ratiotest.run_test(base.tolist(), new.tolist())
        ratio = float(np.median(new) / np.median(base))
        caught += verdict(ratio, min(1.0, test.p * 20), 0.05, 0.05, False) == REGRESSION
    assert 0.82 <= caught / trials <= 0.96, caught / trials


def test_launch_to_launch_noise_is_not_a_regression(tmp_path):
    """Bimodal runs (1x or 2x) on both sides: the medians differ by 2x, but the runs overlap."""
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i, mode in enumerate([1, 2, 1, 2, 1]):
        write_run(base, [result(p50=1.5 * mode)], run_id=f"b{i}")
    for i, mode in enumerate([2, 1, 2, 1, 2]):
        write_run(new, [result(p50=1.5 * mode)], run_id=f"n{i}")
    row, = compare(load_table([base]), load_table([new])).rows
    assert row.ratio == pytest.approx(2.0)
    assert row.interval[0] < 1 < row.interval[1] and row.verdict == NOISE


def test_runs_are_the_unit_of_sampling(tmp_path):
    """Two results of one configuration in one run are one sample (their median), not two."""
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i in range(4):
        write_run(base, [result(p50=10.0 + i * 0.1)], run_id=f"b{i}")
        write_run(new, [result(p50=13.0), result(p50=15.0)], run_id=f"n{i}")
    row, = compare(load_table([base]), load_table([new])).rows
    assert row.new.tolist() == [14.0] * 4 and len(row.baseline) == 4


def test_small_messages_first_and_json(tmp_path, capsys):
    base = write_runs(tmp_path / "base.jsonl", 4, slower(1.0), prefix="b", benchmarks=("latency", "allreduce"),
                      sizes=(1 << 20, 8, 1024))
    new = write_runs(tmp_path / "new.jsonl", 4, slower(1.0), prefix="n", benchmarks=("latency", "allreduce"),
                     sizes=(1024, 1 << 20, 8))
    assert cli("--baseline", base, "--new", new, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    sizes = [r["config"]["size_bytes"] for r in doc["rows"]]
    assert sizes == sorted(sizes) == [8, 8, 1024, 1024, 1 << 20, 1 << 20]
    assert doc["metric"] == "latency" and doc["stat"] == "p50" and doc["threshold"] == 0.05
    assert doc["summary"]["ok"] == 6 and doc["exit_status"] == 0
    row = doc["rows"][0]
    assert row["ci_low"] < 1 < row["ci_high"] and row["p_adjusted"] > 0.05 and len(row["new_values"]) == 4
    assert doc["error_control"].startswith("Holm") and 0 <= doc["run_correlation"] <= 0.9


def test_options_separate_configurations(tmp_path, capsys):
    base = write_run(tmp_path / "base.jsonl", [result(p50=1.0), result(size=64, p50=1.0)], run_id="b")
    new = write_run(tmp_path / "new.jsonl", [result(p50=1.0, dtype="float64"), result(size=64, p50=1.0)],
                    run_id="n")
    res = compare(load_table([base]), load_table([new]))
    assert [r.key.size_bytes for r in res.rows] == [64]
    assert [k.get("dtype") for k in res.only_baseline] == ["float32"]
    assert [k.get("dtype") for k in res.only_new] == ["float64"]
    only_dtype = write_run(tmp_path / "other.jsonl", [result(p50=1.0, sync="barrier")], run_id="o")
    assert cli("--baseline", base, "--new", only_dtype, "-m", "8") == 2
    assert "nothing to compare" in capsys.readouterr().err


def test_pairs_compare_per_matrix_and_schedule(tmp_path, capsys):
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i in range(4):
        write_run(base, [pairs_result("latency", value=2.0), pairs_result("bandwidth", value=10.0),
                         result(p50=1.0)], run_id=f"b{i}")
        write_run(new, [pairs_result("latency", value=3.0), pairs_result("bandwidth", value=10.0),
                        pairs_result("latency", value=2.0, schedule="serial")], run_id=f"n{i}")
    assert cli("--baseline", base, "--new", new, "-b", "pairs", "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(r["config"]["metric"], r["config"]["schedule"], r["verdict"]) for r in doc["rows"]] == [
        ("latency", "round-robin", REGRESSION), ("bandwidth", "round-robin", OK)]
    assert [(k["metric"], k["schedule"]) for k in doc["only_new"]] == [("latency", "serial")]
    assert doc["only_baseline"] == []  # the allreduce result is not selected by -b pairs


def test_filters_and_threshold(tmp_path, capsys):
    base = write_runs(tmp_path / "base.jsonl", 4, slower(1.0), prefix="b")
    new = write_runs(tmp_path / "new.jsonl", 4, slower(1.08), prefix="n")
    assert cli("--baseline", base, "--new", new, "-b", "latency", "-m", "8:64", "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert {(r["config"]["benchmark"], r["config"]["size_bytes"]) for r in doc["rows"]} == {("latency", 8),
                                                                                          ("latency", 64)}
    assert cli("--baseline", base, "--new", new, "--threshold", "10%") == 0
    assert "on both sides" not in capsys.readouterr().out
    assert cli("--baseline", base, "--new", base) == 0
    assert "# note: 4 run(s) are on both sides: b0, b1, b2, b3" in capsys.readouterr().out


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.1", 0.1), ("150%", 1.5)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "-1%", "fast", "0"])
def test_bad_threshold(text):
    with pytest.raises(UsageError):
        parse_threshold(text)


@pytest.mark.parametrize("extra,fragment", [
    (["--stat", "p95"], "invalid choice: 'p95'"),
    (["--confidence", "1.5"], "--confidence must be"),
    (["-b", "allreduse"], "unknown benchmark 'allreduse'"),
    (["-b", "allreduce,pairz"], "unknown benchmark 'pairz': choose from allreduce, allgather"),
    (["--threshold", "5"], "a bare number is a fraction"),
])
def test_bad_options_exit_2(tmp_path, capsys, extra, fragment):
    base = write_runs(tmp_path / "base.jsonl", 1, slower(1.0))
    assert cli("--baseline", base, "--new", base, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]


def test_records_from_before_call_path_keep_their_configuration():
    from microbench.results.keys import config_key

    base = {"benchmark": "allreduce", "size_bytes": 8, "ranks": 2, "backend": "mpi", "check": None}
    old_native, new_native = {**base, "loop": "native"}, {**base, "loop": "native", "call_path": "native"}
    old_python = {**base, "loop": "python"}  # before the shim, the Python loop called mpi4py
    assert config_key(old_native) == config_key(new_native)
    assert config_key(old_python) == config_key({**base, "loop": "python", "call_path": "mpi4py"})
    assert config_key(old_python) != config_key({**base, "loop": "python", "call_path": "shim"})
    torch_old = {**base, "backend": "torch", "loop": "python"}
    assert config_key(torch_old) == config_key({**torch_old, "call_path": "torch"})


# ------------------------------------------------------------------- error control and correlated runs
def test_holm_adjusts_in_step_down_order():
    adjusted = holm([0.01, 0.04, 0.03, None, 0.005])
    assert adjusted[3] is None
    assert adjusted[4] == pytest.approx(4 * 0.005) and adjusted[0] == pytest.approx(3 * 0.01)
    assert adjusted[2] == pytest.approx(2 * 0.03) and adjusted[1] == pytest.approx(0.06)  # monotone: max(0.06, 0.04)


@pytest.mark.parametrize("t,df,p", [(2.145, 14, 0.05), (2.776, 4, 0.05), (12.706, 1, 0.05), (3.707, 6, 0.01),
                                    (1.96, 10 ** 6, 0.05)])
def test_t_distribution_matches_the_tables(t, df, p):
    assert tdist.two_sided_p(t, df) == pytest.approx(p, rel=2e-3)
    assert tdist.quantile(1 - p / 2, df) == pytest.approx(t, rel=1e-3)


def test_back_to_back_correlation_widens_the_test():
    spell = [1.0, 1.02, 1.04, 1.06, 1.08, 1.10, 1.12, 1.14]  # a drift: each run like the one before
    assert ratiotest.run_correlation([spell, spell[::-1]]) > 0.3
    assert ratiotest.run_correlation([[1.0, 1.1, 1.0, 1.1, 1.0, 1.1]]) == 0.0  # alternating: clipped at 0
    base, new = [1.0, 1.03, 0.98, 1.01], [1.1, 1.12, 1.08, 1.13]
    plain, widened = ratiotest.run_test(base, new, 0.0), ratiotest.run_test(base, new, 0.5)
    assert widened.se > plain.se and widened.p > plain.p and widened.df < plain.df
    assert ratiotest.ar1_factor(4, 0.5) == pytest.approx(1 + 2 * (0.75 * 0.5 + 0.5 * 0.25 + 0.25 * 0.125))


def test_twenty_unchanged_configurations_stay_quiet_as_a_family(tmp_path):
    """Runs drawn from one distribution for 20 configurations: per-row 5 % tests would flag about one;
    Holm over the family keeps every row unflagged here (fixed seed)."""
    import random

    rng = random.Random(5)
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i in range(8):
        for path, side in ((base, "b"), (new, "n")):
            write_run(path, [result("allreduce", 8 << s, p50=2.0 * rng.lognormvariate(0, 0.08)) for s in range(20)],
                      run_id=f"{side}{i}")
    res = compare(load_table([base]), load_table([new]))
    assert len(res.rows) == 20 and sum(r.test.p < 0.05 for r in res.rows) >= 1  # odd on its own ...
    assert {r.verdict for r in res.rows} <= {OK, NOISE}  # ... and nothing is flagged for the family


def test_alternating_runs_are_compared_in_pairs(tmp_path, capsys):
    """Baseline and new runs taken A B A B ...: a spell that moves both runs of a pair cancels in their
    ratio, and one starved launch (100x) is pulled in before it decides a variance."""
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    spells = [1.0, 2.0, 0.6, 1.5, 3.0, 0.8, 1.2, 2.5]  # the machine's level, pair by pair
    for i, level in enumerate(spells):
        write_run(base, [result(size=8 << s, p50=level * (1 + 0.01 * (i % 3))) for s in range(10)],
                  run_id=f"b{i}", time_utc=f"2026-11-01T02:{2 * i:02d}:00Z")
        slow = 100.0 if i == 5 else 1.3
        write_run(new, [result(size=8 << s, p50=level * slow * (1 + 0.01 * ((i + 1) % 3))) for s in range(10)],
                  run_id=f"n{i}", time_utc=f"2026-11-01T02:{2 * i + 1:02d}:00Z")
    res = compare(load_table([base]), load_table([new]))
    assert {r.test.method for r in res.rows} == {"pairs"}
    assert {r.verdict for r in res.rows} == {REGRESSION}
    unpaired = ratiotest.run_test(res.rows[0].baseline, res.rows[0].new)
    assert unpaired.p > 0.05  # the same runs judged as two independent batches: lost in the spells
    assert cli("--baseline", base, "--new", new) == 1
    assert "paired t on the log ratio" in capsys.readouterr().out


# ------------------------------------------------------------------- issue 39: permutation and prediction tests
def test_the_permutation_p_is_every_split_counted():
    rng = np.random.default_rng(3)
    base, new = np.exp(rng.normal(0, 0.1, 5)), np.exp(rng.normal(0.15, 0.1, 4))
    logs = np.log(np.concatenate([base, new]))
    observed = abs(logs[5:].mean() - logs[:5].mean())
    extreme = sum(abs(np.delete(logs, list(c)).mean() - logs[list(c)].mean()) >= observed - 1e-12
                  for c in combinations(range(9), 5))
    assert ratiotest.permutation_p(base, new) == pytest.approx(extreme / math.comb(9, 5))
    assert ratiotest.permutation_reaches(8, 8, 0.05 / 48) and not ratiotest.permutation_reaches(4, 4, 0.05 / 48)


def test_compare_keeps_the_larger_of_the_t_and_the_permutation_p(tmp_path):
    """Two modes (a rare slow mode, as real launches have at some sizes): the t test on 8 + 8 runs is far more
    sure than the runs allow; the permutation p is what they allow."""
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i in range(8):
        write_run(base, [result(p50=1.0 + 0.002 * i)], run_id=f"b{i}", time_utc=f"2026-11-01T0{i}:00:00Z")
        write_run(new, [result(p50=(1.0 if i < 4 else 1.5) + 0.002 * i + 0.001)], run_id=f"n{i}",
                  time_utc=f"2026-11-02T0{i}:00:00Z")
    row, = compare(load_table([base]), load_table([new]), rho=0.0).rows
    plain = ratiotest.run_test(row.baseline, row.new, 0.0)
    assert row.test.p == pytest.approx(max(plain.p, ratiotest.permutation_p(row.baseline, row.new)))
    assert row.test.p >= ratiotest.permutation_p(row.baseline, row.new) > plain.p


def test_one_run_against_several_is_a_prediction_test():
    base = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0]
    test = ratiotest.prediction_test(base, [1.5])
    logs = np.log(base)
    assert test.method == "prediction" and test.df == 7
    assert test.se == pytest.approx(logs.std(ddof=1) * math.sqrt(1 + 1 / 8))
    assert test.log_diff == pytest.approx(math.log(1.5) - logs.mean()) and test.p < 1e-6
    assert ratiotest.prediction_test([1.5], base).log_diff == pytest.approx(-test.log_diff)
    assert ratiotest.prediction_test(base[:2], [1.5]) is None  # 2 runs: no spread worth the name

"""The compare gate's statistics to the letter: each test's p-value against an independent computation (closed
forms, enumeration), the edge cases of flat and short sides, and the figures its text states (issue 40: the tests
that kill the mutants of ``gate.compare``, docs/mutation-testing.md). In process, a second or two."""

from __future__ import annotations

import math
from itertools import combinations
from statistics import NormalDist

import numpy as np
import pytest
from fixtures.gate.synth import base_latency, private_index, write_runs

from microbench.gate import compare_power as power
from microbench.gate import ranktest, ratiotest


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def t2_two_sided(t: float) -> float:
    """Student's t with 2 degrees of freedom, two-sided: 1 - |t| / sqrt(t^2 + 2) (a closed form)."""
    return 1 - abs(t) / math.sqrt(t * t + 2)


# ------------------------------------------------------------------------------------------------ ratiotest
def test_the_days_test_against_its_formula():
    days, new = [10.0, 12.0, 11.0], [14.0, 15.0]
    d, n = np.log(days), np.log(new)
    s2_days, s2_new = d.var(ddof=1), n.var(ddof=1) / 2
    se = math.sqrt(s2_days / 3 + max(s2_days, s2_new))
    test = ratiotest.block_test(days, new)
    assert test.method == "days" and test.df == 2
    assert test.log_diff == pytest.approx(n.mean() - d.mean()) and test.se == pytest.approx(se)
    assert test.p == pytest.approx(t2_two_sided((n.mean() - d.mean()) / se))
    assert ratiotest.block_test(days[:2], new) is None  # 2 days: no spread between days worth the name


def test_flat_days_are_certain_of_a_change_and_of_none():
    same = ratiotest.block_test([10.0, 10.0, 10.0], [10.0])
    assert (same.se, same.p, same.log_diff) == (0.0, 1.0, 0.0)
    moved = ratiotest.block_test([10.0, 10.0, 10.0], [11.0, 11.0])
    assert (moved.se, moved.p) == (0.0, 0.0) and moved.log_diff == pytest.approx(math.log(1.1))


# ------------------------------------------------------------------------------------------------ ranktest
def _midranks(values):
    order = sorted(values)
    return [sum(i + 1 for i, w in enumerate(order) if w == v) / order.count(v) for v in values]


@pytest.mark.parametrize("values,later", [([1, 1, 2, 3, 3, 3, 4], 3), ([5, 5, 5, 1, 2, 2, 9, 9], 4)])
def test_the_tied_p_is_every_choice_counted(values, later):
    ranks = _midranks(values)
    sums = [sum(ranks[i] for i in chosen) for chosen in combinations(range(len(values)), later)]
    for observed in sorted(set(sums)):
        low = sum(s <= observed + 1e-9 for s in sums) / len(sums)
        high = sum(s >= observed - 1e-9 for s in sums) / len(sums)
        assert ranktest.tied_p(np.array(ranks), later, observed) == pytest.approx(min(1.0, 2 * min(low, high)))


def test_the_normal_rank_p_with_ties_against_its_formula():
    m, n, ties, u = 6, 5, 6.0, 25.0
    var = m * n / 12 * ((m + n + 1) - ties / ((m + n) * (m + n - 1)))
    z = (abs(u - m * n / 2) - 0.5) / math.sqrt(var)
    assert ranktest.mann_whitney_p(u, m, n, ties) == pytest.approx(2 * (1 - NormalDist().cdf(z)))
    assert ranktest.mann_whitney_p(m * n / 2, m, n, ties) == 1.0


# ------------------------------------------------------------------------------------------------ compare_power
def test_the_pooled_spread_counts_every_side_with_two_runs_or_more():
    assert power.pooled_log_sd([1.0, math.e], [5.0]) == pytest.approx(math.sqrt(0.5))
    assert power.pooled_log_sd([5.0], [1.0, math.e]) == pytest.approx(math.sqrt(0.5))
    assert power.pooled_log_sd([1.0, math.e], [1.0, math.e ** 3]) == pytest.approx(math.sqrt((0.5 + 4.5) / 2))
    assert power.pooled_log_sd([5.0], [7.0]) is None


# ------------------------------------------------------------------------------------------------ compare_text
def test_the_header_states_the_error_rate_it_controls():
    from microbench.gate.compare import Comparison
    from microbench.gate.compare_text import header_lines

    for confidence, rate in ((0.95, "5"), (0.99, "1")):
        lines = header_lines(Comparison("latency", "p50", 0.05, confidence), [], [], None)
        assert lines[2].endswith(f"p adjusted by Holm over 0 rows: P(any false REGRESSION) <= {rate} %")
        assert lines[4].startswith(f"# REGRESSION: latency rises by more than 5 % and adjusted p <= "
                                   f"{1 - confidence:g};")


def test_changes_only_leaves_out_the_ok_rows_and_keeps_every_other(tmp_path, capsys):
    from microbench.cli import main as microbench_main

    sizes = (8, 64, 1 << 20)
    base = write_runs(tmp_path / "base.jsonl", 5, base_latency, benchmarks=("allreduce",), sizes=sizes, prefix="b")
    slower = lambda b, s: base_latency(b, s) * (1.3 if s == 1 << 20 else 1.0)  # noqa: E731
    new = write_runs(tmp_path / "new.jsonl", 5, slower, benchmarks=("allreduce",), sizes=sizes, prefix="n", day=2)
    assert microbench_main(["compare", "--baseline", str(base), "--new", str(new), "--changes-only"]) == 1
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert [r[0] for r in rows] == ["size", "1M"] and rows[1][-1] == "REGRESSION"


def test_a_permutation_reaches_a_level_its_smallest_p_equals():
    assert ratiotest.permutation_reaches(4, 4, 2 / 70) and not ratiotest.permutation_reaches(4, 4, 2 / 70 * 0.999)
    # C(20, 10) = 184,756 splits: 20,000 random ones, the smallest p 1 / 20,001
    assert ratiotest.permutation_reaches(10, 10, 1 / 20_001)
    assert not ratiotest.permutation_reaches(10, 10, 1 / 20_001 * 0.999)


# ------------------------------------------------------------------------------------------------ compare
def test_compare_and_compare_sides_share_their_defaults():
    import inspect

    from microbench.gate.compare import compare, compare_sides

    whole, sides = inspect.signature(compare).parameters, inspect.signature(compare_sides).parameters
    shared = [name for name in sides if name in whole and sides[name].default is not inspect.Parameter.empty]
    assert shared == ["metric", "stat", "threshold", "confidence", "by_day", "rho", "plan", "must_see"]
    assert [whole[n].default for n in shared] == [sides[n].default for n in shared]
    assert (whole["threshold"].default, whole["confidence"].default) == (0.05, 0.95)


# ------------------------------------------------------------------------------------------------ more ratiotest
def test_two_runs_a_side_alternating_are_pairs():
    assert ratiotest.alternate([0.0, 2.0], [1.0, 3.0]) and ratiotest.alternate([1.0, 3.0], [0.0, 2.0])
    assert not ratiotest.alternate([0.0, 1.0], [2.0, 3.0]) and not ratiotest.alternate([0.0], [1.0])


def test_the_paired_test_against_its_formula():
    base, new = [1.0, 2.0, 4.0], [1.1, 2.5, 4.1]
    d = np.log(np.array(new) / np.array(base))
    test = ratiotest.paired_test(base, new)
    se = d.std(ddof=1) / math.sqrt(3)
    assert test.method == "pairs" and test.df == 2 and test.se == pytest.approx(se)
    assert test.p == pytest.approx(t2_two_sided(d.mean() / se))


def test_welch_degrees_of_freedom_with_correlated_pairs():
    base, new, rho = [1.0, 1.05], [1.5, 1.7, 1.6, 1.9, 1.4, 1.65, 1.55, 1.8, 1.75, 1.45, 1.6, 1.7], 0.3
    b, n = np.log(base), np.log(new)
    fb, fn = ratiotest.ar1_factor(2, rho), ratiotest.ar1_factor(12, rho)
    assert fb == pytest.approx(1.3) and fn == pytest.approx(1 + 2 * sum((1 - k / 12) * rho ** k for k in range(1, 12)))
    vb, vn = fb * b.var(ddof=1) / 2, fn * n.var(ddof=1) / 12
    eb, en = 2 / fb, 12 / fn  # effective runs: under 2 on the baseline side
    assert eb < 2 and eb + en - 2 > 3
    df = (vb + vn) ** 2 / (vb ** 2 / (eb - 1) + vn ** 2 / (en - 1))
    test = ratiotest.run_test(base, new, rho)
    assert 2 < df < eb + en - 2 and test.df == pytest.approx(df)  # neither clamp binds
    assert test.se == pytest.approx(math.sqrt(vb + vn))


def test_the_run_correlation_against_its_formula():
    series = [[1.0, 2.0, 4.0, 3.0], [5.0, 6.0, 5.5]]
    num = den = bias = 0.0
    weight = 0
    for values in series:
        res = np.log(values) - np.log(values).mean()
        num += res[:-1] @ res[1:]
        den += (res @ res) * (len(res) - 1) / len(res)
        bias += (len(res) - 1) / len(res)
        weight += len(res) - 1
    expected = min(0.9, max(0.0, num / den + bias / weight))
    assert 0 < expected < 0.9
    assert ratiotest.run_correlation(series + [[7.0, 8.0]]) == pytest.approx(expected)  # 2 runs: skipped


def test_the_days_test_takes_the_new_runs_spread_where_it_is_wider():
    days, new = [10.0, 10.2, 10.1], [8.0, 14.0, 11.0]
    d, n = np.log(days), np.log(new)
    s2_new = n.var(ddof=1) / 3
    assert s2_new > d.var(ddof=1)
    assert ratiotest.block_test(days, new).se == pytest.approx(math.sqrt(d.var(ddof=1) / 3 + s2_new))


def test_a_flat_many_side_predicts_exactly():
    moved = ratiotest.prediction_test([1.0, 1.0, 1.0], [2.0])
    assert (moved.se, moved.p, moved.method) == (0.0, 0.0, "prediction")
    same = ratiotest.prediction_test([1.0, 1.0, 1.0], [1.0])
    assert (same.se, same.p) == (0.0, 1.0)


def test_the_sampled_permutation_p_counts_the_observed_split():
    rng = np.random.default_rng(5)
    base, new = np.exp(rng.normal(0, 0.01, 10)), np.exp(rng.normal(1, 0.01, 10))  # C(20, 10): sampled
    p = ratiotest.permutation_p(base, new)
    assert 1 / 20_001 <= p < 1e-3


# ------------------------------------------------------------------------------------------------ tdist, ranktest
def test_the_t_density_and_the_beta_ends():
    from microbench.gate import tdist

    assert tdist._density(0.0, 1.0) == pytest.approx(1 / math.pi)  # Cauchy
    assert tdist._density(1.5, 2.0) == pytest.approx(1 / (2 + 1.5 ** 2) ** 1.5)
    assert tdist.incomplete_beta(2.0, 0.5, 0.0) == 0.0 and tdist.incomplete_beta(2.0, 0.5, 1.0) == 1.0


def test_a_tied_table_past_its_size_is_not_built():
    ranks = np.arange(1, 601, dtype=float)  # 61 x 68,461 cells: over MAX_TIED_CELLS
    assert ranktest.tied_p(ranks, 60, 1000.0) is None


# ------------------------------------------------------------------------------------------------ compare_power
def test_power_of_the_central_t_is_its_tail():
    from microbench.gate import tdist

    c = tdist.quantile(0.95, 4)
    assert power.noncentral_power(0.0, c, 4) == pytest.approx(0.05, abs=5e-4)
    assert power.noncentral_power(0.0, tdist.quantile(0.975, 10), 10) == pytest.approx(0.025, abs=5e-4)


@pytest.mark.parametrize("c", [0.5, 1.0, 3.0, 10.0, 30.0])
def test_power_at_one_and_two_degrees_of_freedom_is_the_closed_form_tail(c):
    """Two runs a side can leave Welch 1 to 2 degrees of freedom: P(T > c) is 1/2 - atan(c) / pi at 1 (Cauchy)
    and 1/2 - c / (2 sqrt(2 + c^2)) at 2. A midpoint rule on V, whose density is unbounded at 0 there, gave 0.229
    for 0.25 at c = 1 and 0.002 for 0.032 at c = 10."""
    assert power.noncentral_power(0.0, c, 1) == pytest.approx(0.5 - math.atan(c) / math.pi, abs=5e-4)
    assert power.noncentral_power(0.0, c, 2) == pytest.approx(0.5 - c / (2 * math.sqrt(2 + c * c)), abs=5e-4)


@pytest.mark.parametrize("df", [1e4, 1e7])
def test_power_at_many_degrees_of_freedom_is_the_normal_tail(df):
    """With df large V / df is 1: P(T > c) for noncentrality s is Phi(s - c), the grid still on the chi's peak."""
    for shift in (0.0, 1.0, 3.0, 5.0):
        assert power.noncentral_power(shift, 2.0, df) == pytest.approx(
            0.5 * math.erfc((2.0 - shift) / math.sqrt(2)), abs=2e-3)


def test_a_flat_side_detects_any_change_past_the_threshold_and_none_within():
    thr = math.log(1.05)
    assert power.detection_probability(0.1, 0.0, 4, 1, 0.05, thr) == 1.0
    assert power.detection_probability(0.01, 0.0, 4, 1, 0.05, thr) == 0.0


def test_two_runs_a_side_can_be_enough():
    assert power.runs_needed(0.001, 0.0, 1, 0.05, math.log(1.05), math.log(2.0)) == 2


def test_percentages_past_1000_say_only_that():
    assert power.percent(10.0) == "1000 %" and power.percent(10.05) == ">1000 %" and power.percent(None) == "-"


def test_verdicts_within_the_threshold_are_ok_for_bandwidth_too():
    from microbench.gate.compare import IMPROVED_UNCONFIRMED, OK, verdict

    assert verdict(1.0, None, 0.05, 0.05, True) == OK and verdict(1.02, 0.001, 0.05, 0.05, True) == OK
    assert verdict(1.06, None, 0.05, 0.05, True) == IMPROVED_UNCONFIRMED


# ------------------------------------------------------------------------------------------------ the text
def test_the_text_notes_what_only_one_side_has_and_what_to_doubt(tmp_path, capsys):
    """New runs older than the baseline's, a configuration only the baseline measured, a launch-bound record:
    each said once, in words, and the per-benchmark geometric means with --table."""
    from fixtures.gate.synth import JITTER, result, write_run

    from microbench.cli import main as microbench_main
    from microbench.results.metrics import LAUNCH_BOUND_ADVICE_SHORT

    bound = {"host_us_per_call": 41.0, "device_us_per_call": 43.0, "bound": True}
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for i in range(5):
        write_run(base, [result(size=s, p50=base_latency("allreduce", s) * JITTER[i]) for s in (8, 64, 1 << 20)],
                  run_id=f"b{i}", time_utc=f"2026-11-02T0{i}:00:00Z")
        write_run(new, [result(size=8, p50=base_latency("allreduce", 8) * 1.1 * JITTER[i],
                               **({"launch": bound} if i == 0 else {})),
                        result(size=64, p50=base_latency("allreduce", 64) * 1.1 * JITTER[i])],
                  run_id=f"n{i}", time_utc=f"2026-11-01T0{i}:00:00Z")
    assert microbench_main(["compare", "--baseline", str(base), "--new", str(new), "--table"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == "# CI: ratio of geometric means at 97.5 % each (all rows together >= 95 %)"
    assert [line.split()[0] for line in lines[8:10]] == ["8*", "64"]
    assert lines[10:] == [
        "",
        "# per benchmark: geometric mean of the ratios across its sizes (new / baseline)",
        "benchmark  sizes  geomean ratio           range  verdicts",
        "allreduce      2          1.100  1.100 .. 1.100  2 REGRESSION",
        "# note: 1 configuration(s) only in baseline: allreduce 1M",
        f"# note: * {LAUNCH_BOUND_ADVICE_SHORT}: allreduce 8",
        "# could see: the smallest latency rise flagged with 90 % probability (at the adjusted level, as the only "
        "change; from each row's own spread and runs), per benchmark as median / worst over its sizes",
        "#   allreduce: 7 % / 7 %",
        "# note: the new runs are older than the baseline runs (check --baseline and --new)",
        "# 2 configuration(s) compared: 2 REGRESSION -> FAIL"]


def test_a_lookback_judges_the_new_runs_against_the_baselines_days(tmp_path):
    from fixtures.gate.synth import result, write_run

    from microbench.gate.compare import compare
    from microbench.results.load import load_table

    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    levels = {1: (10.0, 10.4), 2: (10.8, 11.0), 3: (9.9, 10.1)}  # two runs a day
    for day, values in levels.items():
        for k, value in enumerate(values):
            write_run(base, [result(p50=value)], run_id=f"b{day}{k}", time_utc=f"2026-11-0{day}T0{k}:00:00Z")
    for k, value in enumerate((12.0, 12.5)):
        write_run(new, [result(p50=value)], run_id=f"n{k}", time_utc=f"2026-11-05T0{k}:00:00Z")
    row, = compare(load_table([base]), load_table([new]), by_day=True).rows
    assert row.days == 3 and row.test.method == "days"
    expected = ratiotest.block_test([np.median(v) for v in levels.values()], [12.0, 12.5], 0.0)
    assert (row.test.log_diff, row.test.se) == pytest.approx((expected.log_diff, expected.se))


def test_runs_needed_counts_the_correlation_of_back_to_back_runs():
    from microbench.gate import tdist  # noqa: F401

    sd, rho, thr, change = 0.1, 0.4, math.log(1.05), math.log(1.3)

    def enough(n):
        f = ratiotest.ar1_factor(n, rho)
        se = math.sqrt(2 * f * sd * sd / n)
        return power.detectable_log(se, max(1.0, 2 * (n / f - 1)), 3, 0.05, thr) <= change

    expected = next(n for n in range(2, 1000) if enough(n))
    assert expected > 2 and power.runs_needed(sd, rho, 3, 0.05, thr, change) == expected
    assert power.runs_needed(sd, 0.0, 3, 0.05, thr, change) < expected


def test_two_pairs_are_a_paired_test():
    test = ratiotest.paired_test([1.0, 2.0], [1.1, 2.4])
    assert test.method == "pairs" and test.df == 1.0 and 0 < test.p < 1
    assert ratiotest.paired_test([1.0], [1.1]) is None


def test_the_t_p_where_the_beta_continued_fraction_turns_around():
    from microbench.gate import tdist

    for t in (0.1, 0.5, 1.0, 3.0, 10.0):  # small t: x = 2 / (2 + t^2) past (a + 1) / (a + b + 2)
        assert tdist.two_sided_p(t, 2.0) == pytest.approx(t2_two_sided(t), rel=1e-9)

"""The history gate to the letter: which steps fail it and which direction is worse, which columns are judged or
too short, the runs a series needs, and the step search's arithmetic at its edges (issue 40: the tests that kill
the mutants of ``gate.history``, docs/mutation-testing.md). In process, a second or two."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from fixtures.gate.synth import private_index, result, write_run

from microbench.gate import compare_power, ranktest, steps
from microbench.gate.history import FoundStep, build
from microbench.gate.ratiotest import robust_logs
from microbench.results.load import load_table


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def test_only_an_unexplained_step_for_the_worse_fails():
    step = steps.Step(6, 1.0, 2.0, 0.01)
    for worse, changed, machine in product((True, False), ([], ["MPI: a -> b"]), (None, "machine: busier")):
        found = FoundStep(0, step, 6, 5, changed, worse, machine)
        assert found.fails is (worse and not changed and not machine), (worse, changed, machine)
        assert found.explained is bool(changed)


def _history(tmp_path, values, metric="latency", stat="p50"):
    path = tmp_path / "runs.jsonl"
    for i, v in enumerate(values):
        write_run(path, [result(p50=v)], run_id=f"r{i:02d}", time_utc=f"2026-11-{i + 1:02d}T02:00:00Z")
    hist = build(load_table([path]), [8], metric, stat)
    hist.find_steps(0.05, 0.05)
    return hist


@pytest.mark.parametrize("metric,stat,level,worse", [
    ("latency", "p50", 1.5, True),  # latency rises by half: worse
    ("latency", "p50", 0.5, False),  # halves: better
    ("busbw", "avg", 1.5, False),  # latency up 1.5: bandwidth falls ... (the record's busbw follows its avg)
])
def test_a_step_is_worse_in_the_metrics_bad_direction(tmp_path, metric, stat, level, worse):
    hist = _history(tmp_path, [10.0] * 5 + [10.0 * level] * 5, metric, stat)
    found, = hist.steps
    assert found.run == 5 and found.previous == 4 and found.changed == []
    expected = worse if metric == "latency" else True  # a bandwidth fall is worse
    assert found.worse is expected and found.fails is expected
    assert hist.judged == [0] and hist.too_short == {} and hist.findable == {}
    assert hist.outcome(0.25)[0] == ("FAIL" if expected else "PASS")


def test_a_short_column_is_not_judged_and_a_quiet_one_says_what_it_could_find(tmp_path):
    short = _history(tmp_path / "a", [10.0, 11.0, 10.5, 10.2])
    assert short.judged == [] and short.too_short == {0: 6} and short.findable == {} and short.steps == []
    quiet = _history(tmp_path / "b", [10.0, 10.3, 9.9, 10.1, 10.2, 9.8, 10.0, 10.1])
    assert quiet.judged == [0] and quiet.steps == [] and quiet.too_short == {}
    assert quiet.findable[0] == pytest.approx(steps.findable_ratio(quiet.column(0)[1], 0.05, 1, 3, 0.05))


# ------------------------------------------------------------------------------------------------ steps
def test_split_points_and_what_ranks_alone_can_reach():
    assert steps.split_points(10) == 5 and steps.split_points(5) == 0
    assert steps.can_reach(6, 1.0, logs=False) and not steps.can_reach(6, 0.05, logs=False)  # 3 v 3: p 0.1


@pytest.mark.parametrize("alpha,series", [(0.05, 1), (0.05, 5), (0.01, 1), (0.001, 2)])
def test_the_runs_a_series_needs_is_the_first_that_can_reach(alpha, series):
    first = next(n for n in range(6, 100) if steps.can_reach(n, alpha, series, 3, logs=False))
    assert steps.runs_needed(alpha, series, 3, logs=False) == first


def test_the_findable_step_against_its_formula():
    values = [10.0, 10.4, 9.7, 10.1, 10.3, 9.9, 10.2]
    logs = robust_logs(np.array(values))
    se = float(logs.std(ddof=1)) * math.sqrt(1 / 3 + 1 / 4)
    d = compare_power.detectable_log(se, 5, steps.split_points(7) * 2, 0.05, math.log1p(0.05))
    assert steps.findable_ratio(values, 0.05, 2, 3, 0.05) == pytest.approx(math.exp(d))


def test_the_median_of_an_even_count_and_near_the_largest_float():
    assert steps._median(np.array([4.0, 1.0, 3.0, 2.0])) == 2.5
    assert steps._median(np.array([1.7e308, 1.0e308])) == pytest.approx(1.35e308)
    assert steps._median(np.array([1.0e308, 1.7e308, 1.2e308, 1.6e308])) == pytest.approx(1.4e308)


def test_a_step_of_exactly_the_minimum_is_kept_and_a_ratio_not_a_product_decides():
    at, = steps.detect([4.0] * 6 + [5.0] * 6, min_step=0.25)
    assert (at.index, at.before, at.after) == (6, 4.0, 5.0)
    up, = steps.detect([0.5] * 6 + [2.0] * 6, min_step=0.05)  # 0.5 x 2 = 1: a product would see no step
    assert (up.index, up.ratio) == (6, 4.0)


def test_a_segment_whose_earlier_median_is_zero_is_not_divided_by():
    assert steps.best_split(np.array([0.0] * 5 + [5.0] * 5), 0.05, 0.05, 3) is None


def test_the_t_on_logs_of_two_equal_halves_sees_nothing():
    assert steps._t_log_p(np.log(np.array([1.0, 2.0, 3.0, 1.0, 2.0, 3.0])), 3) == 1.0


def test_a_long_tied_series_is_judged_by_the_normal_rank_p_with_its_tie_correction():
    rng = np.random.default_rng(11)
    values = np.round(np.r_[rng.normal(10, 1, 110), rng.normal(10.6, 1, 110)], 0)  # whole numbers: ties
    first, = steps.detect(values, min_step=0.05, alpha=0.05)
    assert first.test == steps.RANK and 1e-6 < first.p < 0.01
    c, n = first.index, len(values)
    left, right = values[:c], values[c:]
    u = float(sum((r > e) + 0.5 * (r == e) for r in right for e in left))
    _, counts = np.unique(values, return_counts=True)
    ties = float(np.sum(counts ** 3 - counts))
    assert c * (n - c) > ranktest.EXACT_LIMIT and ties > 0
    assert first.p == pytest.approx(min(1.0, ranktest.mann_whitney_p(u, c, n - c, ties) * steps.split_points(n)),
                                    rel=1e-9)


def test_a_split_is_placed_within_three_candidates_of_the_most_significant():
    seg = np.array([1.0] * 8 + [5.0] * 4)  # the best fit splits at 8: candidate 5, four from candidate 1
    assert steps._place(steps._Halves(seg), np.arange(3, 10), 1) == 4
    assert steps._place(steps._Halves(seg), np.arange(3, 10), 2) == 5


def _rank_scores(seg: list[float], min_segment: int = 3) -> dict[int, float]:
    """The Mann-Whitney normal score |U - k m / 2| / sqrt(k m (n + 1) / 12) of each split k (m = n - k runs
    after it), U counted pair by pair (a tie a half): the order in which ``best_split`` tries splits."""
    n, out = len(seg), {}
    for k in range(min_segment, n - min_segment + 1):
        m = n - k
        u = sum((r > e) + 0.5 * (r == e) for r in seg[k:] for e in seg[:k])
        out[k] = abs(u - k * m / 2) / math.sqrt(k * m * (n + 1) / 12)
    return out


@pytest.mark.parametrize("first,second,levels,n", [
    (4, 7, (10.0, 20.0, 50.0), 12),  # scores 2.9 and 2.97 (whole parts equal: a floored score ties them)
    (3, 17, (10.0, 30.0, 20.0), 28),  # k m odd at one of them: a floored mean moves its score
    (12, 25, (10.0, 5.0, 15.0), 28),  # a floored variance moves one score more than another
])
def test_of_two_steps_close_in_significance_the_more_significant_is_taken_first(first, second, levels, n):
    seg = [levels[0]] * first + [levels[1]] * (second - first) + [levels[2]] * (n - second)
    scores = _rank_scores(seg)
    top = max(scores.values())
    best = min(k for k, score in scores.items() if score > top - 1e-12)  # of equal scores, the earliest
    assert best in (first, second)
    split, p, test = steps.best_split(np.array(seg), 0.05, 0.05, 3)
    assert (split, test) == (best, steps.RANK) and p <= 0.05


def test_a_long_series_of_many_judged_takes_its_most_significant_split_first():
    # 2,500 runs, one step of 20 % at the middle, judged as one of 100,000 series: the two splits leaving 3 runs
    # on a side cannot reach the level by ranks (t on logs judges them), so splits are tried in the order of
    # their normal p, which underflows to 0 at 292 middle splits: among those the highest score goes first,
    # the true step (the lowest first adds a false step 138 runs after it)
    n = 2500
    values = np.r_[np.full(n // 2, 10.0), np.full(n - n // 2, 12.0)] * (1 + 0.02 * np.sin(np.arange(n) * 0.7))
    found = steps.detect(values, series=100_000)
    assert [(s.index, s.test) for s in found] == [(n // 2, steps.RANK)]


def test_a_split_ranks_can_just_reach_is_judged_by_ranks():
    # 4 runs against 4: complete separation has p = 2 / C(8, 4) = 2/70; with alpha 3 x 2/70 over the 3 split
    # points, the middle split's level is 2/70 to the bit, so ranks can reach it and judge it (t only where
    # ranks cannot reach the level at all)
    alpha = 3 * (2 / 70)
    assert ranktest.smallest_p(4, 4) == alpha / 3
    found, = steps.detect([10.0, 10.1, 10.2, 10.3, 20.0, 20.1, 20.2, 20.3], alpha=alpha)
    assert (found.index, found.test) == (4, steps.RANK) and found.p == pytest.approx(alpha, rel=1e-12, abs=0)


def test_a_tied_split_of_exactly_the_exact_limit_is_counted_exactly():
    # 100 runs against 100 (10,000 pairs, the exact count's limit), ties within each side, none across: the exact
    # p of complete separation, 2 / C(200, 100), where the normal approximation would underflow to 0
    left = np.array(([9.0, 10.0, 11.0] * 34)[:100])
    found, = steps.detect(np.r_[left, left + 3])
    assert 100 * 100 == ranktest.EXACT_LIMIT and (found.index, found.test) == (100, steps.RANK)
    assert found.p == pytest.approx(2 / math.comb(200, 100) * steps.split_points(200), rel=1e-9, abs=0)

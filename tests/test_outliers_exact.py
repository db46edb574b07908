"""The outlier rule of the diagnostics, exact and in-process (issue 40: these kill the mutants of
measure/outliers.py that test_pairs.py's cases do not notice; docs/mutation-testing.md)."""

from __future__ import annotations

import pytest

from microbench.measure import outliers as o
from microbench.measure.outliers import (
    OUTLIER_Z,
    Outlier,
    flag_matrix,
    flag_outliers,
    majority,
    median,
    median_matrix,
    node_outliers,
    outliers,
)


def _square(n, value=2.0):
    return [[None if i == j else value for j in range(n)] for i in range(n)]


def test_median_of_odd_and_even_counts_and_of_none():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median(x for x in (5.0,)) == 5.0
    assert median([1.0, 2.0]) == 1.5
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_the_rule_s_constants():
    assert OUTLIER_Z == 3.5 and o._MAD_FLOOR == 0.05


def test_z_and_threshold_to_the_bit():
    # median 10, deviations 0,0,1,1,10: MAD 1 (above the floor 0.5); z of 20 = 0.6745 x 10 / 1
    values = [9.0, 10.0, 10.0, 11.0, 20.0]
    found, rule = flag_outliers(values, higher_is_worse=True)
    assert found == [(4, 0.6745 * 10.0 / 1.0)]
    assert rule == {"median": 10.0, "mad": 1.0, "z_limit": 3.5, "threshold": 10.0 + 3.5 * 1.0 / 0.6745}
    low, rule = flag_outliers([11.0, 10.0, 10.0, 9.0, 0.0], higher_is_worse=False)
    assert low == [(4, 0.6745 * -10.0 / 1.0)] and rule["threshold"] == 10.0 - 3.5 * 1.0 / 0.6745


def test_the_mad_floor_is_five_percent_of_the_median():
    # all equal but one: MAD 0, floored to 0.05 x 100 = 5; 120 is z = 0.6745 x 20 / 5 = 2.698, not flagged
    found, rule = flag_outliers([100.0] * 6 + [120.0], higher_is_worse=True)
    assert rule["mad"] == 5.0 and found == []
    found, _ = flag_outliers([100.0] * 6 + [130.0], higher_is_worse=True)  # z = 4.047
    assert found == [(6, 0.6745 * 30.0 / 5.0)]
    found, _ = flag_outliers([-100.0] * 6 + [-70.0], higher_is_worse=True)  # the floor of a negative median
    assert found == [(6, 0.6745 * 30.0 / 5.0)]


def test_a_zero_mad_flags_nothing_and_does_not_divide():
    found, rule = flag_outliers([0.0, 0.0, 0.0, 5.0], higher_is_worse=True)
    assert found == [] and rule["mad"] == 0.0
    # z is 0 then, whatever the limit and the direction
    assert flag_outliers([0.0, 0.0, 0.0, 5.0], True, z_limit=0.5)[0] == []
    assert flag_outliers([0.0, 0.0, 0.0, -5.0], False, z_limit=0.5)[0] == []


def test_a_value_exactly_at_the_limit_is_not_flagged():
    values = [9.0, 10.0, 10.0, 11.0, 20.0]
    at = 0.6745 * (20.0 - 10.0) / 1.0
    assert flag_outliers(values, True, z_limit=at)[0] == []
    assert flag_outliers(values, True, z_limit=at - 1e-9)[0] == [(4, at)]
    assert flag_outliers([11.0, 10.0, 10.0, 9.0, 0.0], False, z_limit=at)[0] == []


def test_cells_are_the_upper_triangle_only():
    m = _square(4)
    m[1][1] = 100.0  # a diagonal cell is no link
    m[2][0] = 100.0  # the lower triangle mirrors the upper one and is not read
    m[0][3] = 9.0
    found, rule = outliers(m, higher_is_worse=True)
    assert found == [Outlier(0, 3, 9.0, 0.6745 * 7.0 / 0.1)] and rule["cells"] == 6
    assert rule["median"] == 2.0 and rule["mad"] == pytest.approx(0.1)


def test_three_cells_are_enough():
    found, rule = outliers(_square(3), higher_is_worse=True)
    assert found == [] and rule["cells"] == 3 and rule["median"] == 2.0
    m = _square(3)
    m[0][1] = None
    assert outliers(m, True)[1] == {"median": None, "mad": None, "z_limit": 3.5, "cells": 2}
    m[0][2] = None
    assert outliers(m, True)[1] == {"median": None, "mad": None, "z_limit": 3.5, "cells": 1}


def test_an_outlier_is_a_value():
    with pytest.raises(AttributeError):
        Outlier(0, 1, 2.0, 5.0).z = 0.0


def test_bandwidth_cells_are_judged_by_their_reciprocals():
    m = _square(4, 10.0)
    m[1][3] = 2.0
    found, rule = outliers(m, higher_is_worse=False)
    # reciprocals: 0.1 x 5 and 0.5; median 0.1, MAD floored to 0.005; z = -0.6745 x 0.4 / 0.005
    assert [(f.i, f.j, f.value) for f in found] == [(1, 3, 2.0)]
    assert found[0].z == -(0.6745 * (0.5 - 0.1) / (0.05 * 0.1))
    assert rule["median"] == 1.0 / 0.1 and rule["mad"] == 0.05 * 0.1
    assert rule["threshold"] == 1.0 / (0.1 + 3.5 * (0.05 * 0.1) / 0.6745)
    assert rule["mad_of"] == "the reciprocals of the cells" and rule["cells"] == 6


def test_bandwidths_below_one_gb_s_are_live_links():
    m = _square(4, 0.5)
    m[0][1] = 0.1
    found, rule = outliers(m, higher_is_worse=False)
    assert rule["median"] == 0.5 and [(f.i, f.j) for f in found] == [(0, 1)]


def test_a_dead_bandwidth_link_is_flagged():
    m = _square(4, 10.0)
    m[0][2] = 0.0
    found, _ = outliers(m, higher_is_worse=False)
    assert [(f.i, f.j) for f in found] == [(0, 2)] and found[0].z == float("-inf")


def test_bandwidth_rule_of_a_median_of_dead_links():
    m = _square(4, 0.0)
    _, rule = outliers(m, higher_is_worse=False)
    assert rule["median"] == 0.0  # 1 / inf: the reciprocal median is infinite, bandwidth zero


def test_a_node_s_row_median_reads_its_row_without_its_diagonal():
    m = _square(4)
    for j in (0, 1, 3):
        m[2][j] = m[j][2] = 6.0
    m[2][2] = 100.0  # a diagonal value is no link
    found, rule = node_outliers(m, higher_is_worse=True)
    assert found == [(2, 6.0, 0.6745 * 4.0 / 0.1)] and rule["nodes"] == 4 and rule["median"] == 2.0


def test_four_nodes_are_enough_and_a_node_with_no_links_is_left_out():
    assert node_outliers(_square(4), True)[1]["nodes"] == 4 and node_outliers(_square(4), True)[1]["median"] == 2.0
    m = _square(4)
    m[3] = [None] * 4
    assert node_outliers(m, True)[1] == {"median": None, "mad": None, "z_limit": 3.5, "nodes": 3}


@pytest.mark.parametrize("passes, need", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_a_strict_majority(passes, need):
    assert majority(passes) == need


def test_median_matrix_cellwise():
    a = [[None, 1.0, None], [1.0, None, 4.0], [None, 4.0, None]]
    b = [[None, 3.0, None], [3.0, None, None], [None, 6.0, None]]
    c = [[None, 2.0, None], [2.0, None, None], [None, 9.0, None]]
    assert median_matrix([a, b, c]) == [[None, 2.0, None], [2.0, None, 4.0], [None, 6.0, None]]


def _slow_link(value, n=5):
    m = _square(n)
    m[1][3] = m[3][1] = value
    return m


def test_flag_matrix_as_the_record_holds_it():
    labels = [f"n{i}" for i in range(5)]
    out = flag_matrix(_slow_link(9.0), labels, True)
    z = 0.6745 * 7.0 / 0.1
    assert out["outliers"] == [{"pair": [1, 3], "labels": ["n1", "n3"], "value": 9.0, "z": round(z, 2)}]
    assert out["outlier_rule"]["statistic"] == "modified z-score 0.6745 (x - median) / MAD over all pairs"
    assert out["outlier_rule"]["direction"] == "above" and "passes" not in out["outlier_rule"]
    assert out["node_outliers"] == [] and out["node_outlier_rule"]["direction"] == "above"
    assert flag_matrix(_slow_link(0.5), labels, False)["outlier_rule"]["direction"] == "below"
    one = flag_matrix(_slow_link(9.0), labels, True, repeats=[_slow_link(2.0)])  # one pass: no vote
    assert [x["pair"] for x in one["outliers"]] == [[1, 3]] and "passes" not in one["outlier_rule"]


def test_a_link_in_a_strict_majority_of_passes_is_flagged():
    labels = [f"n{i}" for i in range(5)]
    two_of_three = [_slow_link(9.0), _slow_link(8.0), _square(5)]
    out = flag_matrix(median_matrix(two_of_three), labels, True, repeats=two_of_three)
    assert [x["pair"] for x in out["outliers"]] == [[1, 3]]
    assert out["outlier_rule"]["statistic"].endswith(", in the median of the passes and in a majority of them")
    assert (out["outlier_rule"]["passes"], out["outlier_rule"]["passes_needed"]) == (3, 2)
    two_of_four = [_slow_link(9.0), _slow_link(8.0), _slow_link(8.5), _square(5)]
    assert [x["pair"] for x in flag_matrix(median_matrix(two_of_four), labels, True,
                                           repeats=two_of_four)["outliers"]] == [[1, 3]]
    two_of_four[2] = _square(5)
    out = flag_matrix(_slow_link(9.0), labels, True, repeats=two_of_four)
    assert out["outliers"] == [] and out["outlier_rule"]["passes_needed"] == 3


def test_two_passes_must_both_flag():
    labels = [f"n{i}" for i in range(5)]
    split = [_slow_link(9.0), _square(5)]
    out = flag_matrix(_slow_link(9.0), labels, True, repeats=split)
    assert out["outliers"] == [] and (out["outlier_rule"]["passes"], out["outlier_rule"]["passes_needed"]) == (2, 2)
    both = [_slow_link(9.0), _slow_link(8.0)]
    assert [x["pair"] for x in flag_matrix(median_matrix(both), labels, True, repeats=both)["outliers"]] == [[1, 3]]


def test_a_node_in_a_strict_majority_of_passes_is_flagged():
    def slow_node(value):
        m = _square(5)
        for j in (0, 1, 3, 4):
            m[2][j] = m[j][2] = value
        return m
    labels = [f"n{i}" for i in range(5)]
    passes = [slow_node(9.0), slow_node(8.0), slow_node(7.3), _square(5)]
    out = flag_matrix(median_matrix(passes), labels, True, repeats=passes)
    assert out["node_outliers"] == [{"index": 2, "label": "n2", "row_median": 7.65, "z": 38.11}]
    assert out["node_outlier_rule"]["statistic"] == "the same rule over each participant's row median"
    assert (out["node_outlier_rule"]["passes"], out["node_outlier_rule"]["passes_needed"]) == (4, 3)
    passes[2] = _square(5)
    assert flag_matrix(median_matrix(passes), labels, True, repeats=passes)["node_outliers"] == []

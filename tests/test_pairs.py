"""The pairwise link test: the tournament schedule, outlier rule, and a real 4-rank matrix."""

from __future__ import annotations

import itertools

import pytest

from microbench.cluster.nodes import choose_participants
from microbench.measure.outliers import node_outliers, outliers
from microbench.run.diagnostics.pairs import round_robin, serial

from conftest import microbench, results_of


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    members = list(range(10, 10 + n))
    rounds = round_robin(members)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [pair for r in rounds for pair in r]
    assert sorted(seen) == sorted(itertools.combinations(members, 2))
    for r in rounds:
        flat = [x for pair in r for x in pair]
        assert len(flat) == len(set(flat))  # nobody in two pairs of one round
        assert len(r) == n // 2


def test_fewer_than_two_participants_have_no_rounds():
    assert round_robin([]) == [] and round_robin([7]) == []
    assert serial([]) == [] and serial([7]) == []


def test_serial_is_one_pair_per_round():
    rounds = serial([0, 1, 2, 3])
    assert len(rounds) == 6 and all(len(r) == 1 for r in rounds)


def test_participants_are_hosts_across_hosts_else_ranks():
    assert choose_participants(["a", "a", "b", "b", "c"]) == ([0, 2, 4], ["a", "b", "c"], "host")
    assert choose_participants(["a", "a", "a"]) == ([0, 1, 2], ["rank 0", "rank 1", "rank 2"], "rank")


def _matrix(n, value, bad=None, bad_value=None):
    m = [[None if i == j else value * (1 + 0.01 * ((i + j) % 3)) for j in range(n)] for i in range(n)]
    if bad:
        i, j = bad
        m[i][j] = m[j][i] = bad_value
    return m


def test_one_slow_link_is_flagged():
    found, rule = outliers(_matrix(6, 2.0, bad=(1, 4), bad_value=6.0), higher_is_worse=True)
    assert [(o.i, o.j) for o in found] == [(1, 4)]
    assert rule["cells"] == 15 and rule["median"] == pytest.approx(2.02)
    assert found[0].value > rule["threshold"]


def test_one_weak_bandwidth_link_is_flagged_low():
    found, _ = outliers(_matrix(6, 12.0, bad=(0, 5), bad_value=3.0), higher_is_worse=False)
    assert [(o.i, o.j) for o in found] == [(0, 5)]
    found, _ = outliers(_matrix(6, 12.0, bad=(0, 5), bad_value=30.0), higher_is_worse=False)
    assert found == []  # faster than the rest is not a fault


def test_uniform_matrix_flags_nothing():
    assert outliers(_matrix(8, 1.0), higher_is_worse=True)[0] == []
    assert outliers([[None, 1.0], [1.0, None]], higher_is_worse=True)[1]["median"] is None  # too few pairs


def test_a_bad_node_is_flagged_by_its_row():
    # node 2 of 4 is slow on all three of its links: half the cells are bad, so no single link stands out
    m = _matrix(4, 2.0)
    for j in (0, 1, 3):
        m[2][j] = m[j][2] = 6.0
    assert outliers(m, higher_is_worse=True)[0] == []
    found, rule = node_outliers(m, higher_is_worse=True)
    assert [(i, row_median) for i, row_median, _ in found] == [(2, 6.0)] and rule["nodes"] == 4
    assert node_outliers(_matrix(6, 2.0, bad=(1, 4), bad_value=6.0), higher_is_worse=True)[0] == []  # one link
    assert node_outliers(_matrix(3, 2.0), higher_is_worse=True)[1]["median"] is None  # too few nodes


@pytest.mark.parametrize("schedule", ["round-robin", "serial"])
def test_pairs_matrix_on_four_ranks(schedule, tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["run", "--np", "4", "pairs", "-m", "8,64K", "-i", "20", "-x", "2", "--out", str(out)]
    if schedule == "serial":
        args.append("--serial")
    proc = microbench(*args, timeout=180)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["metric"], r["size_bytes"]) for r in res] == [("pairs", "latency", 8),
                                                                           ("pairs", "bandwidth", 65536)]
    for r in res:
        m = r["matrix"]
        assert len(m) == 4 and all(len(row) == 4 for row in m)
        for i in range(4):
            assert m[i][i] is None
            for j in range(4):
                if i != j:
                    assert m[i][j] == m[j][i] and m[i][j] > 0
        assert r["labels"] == ["rank 0", "rank 1", "rank 2", "rank 3"] and r["unit"] == "rank"
        assert r["schedule"] == schedule and r["rounds"] == (3 if schedule == "round-robin" else 6)
        assert r["matrix_unit"] == ("us" if r["metric"] == "latency" else "GB/s")
        assert isinstance(r["outliers"], list) and r["outlier_rule"]["cells"] == 6
        assert isinstance(r["node_outliers"], list) and r["node_outlier_rule"]["nodes"] == 4
        assert r["latency_us"]["samples"] == 6
        # two passes by default (issue 39): the matrix is their cellwise median, each pass kept
        assert len(r["repeats"]) == 2 and r["outlier_rule"]["passes"] == 2 == r["outlier_rule"]["passes_needed"]
        for i in range(4):
            for j in range(4):
                if i != j:
                    assert m[i][j] == pytest.approx((r["repeats"][0][i][j] + r["repeats"][1][i][j]) / 2)
    assert "# pairs: latency" in proc.stdout and "# pairs: bandwidth" in proc.stdout


def test_a_node_that_stands_out_in_one_pass_only_is_not_flagged():
    """Issue 39: node 2 slow in one of three passes (a noisy moment) is not named; slow in two of three, it is."""
    from microbench.measure.outliers import flag_matrix, median_matrix

    def slow_node(value):
        m = _matrix(5, 2.0)
        for j in (0, 1, 3, 4):
            m[2][j] = m[j][2] = value
        return m
    labels = [f"n{i}" for i in range(5)]
    once = [slow_node(9.0), _matrix(5, 2.0), _matrix(5, 2.1)]
    alone = flag_matrix(slow_node(9.0), labels, True)
    assert [n["label"] for n in alone["node_outliers"]] == ["n2"]  # one pass, as before: named
    flagged = flag_matrix(median_matrix(once), labels, True, repeats=once)
    assert flagged["node_outliers"] == [] and flagged["outliers"] == []
    twice = [slow_node(9.0), slow_node(8.0), _matrix(5, 2.0)]
    flagged = flag_matrix(median_matrix(twice), labels, True, repeats=twice)
    assert [n["label"] for n in flagged["node_outliers"]] == ["n2"]
    assert flagged["node_outlier_rule"]["passes"] == 3 and flagged["node_outlier_rule"]["passes_needed"] == 2
    # two passes (the default), one of them slow: the median (5.5) stands out, but not in both passes
    split = [slow_node(9.0), _matrix(5, 2.0)]
    assert [n["label"] for n in flag_matrix(median_matrix(split), labels, True)["node_outliers"]] == ["n2"]
    assert flag_matrix(median_matrix(split), labels, True, repeats=split)["node_outliers"] == []


def test_pair_repeats_is_checked():
    proc = microbench("run", "--np", "2", "latency", "--pair-repeats", "2", "-m", "8")
    assert proc.returncode == 2 and "--pair-repeats applies to the pairwise link test" in proc.stderr
    proc = microbench("run", "--np", "2", "pairs", "--pair-repeats", "0", "-m", "8")
    assert proc.returncode == 2 and "--pair-repeats must be from 1 to 100" in proc.stderr


def test_serial_without_pairs_is_refused():
    proc = microbench("run", "--np", "2", "latency", "--serial", "-m", "8")
    assert proc.returncode == 2 and "--serial applies to the pairwise link test" in proc.stderr


def test_pairs_results_become_heatmaps(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "4", "pairs", "-m", "8,64K", "-i", "10", "-x", "1", "--out", str(out), timeout=180)
    assert proc.returncode == 0, proc.output
    plotted = microbench("plot", str(out), "-o", str(tmp_path / "fig"))
    assert plotted.returncode == 0, plotted.output
    pngs = sorted(p.name for p in (tmp_path / "fig").glob("pairs-*.png"))
    run_id = results_of(out)[0]["run_id"]
    assert pngs == [f"pairs-bandwidth-{run_id}.png", f"pairs-latency-{run_id}.png"]
    for p in (tmp_path / "fig").glob("pairs-*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_pairs_check_passes_and_catches_corruption(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "4", "pairs", "-m", "8,4K", "-i", "5", "-x", "1", "-c", "--out", str(out),
                      timeout=180)
    assert proc.returncode == 0, proc.output
    assert [(r["metric"], r["check"]) for r in results_of(out)] == [("latency", "pass"), ("bandwidth", "pass")]
    bad = tmp_path / "bad.jsonl"
    proc = microbench("run", "--np", "4", "pairs", "-m", "8,4K", "-i", "5", "-x", "1", "-c", "--out", str(bad),
                      env={"MICROBENCH_TEST_CORRUPT": "2:latency:8"}, timeout=180)
    assert proc.returncode == 1, proc.output
    assert [(r["metric"], r["check"]) for r in results_of(bad)] == [("latency", "fail"), ("bandwidth", "pass")]
    assert "check FAILED: pairs latency" in proc.stderr

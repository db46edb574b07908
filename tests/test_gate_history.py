"""microbench history: runs in time order, one column per configuration, the library change marked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures.gate.synth import pairs_result, private_index, result, write_run

from microbench.cli import main as microbench_main
from microbench.gate import steps

pytestmark = pytest.mark.filterwarnings("error")  # a figure that warns is a failed figure


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def cli(*args) -> int:
    return microbench_main(["history", *map(str, args)])


def three_nights(tmp_path):
    """Written out of time order, across two files in a directory; the library changes on night 3."""
    folder = tmp_path / "nightly"
    write_run(folder / "b.jsonl", [result(p50=3.0), result(size=1024, p50=5.0), result("latency", 8, 1.5)],
              run_id="night3", time_utc="2026-11-03T02:00:00Z", library="Open MPI v5.0.12, package: x")
    write_run(folder / "a.jsonl", [result(p50=2.0), result(size=1024, p50=4.0), result("latency", 8, 1.0)],
              run_id="night1", time_utc="2026-11-01T02:00:00Z")
    write_run(folder / "a.jsonl", [result(p50=2.2), result(size=1024, p50=4.4), result("latency", 8, 1.1),
                                   result(p50=9.0, ranks=4)],
              run_id="night2", time_utc="2026-11-02T02:00:00Z")
    return folder


def test_table_in_time_order_with_library_changes(tmp_path, capsys):
    assert cli(three_nights(tmp_path), "-b", "allreduce", "-m", "8,1K") == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("2026-")]
    assert [r[1] for r in rows] == ["night1", "night2", "night3"]
    header = next(line for line in out.splitlines() if line.startswith("time (UTC)"))
    assert "allreduce 8 ranks=2" in header and "allreduce 8 ranks=4" in header and "allreduce 1K" in header
    assert rows[0][-3:] == ["2", "-", "4"]  # 8 B at 2 ranks, 8 B at 4 ranks (not measured), 1K
    assert rows[1][-3:] == ["2.2", "9", "4.4"]
    night3 = next(line for line in out.splitlines() if line.startswith("2026-11-03"))
    assert "*Open" in night3 and "the MPI library changed" in out


def test_json_and_default_size(tmp_path, capsys):
    assert cli(three_nights(tmp_path), "-b", "latency", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "latency" and doc["stat"] == "p50" and doc["unit"] == "us"
    series, = doc["series"]
    assert series["label"] == "latency 8"
    assert [(p["run_id"], p["value"]) for p in series["points"]] == [("night1", 1.0), ("night2", 1.1),
                                                                     ("night3", 1.5)]


def test_stat_and_figure(tmp_path, capsys):
    fig = tmp_path / "fig" / "history.png"
    assert cli(three_nights(tmp_path), "-b", "latency", "--stat", "p99", "-o", fig) == 0
    out = capsys.readouterr().out
    assert "p99 latency (us)" in out and f"wrote {fig}" in out
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 10_000


def test_no_matching_size_is_a_usage_error(tmp_path, capsys):
    assert cli(three_nights(tmp_path), "-m", "3") == 2
    err = capsys.readouterr().err
    assert "no results at sizes 3" in err and "sizes present: 8, 1K" in err


def test_figure_name_must_be_png_or_svg(tmp_path, capsys):
    assert cli(three_nights(tmp_path), "-o", tmp_path / "history.pdf") == 2
    assert "must end in .png or .svg" in capsys.readouterr().err


def test_pairs_history(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_run(path, [pairs_result("latency", value=2.0), result(p50=1.0)], run_id="n1", time_utc="2026-11-01T02:00:00Z")
    write_run(path, [pairs_result("latency", value=2.5)], run_id="n2", time_utc="2026-11-02T02:00:00Z")
    assert cli(path, "-b", "pairs", "--json") == 0
    series, = json.loads(capsys.readouterr().out)["series"]
    assert series["config"]["benchmark"] == "pairs" and series["config"]["metric"] == "latency"
    assert [p["value"] for p in series["points"]] == [2.0, 2.5]


# ------------------------------------------------------------------------------------ steps.detect
def test_steps_in_few_noisy_points():
    level = [1.0, 1.03, 0.97, 1.02, 0.99, 1.31, 1.28, 1.33, 1.27, 1.30]
    step, = steps.detect(level, min_step=0.05)
    assert step.index == 5 and step.ratio == pytest.approx(1.30 / 1.0, rel=0.02) and step.p <= 0.05
    assert steps.detect(level, min_step=0.5) == []  # smaller than the minimum step asked for
    assert steps.detect([1.0, 1.04, 0.96, 1.02, 0.98, 1.01, 0.97, 1.03]) == []
    assert steps.detect([1.0, 2.0, 1.0, 2.0]) == []  # too few points for two segments of 3


def test_one_wild_run_is_not_a_step():
    series = [1.0, 1.02, 0.98, 1.01, 3.0, 0.99, 1.03, 0.97, 1.0, 1.02]
    assert steps.detect(series) == []


def test_two_steps_and_their_medians():
    series = [1.0] * 6 + [1.5] * 6 + [1.2] * 6
    # distinct values (ties would make the rank test's p normal, not exact): the second step is judged in a
    # segment of 12 runs with the series' 13 split points as the multiplier (2/924 x 13 = 0.028)
    found = steps.detect([v * (1 + 0.01 * (i % 3) + 0.001 * (i % 6)) for i, v in enumerate(series)])
    assert [s.index for s in found] == [6, 12]
    assert found[0].ratio == pytest.approx(1.5, rel=0.03) and found[1].ratio == pytest.approx(0.8, rel=0.03)


def test_bad_step_options_are_one_line_errors(tmp_path, capsys):
    folder = three_nights(tmp_path)
    assert cli(folder, "--min-step", "x") == 2
    assert "bad --min-step 'x'" in capsys.readouterr().err
    assert cli(folder, "--confidence", "1.5") == 2
    assert "--confidence must be from 0.5 up to 1" in capsys.readouterr().err


def test_runs_needed_is_computed_from_the_tests():
    # ranks alone: 9 runs reach at best 2/126 x 4 split points = 0.063; 10 runs 2/252 x 5 = 0.040
    assert steps.runs_needed(0.05, logs=False) == 10 and not steps.can_reach(9, 0.05, logs=False)
    assert steps.runs_needed(0.05, series=301, logs=False) > steps.runs_needed(0.05, series=4, logs=False) > 10
    assert steps.runs_needed(0.05) == 6 and steps.runs_needed(0.05, series=301) == 6  # with t on log values
    assert steps.detect([1.0, 1.0, 1.0, 3.0, 3.0]) == []


def test_a_3x_step_in_8_runs_is_found_for_one_series_and_for_many():
    values = [1.0, 1.06, 0.95, 1.02, 3.1, 2.9, 3.05, 2.95]
    for series in (1, 300):
        step, = steps.detect(values, series=series)
        assert step.index == 4 and step.test == steps.T_LOG and step.p <= 0.05
    # the rank test alone could not: complete separation of 4 and 4 is p = 2/70, x 3 split points = 0.086
    assert 2 / 70 * 3 > 0.05


def test_the_family_rate_holds_on_noise_only_series():
    """100 series of 8 and 100 of 30 noise-only runs (10 %): judged as one family of 200, no false step;
    judged one by one at 5 % each, the same series give four."""
    rng = np.random.default_rng(4)
    family = [np.exp(rng.normal(0, 0.1, n)) for n in [8] * 100 + [30] * 100]
    assert [s for v in family for s in steps.detect(v, 0.0, 0.05, series=len(family))] == []
    assert sum(len(steps.detect(v, 0.0, 0.05)) for v in family) == 4


def test_a_ten_year_series_is_judged_without_overflow():
    """3,650 nightlies: the exact count of orderings (thousands of digits) must not reach a float division."""
    import numpy as np

    from microbench.gate.ranktest import smallest_p
    from microbench.gate.steps import detect

    assert smallest_p(1825, 1825) == 0.0 and smallest_p(4, 4) == 2 / 70
    rng = np.random.default_rng(1)
    values = np.exp(rng.normal(0.0, 0.05, 3650))
    values[3000:] *= 2
    steps = detect(values, series=300)
    assert [s.index for s in steps] == [3000]


# ------------------------------------------------------------------------- issue 39: ties, what a series could find
def test_the_rank_test_with_ties_counts_every_ordering():
    """Real p50s tie (histogram bins): the exact p conditional on the ties against brute force."""
    from itertools import combinations

    from microbench.gate import ranktest

    values = np.array([1, 2, 2, 3, 3, 3, 4, 5, 5, 6.0])
    order = np.argsort(values, kind="stable")
    ranks = np.empty(10)
    ranks[order] = np.arange(1, 11)
    for v in np.unique(values):
        ranks[values == v] = ranks[values == v].mean()
    sums = [ranks[list(c)].sum() for c in combinations(range(10), 4)]
    observed = ranks[[5, 7, 8, 9]].sum()
    expected = 2 * min(np.mean([s <= observed + 1e-9 for s in sums]), np.mean([s >= observed - 1e-9 for s in sums]))
    assert ranktest.tied_p(ranks, 4, observed) == pytest.approx(expected)
    extreme = 2 * min(np.mean([s >= max(sums) - 1e-9 for s in sums]), np.mean([s <= min(sums) + 1e-9 for s in sums]))
    assert ranktest.smallest_tied_p(ranks, 4) == pytest.approx(extreme)
    assert ranktest.smallest_tied_p(np.arange(1, 9.0), 4) == pytest.approx(ranktest.smallest_p(4, 4))


def test_a_step_among_tied_values_is_found():
    """16 runs at two binned levels, then 8 at twice them: 48 series judged together (as the corpus's suite)."""
    values = np.array([0.39, 0.40, 0.41, 0.41, 0.41, 0.44, 0.40, 0.40, 0.41, 0.44, 0.43, 0.44, 0.46, 0.40, 0.39, 0.40]
                      + [0.78, 0.80, 0.82, 0.80, 0.82, 0.80, 0.80, 0.80])
    step, = steps.detect(values, 0.05, 0.05, series=48)
    assert step.index == 16 and step.test == steps.RANK


def test_a_series_without_a_step_says_what_it_could_have_found():
    rng = np.random.default_rng(2)
    quiet, noisy = np.exp(rng.normal(0, 0.02, 30)), np.exp(rng.normal(0, 0.3, 30))
    assert 1 < steps.findable_ratio(quiet, series=4) < 1.1 < 1.5 < steps.findable_ratio(noisy, series=4)
    assert steps.findable_ratio(noisy, series=400) > steps.findable_ratio(noisy, series=4)
    assert steps.findable_ratio(quiet[:5]) is None and steps.findable_ratio(np.r_[quiet, 0.0]) is None

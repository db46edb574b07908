"""microbench plot and heatmap(): images are written and non-empty; what is drawn is what the records say."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from fixtures.gate.synth import MULTIPLES, pairs_result, private_index, result, write_run

from microbench.cli import main as microbench_main
from microbench.errors import UsageError
from microbench.plotting import curves, line_style
from microbench.plotting.cli import heatmap
from microbench.results.load import load_table

from conftest import REPO

pytestmark = pytest.mark.filterwarnings("error")  # a layout or legend warning is a failed figure

REFERENCE = REPO / "plots" / "reference.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CORE = ("allgather", "allreduce", "broadcast", "bw", "latency", "reduce_scatter")


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def cli(*args) -> int:
    return microbench_main(["plot", *map(str, args)])


def assert_png(path, min_bytes=10_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > min_bytes, path


def test_plot_the_recorded_reference_run(tmp_path, capsys):
    assert cli(REFERENCE, "-o", tmp_path / "figs") == 0
    out = capsys.readouterr().out
    for name in CORE:
        assert f"wrote {tmp_path / 'figs' / name}.png" in out
        assert_png(tmp_path / "figs" / f"{name}.png")


def test_svg_and_merged_runs(tmp_path, capsys):
    assert cli(REFERENCE, REFERENCE, "-o", tmp_path, "-b", "allreduce", "--svg", "--by", "config",
               "--band", "min-max") == 0
    assert_png(tmp_path / "allreduce.png")
    svg = ET.parse(tmp_path / "allreduce.svg").getroot()
    assert svg.tag.endswith("svg") and (tmp_path / "allreduce.svg").stat().st_size > 10_000
    assert not (tmp_path / "latency.png").exists()


def test_unknown_benchmarks_are_skipped_with_a_note(tmp_path, capsys):
    path = write_run(tmp_path / "foreign-r.jsonl", [result(size=8), result(size=64),
                                                    result("linktest", size=8)])
    assert cli(path, "-o", tmp_path / "figs") == 0
    captured = capsys.readouterr()
    assert "skipped 1 result(s) of benchmark 'linktest'" in captured.err
    assert_png(tmp_path / "figs" / "allreduce.png")
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["allreduce.png"]


def test_nothing_drawable_is_a_usage_error(tmp_path, capsys):
    path = write_run(tmp_path / "foreign-r.jsonl", [result("linktest", size=8)])
    assert cli(path, "-o", tmp_path / "figs") == 2
    assert "nothing to plot" in capsys.readouterr().err


def test_series_carry_the_recorded_numbers(tmp_path):
    path = tmp_path / "r.jsonl"
    for i, p50 in enumerate((10.0, 30.0, 20.0)):
        write_run(path, [result(size=8, p50=p50), result(size=16, p50=2 * p50)], run_id=f"r{i}",
                  time_utc=f"2026-11-0{i + 1}T00:00:00Z")
    runs = load_table([path])
    per_run = curves.build_series(runs, "allreduce", "p50", "p10-p90", "run", "busbw")
    assert len(per_run) == 3
    first = next(s for s in per_run if s.label.startswith("2026-11-01"))
    assert first.sizes == [8, 16] and first.latency == [10.0, 20.0]
    assert first.latency_band[0] == pytest.approx((10.0 * MULTIPLES["p10"], 10.0 * MULTIPLES["p90"]))
    assert first.bandwidth[0] == pytest.approx(8 / 10e-6 / 1e9)  # 2 ranks: busbw factor 1
    merged, = curves.build_series(runs, "allreduce", "p50", "min-max", "config", "busbw")
    assert merged.runs == 3 and merged.latency == [20.0, 40.0]
    assert merged.latency_band == [(10.0, 30.0), (20.0, 60.0)]


def test_runs_started_in_the_same_minute_get_distinct_legend_labels(tmp_path):
    path = tmp_path / "r.jsonl"
    for i, when in enumerate(("07:00:05", "07:00:40", "07:00:40")):
        write_run(path, [result(size=8, p50=1.0 + i)], run_id=f"run{i}", time_utc=f"2026-11-01T{when}Z")
    labels = [s.label for s in curves.build_series(load_table([path]), "allreduce")]
    assert len(set(labels)) == 3
    assert sorted(labels) == ["2026-11-01 07:00:05 run0", "2026-11-01 07:00:40 run1", "2026-11-01 07:00:40 run2"]
    apart = tmp_path / "apart.jsonl"
    for i, when in enumerate(("07:00:05", "08:00:40")):
        write_run(apart, [result(size=8, p50=1.0 + i)], run_id=f"run{i}", time_utc=f"2026-11-01T{when}Z")
    labels = [s.label for s in curves.build_series(load_table([apart]), "allreduce")]
    assert labels == ["2026-11-01 07:00", "2026-11-01 08:00"]  # minutes suffice


def test_forty_lines_look_different():
    styles = [tuple(sorted(line_style(i).items())) for i in range(40)]
    assert len(set(styles)) == 40


def test_benchmark_list_can_name_pairs_beside_collectives(tmp_path, capsys):
    path = write_run(tmp_path / "r.jsonl", [result(size=8), result(size=64), pairs_result("latency"),
                                            pairs_result("bandwidth", value=10.0)], run_id="abc")
    assert cli(path, "-o", tmp_path / "figs", "-b", "allreduce,pairs") == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "allreduce.png", "pairs-bandwidth-abc.png", "pairs-latency-abc.png"]
    assert cli(path, "-o", tmp_path / "only", "-b", "pairs") == 0
    assert sorted(p.name for p in (tmp_path / "only").iterdir()) == ["pairs-bandwidth-abc.png",
                                                                    "pairs-latency-abc.png"]


def _red_pixels(png) -> int:
    import numpy as np
    from matplotlib.image import imread

    rgb = imread(png)[..., :3]
    return int(np.count_nonzero(np.all(np.abs(rgb - np.array([0.839, 0.153, 0.157])) < 0.08, axis=-1)))


def test_heatmap_png_and_svg_with_outliers_framed(tmp_path):
    n = 6
    matrix = [[None if i == j else 1.0 + 0.1 * i + 0.01 * j for j in range(n)] for i in range(n)]
    matrix[1][4] = 9.0
    labels = [f"node{i}" for i in range(n)]
    png = heatmap(matrix, labels, "pairwise latency, 8 B", "p50 latency (us)", tmp_path / "hm.png", [(1, 4)])
    assert png == tmp_path / "hm.png"
    assert_png(png)
    plain = heatmap(matrix, labels, "pairwise latency, 8 B", "p50 latency (us)", tmp_path / "plain.png")
    assert _red_pixels(png) > 100 and _red_pixels(plain) == 0
    svg = heatmap(matrix, labels, "pairwise latency, 8 B", "p50 latency (us)", tmp_path / "sub" / "hm.svg")
    assert ET.parse(svg).getroot().tag.endswith("svg") and svg.stat().st_size > 10_000


def test_heatmap_large_and_empty(tmp_path):
    big = [[float(i * j) for j in range(40)] for i in range(40)]
    assert_png(heatmap(big, [str(i) for i in range(40)], "40 nodes", "GB/s", tmp_path / "big.png"))
    assert_png(heatmap([[None, None], [None, None]], ["a", "b"], "nothing", "us", tmp_path / "none.png"),
               min_bytes=2_000)


def test_heatmap_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="N x N"):
        heatmap([[1.0, 2.0]], ["a", "b"], "t", "us", tmp_path / "x.png")
    with pytest.raises(ValueError, match="outside"):
        heatmap([[1.0]], ["a"], "t", "us", tmp_path / "x.png", outliers=[(0, 1)])
    with pytest.raises(UsageError, match=".png or .svg"):
        heatmap([[1.0]], ["a"], "t", "us", tmp_path / "x.pdf")


def test_past_a_handful_of_runs_the_figure_merges_them_by_configuration(tmp_path, capsys):
    """40 nights of two configurations: two series (median over runs, band over runs), the newest run
    marked, never a legend entry per run; no matplotlib warning (warnings are errors here)."""
    path = tmp_path / "nights.jsonl"
    for night in range(40):
        level = 1.0 + 0.01 * (night % 5)
        write_run(path, [result(size=s, p50=2.0 * level, dtype=d) for s in (8, 64, 1024) for d in ("float32", "float64")],
                  run_id=f"n{night}", time_utc=f"2026-{1 + night // 28:02d}-{1 + night % 28:02d}T02:00:00Z")
    table = load_table([path])
    assert curves.resolve_by("auto", 40) == "config" and curves.resolve_by("auto", 5) == "run"
    series = curves.build_series(table, "allreduce", by="config")
    assert len(series) == 2 and all("40 run(s)" in s.label for s in series)
    newest = 2.0 * (1.0 + 0.01 * (39 % 5))
    assert all(s.newest == pytest.approx([newest] * 3) for s in series)
    assert all(s.latency == pytest.approx([2.0 * 1.02] * 3) for s in series)  # median over the runs
    assert cli(path, "-o", tmp_path / "figs") == 0
    assert_png(tmp_path / "figs" / "allreduce.png")

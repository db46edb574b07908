"""The non-blocking records through the columnar reader: the same numbers as the record path, and a year of
overlap figures that aggregates (one series per configuration, never one per run) without a warning.

Real records: two `microbench run --np 2` launches of two non-blocking benchmarks (their overlap blocks
are measured, not made up). The record path is ``records.read_runs`` with ``metrics.metric_value``, and
the overlap figure as it was drawn from whole records (per run, the first cache-warm record of each size).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fixtures.gate.synth import private_index

from microbench.cli import main as microbench_main
from microbench.plotting import curves, overlap
from microbench.records import read_runs
from microbench.results import keys
from microbench.results.columns import OVERLAP_FIELDS
from microbench.results.load import load_table
from microbench.results.metrics import LATENCY_STATS, OVERLAP, metric_value

from conftest import REPO, microbench

sys.path.insert(0, str(REPO / "scripts"))
import gate_nightlies as nightlies  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")  # a layout or legend warning is a failed figure

NONBLOCKING = ("iallreduce", "ialltoall")


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two real runs (one file each) of two non-blocking benchmarks and allreduce, 8 B to 1 KiB."""
    out = tmp_path_factory.mktemp("nonblocking")
    for night in ("a", "b"):
        proc = microbench("run", "--np", "2", *NONBLOCKING, "allreduce", "-m", "8:1K", "-i", "100", "-x", "10",
                          "--out", str(out / f"{night}.jsonl"), timeout=240)
        assert proc.returncode == 0, proc.output
    return out


def record_rows(table):
    """(run id, configuration) -> table row."""
    return {(table.runs[table.run[row]].run_id, table.configs[table.config[row]]): row for row in range(len(table))}


def test_every_nonblocking_number_is_the_record_paths(folder):
    table = load_table([folder])
    rows = record_rows(table)
    runs = read_runs([folder])
    checked = 0
    for run in runs:
        for rec in run.results:
            row = rows[(run.run_id, keys.config_key(rec))]
            for metric in ("latency", "busbw", "algbw"):
                for stat in LATENCY_STATS:
                    want = metric_value(rec, metric, stat)
                    got = table.values(metric, stat)[row]
                    assert (want is None and np.isnan(got)) or got == pytest.approx(want, rel=1e-12), (metric, stat)
            for stat in ("avg", "min", "max", "p50"):
                want = metric_value(rec, OVERLAP, stat)
                got = table.values(OVERLAP, stat)[row]
                assert (want is None and np.isnan(got)) or got == want, (rec["benchmark"], stat)
            if rec["benchmark"] in NONBLOCKING:
                assert isinstance(rec.get("overlap"), dict)
                pct = rec["overlap"]["overlap_pct"]
                back = table.record(row)["overlap"]["overlap_pct"]
                for family, stat in OVERLAP_FIELDS.values():
                    assert back[family][stat] == pct[family][stat]
                checked += 1
    assert checked == 2 * sum(1 for r in runs[0].results if r["benchmark"] in NONBLOCKING) > 0


def record_path_overlap(runs, benchmark):
    """The overlap figure's curves as drawn from whole records: per run, per size the first cache-warm
    record's OMB avg, min, max and IMB avg."""
    out = {}
    for run in runs:
        by_size = {}
        for res in run.results:
            if res.get("benchmark") == benchmark and isinstance(res.get("overlap"), dict) \
                    and res.get("cache", "warm") == "warm":
                by_size.setdefault(res["size_bytes"], res["overlap"]["overlap_pct"])
        if by_size:
            sizes = sorted(by_size)
            out[run.run_id] = (sizes, [by_size[s]["omb"]["avg"] for s in sizes],
                               [(by_size[s]["omb"]["min"], by_size[s]["omb"]["max"]) for s in sizes],
                               [by_size[s]["imb"]["avg"] for s in sizes])
    return out


@pytest.mark.parametrize("benchmark", NONBLOCKING)
def test_the_overlap_figure_draws_the_record_paths_values(folder, benchmark):
    table = load_table([folder])
    runs = read_runs([folder])
    want = record_path_overlap(runs, benchmark)
    series = overlap.overlap_series(table, benchmark, by="run")
    assert len(series) == len(want) == 2
    run_of_title = dict(zip(curves._run_titles(table.runs), (r.run_id for r in table.runs)))
    for s in series:
        sizes, omb, band, imb = want[run_of_title[s.label]]
        assert s.sizes == sizes and s.omb == omb and s.omb_band == band and s.imb == imb
    merged = overlap.overlap_series(table, benchmark, by="config")
    assert len(merged) == 1 and merged[0].runs == 2
    per_size = list(zip(*(want[r][1] for r in want)))
    assert merged[0].omb == pytest.approx([float(np.median(v)) for v in per_size], rel=1e-12)
    # the run that started last; of runs started in the same second, the one read last (curves.newest_run)
    newest = max(enumerate(runs), key=lambda ir: (ir[1].meta["time_utc"], ir[0]))[1].run_id
    assert merged[0].newest == want[newest][1]


def test_a_year_of_overlap_figures_aggregates_without_a_warning(folder, tmp_path, capsys):
    """365 nights: one merged series per configuration (median, band over runs, the newest run), the
    figures written with warnings as errors (before: a legend entry per run and definition, and matplotlib's
    'axes sizes collapsed to zero')."""
    template = folder / "a.jsonl"
    nightlies.write_nightlies(template, tmp_path / "year", nightlies.Plan(365, night_sigma=0.03))
    table = load_table([tmp_path / "year"])
    assert curves.resolve_by("auto", len(table.used_runs())) == "config"
    for benchmark in NONBLOCKING:
        series = overlap.overlap_series(table, benchmark, by="config")
        assert len(series) == 1 and series[0].runs == 365 and "365 run(s)" in series[0].label
        assert all(v is not None for v in series[0].newest)
    assert microbench_main(["plot", str(tmp_path / "year"), "-o", str(tmp_path / "figs")]) == 0
    for benchmark in NONBLOCKING:
        assert (tmp_path / "figs" / f"{benchmark}-overlap.png").stat().st_size > 10_000

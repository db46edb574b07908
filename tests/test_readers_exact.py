"""The columnar readers to the letter: configuration keys, the scan of a file, its part, the table built from parts,
the columns and medians, the index's cache, the job overlay; values read to the bit from small files written here,
in process (issue 40: the tests that kill the mutants of ``results.readers``, docs/mutation-testing.md).

Files holding records outside what ``microbench run`` writes (a partial overlap block, a pairs record without its
matrix, a run line of 4 MiB) are named ``foreign-*.jsonl``, which the session's model check leaves alone."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fixtures.gate.synth import pairs_result, private_index, result, run_line, write_run

from microbench.errors import UsageError
from microbench.records import model
from microbench.records.files import as_results_file
from microbench.results import index, job_overlay, keys, scan
from microbench.results.columns import RunInfo, median_of, per_run_medians
from microbench.results.load import load_table, time_span
from microbench.results.parts import NUMBERS, PartMaker
from microbench.results.scan import ScanNotes, decode_file, jsonl_paths
from microbench.results.tablebuild import CHUNK, TableBuilder


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def _key(**fields) -> keys.ConfigKey:
    return keys.ConfigKey(tuple(fields.get(n) for n in keys.KEY_FIELDS))


# -------------------------------------------------------------------------------------------------- keys.py
def test_a_key_without_size_or_ranks_sorts_them_as_zero():
    assert _key(benchmark="barrier").sort_key()[:3] == (0, "barrier", 0)
    assert _key(benchmark="allreduce", size_bytes=8, ranks=4).sort_key()[:3] == (8, "allreduce", 4)
    assert _key().sort_key()[:3] == (0, "", 0)


def test_only_the_options_that_differ_are_varying():
    a, b = _key(benchmark="allreduce", ranks=2, dtype="float32"), _key(benchmark="allreduce", ranks=2, dtype="float64")
    assert keys.varying_options([a, a]) == []
    assert keys.varying_options([a]) == []
    assert keys.varying_options([a, b]) == ["dtype"]


def test_boolean_options_are_words():
    key = _key(in_place=True, checked=False, dtype="float32", window=64)
    assert keys.describe_options(key, ["in_place", "checked", "dtype", "window", "op"]) == \
        "in-place unchecked dtype=float32 window=64"
    assert keys.describe_options(_key(in_place=False, checked=True), ["in_place", "checked"]) == \
        "out-of-place checked"
    assert keys.describe_options(key, ["op"]) == "-"


# -------------------------------------------------------------------------------------------------- scan.py
def test_the_decoder_is_made_once():
    assert scan._decoder() is scan._decoder()


def _run_line_of(length: int) -> bytes:
    rec = run_line("big")
    bare = len(json.dumps({**rec, "command": ""}).encode())
    line = json.dumps({**rec, "command": "x" * (length - bare)}).encode()
    assert len(line) == length
    return line


def test_a_run_line_of_the_largest_size_is_read_and_one_byte_more_refused(tmp_path):
    limit = model.MAX_RUN_LINE_BYTES
    ok = tmp_path / "foreign-largest.jsonl"
    ok.write_bytes(_run_line_of(limit) + b"\n" + json.dumps(result(run_id="big")).encode() + b"\n")
    decoded = decode_file(ok)
    assert [type(r).__name__ for r in decoded.records][:1] and len(decoded.records) == 2 and decoded.bad_lines == []
    over = tmp_path / "foreign-over.jsonl"
    over.write_bytes(b"\n" + _run_line_of(limit + 1) + b"\n")
    with pytest.raises(UsageError, match=rf"foreign-over.jsonl:2: a run line of {limit + 1} bytes"):
        decode_file(over)


def test_a_refused_row_names_its_line_or_only_the_problem(tmp_path):
    path = write_run(tmp_path / "r.jsonl", [result(size=8), result(size=64)])
    with pytest.raises(UsageError) as e:
        scan.refuse_row(None, 1, "impossible")
    assert str(e.value) == "impossible"
    with pytest.raises(UsageError) as e:
        scan.refuse_row(as_results_file(path), 1, "impossible")
    assert str(e.value) == f"{path}:3: impossible"


# ---------------------------------------------------------------------------- parts.py, tablebuild.py, columns.py
def _overlap(avg: float) -> dict:
    return {"overlap_pct": {"omb": {"avg": avg, "min": avg - 10, "max": avg + 10, "p50_based": avg + 5},
                            "imb": {"avg": avg / 2, "min": avg / 2 - 1, "max": avg / 2 + 1}}}


def test_rows_keep_their_configuration_values_and_overlap_figures(tmp_path):
    path = tmp_path / "foreign-mixed.jsonl"
    write_run(path, [result("iallreduce", 64, 3.0, overlap=_overlap(50.0)), result("allreduce", 8, 10.0),
                     result("iallreduce", 128, 4.0, overlap=_overlap(70.0)), result("allreduce", 64, 12.5)])
    table = load_table([path])
    assert [(c.benchmark, c.size_bytes) for c in table.configs] == \
        [("iallreduce", 64), ("allreduce", 8), ("iallreduce", 128), ("allreduce", 64)]
    assert table.config.tolist() == [0, 1, 2, 3] and table.size.tolist() == [64, 8, 128, 64]
    assert table.latency["p50"].tolist() == [3.0, 10.0, 4.0, 12.5]
    assert table.overlap_row.tolist() == [0, 2]
    assert table.overlap["omb_avg"].tolist() == [50.0, 70.0] and table.overlap["imb_max"].tolist() == [26.0, 36.0]
    assert table.record(0)["overlap"] == {"overlap_pct": _overlap(50.0)["overlap_pct"]}
    assert table.record(2)["overlap"] == {"overlap_pct": _overlap(70.0)["overlap_pct"]}
    assert "overlap" not in table.record(1) and "overlap" not in table.record(3)
    omb = table.number("overlap.overlap_pct.omb.p50_based")
    assert omb[[0, 2]].tolist() == [55.0, 75.0] and np.isnan(omb[[1, 3]]).all()


def test_extras_follow_their_rows_when_configurations_are_left_out(tmp_path):
    path = tmp_path / "foreign-kept.jsonl"
    write_run(path, [result("allreduce", 8), result("iallreduce", 64, overlap=_overlap(40.0)), result("allreduce", 16),
                     result("iallreduce", 128, overlap=_overlap(60.0))])
    table = load_table([path], keep=lambda k: k.size_bytes != 64)
    assert table.size.tolist() == [8, 16, 128]
    assert table.overlap_row.tolist() == [2] and table.overlap["omb_avg"].tolist() == [60.0]


def test_a_pairs_record_keeps_its_fields_even_without_a_matrix(tmp_path):
    bare = pairs_result()
    del bare["matrix"]
    path = tmp_path / "foreign-pairs.jsonl"
    write_run(path, [result(), bare])
    table = load_table([path])
    assert list(table.extras) == [1]
    assert table.extras[1]["labels"] == ["node0", "node1", "node2", "node3"] and "matrix" not in table.extras[1]
    assert table.extras[1]["outliers"] == []


def test_parts_are_joined_in_chunks_as_they_are_added(tmp_path):
    maker, builder = PartMaker(), TableBuilder(("p50",))
    for i in range(CHUNK + 1):
        path = write_run(tmp_path / f"r{i}.jsonl", [result(p50=float(i + 1))], run_id=f"r{i}")
        builder.add(maker.make(decode_file(path), [0]), str(path))
        assert len(builder.columns) == (i + 1 if i < CHUNK - 1 else i - CHUNK + 2)
    table = builder.table()
    assert table.latency["p50"].tolist() == [float(i + 1) for i in range(CHUNK + 1)]
    assert table.run.tolist() == list(range(CHUNK + 1))


def test_a_configuration_without_a_size_has_size_minus_one():
    builder = TableBuilder(("p50",))
    assert len(builder.table()) == 0
    builder.configs = [_key(benchmark="barrier"), _key(benchmark="allreduce", size_bytes=8)]
    builder.runs = [RunInfo(meta={"run_id": "r"}, source="x", end=None)]
    builder.columns = [{"run": np.array([0, 0]), "config": np.array([0, 1]), "requested": np.array([-1, -1]),
                        "check": np.zeros(2, np.int16), **{n: np.zeros(2) for n in ("p50", *NUMBERS)}}]
    table = builder.table()
    assert table.size.tolist() == [-1, 8] and table.run.tolist() == [0, 0] and table.runs == builder.runs


def test_per_run_medians_of_each_configuration_and_run():
    config = np.array([1, 0, 1, 0, 1, 1])
    run = np.array([0, 1, 1, 1, 0, 0])
    values = np.array([5.0, 2.0, 7.0, 4.0, 1.0, 3.0])
    c, r, v = per_run_medians(config, run, values)
    assert c.tolist() == [0, 1, 1] and r.tolist() == [1, 0, 1] and v.tolist() == [3.0, 3.0, 7.0]
    c, r, v = per_run_medians(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([2.0, 4.0, 6.0]))
    assert c.tolist() == [0, 0, 1] and r.tolist() == [0, 1, 1] and v.tolist() == [2.0, 4.0, 6.0]


def test_the_median_of_one_two_three_and_four_values():
    assert math.isnan(median_of([]))
    assert median_of([5.0]) == 5.0
    assert median_of([4.0, 1.0]) == 2.5
    assert median_of([3.0, 1.0, 2.0]) == 2.0
    assert median_of([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median_of([1e308, 1.7e308]) == 1.35e308


# -------------------------------------------------------------------------------------------------- load.py
def test_a_copy_of_a_run_counts_once_and_a_different_run_under_its_id_is_refused(tmp_path):
    a = write_run(tmp_path / "a" / "r.jsonl", [result(p50=10.0)], run_id="same")
    b = tmp_path / "b" / "r.jsonl"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    table = load_table([a, b])
    assert len(table) == 1 and [r.run_id for r in table.runs] == ["same"]
    c = write_run(tmp_path / "c" / "r.jsonl", [result(p50=11.0)], run_id="same")
    with pytest.raises(UsageError, match="run 'same' is in .* and in .* with different contents"):
        load_table([a, c])


def test_a_time_span_is_first_to_last_start():
    def run(when):
        return RunInfo(meta={"time_utc": when} if when else {}, source="x", end=None)

    assert time_span([]) == "unknown time" and time_span([run(None)]) == "unknown time"
    assert time_span([run("2026-11-22T07:00:00Z")]) == "2026-11-22T07:00:00Z"
    assert time_span([run("2026-11-23T01:00:00Z"), run(None), run("2026-11-22T07:00:00Z")]) == \
        "2026-11-22T07:00:00Z .. 2026-11-23T01:00:00Z"


# ------------------------------------------------------------------------------------------------- index.py
@pytest.mark.parametrize("value", ["off", "OFF", " 0 ", "no", "none", ""])
def test_the_index_is_off_when_asked(monkeypatch, value):
    monkeypatch.setenv("MICROBENCH_INDEX", value)
    assert index.index_dir() is None


def test_the_index_folder_is_the_one_named_else_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MICROBENCH_INDEX", str(tmp_path / "idx"))
    assert index.index_dir() == tmp_path / "idx"
    monkeypatch.delenv("MICROBENCH_INDEX")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert index.index_dir() == tmp_path / "cache" / "microbench" / "index"


def _read(paths) -> tuple[ScanNotes, list]:
    notes = ScanNotes()
    parts = [part for _, part in index.PartReader(notes).parts(jsonl_paths(paths, notes))]
    return notes, parts


def test_a_file_is_decoded_once_then_read_from_its_entry(monkeypatch, tmp_path):
    folder = tmp_path / "idx"
    monkeypatch.setenv("MICROBENCH_INDEX", str(folder))
    path = write_run(tmp_path / "r.jsonl", [result(p50=10.0), result(size=64, p50=20.0)])
    notes, (part,) = _read([path])
    entry = index.entry_path(folder, path)
    assert notes.cached == 0 and sorted(folder.iterdir()) == [entry]
    notes, (again,) = _read([path])
    assert notes.cached == 1 and again.column("p50").tolist() == [10.0, 20.0] == part.column("p50").tolist()
    entry.write_bytes(b"not msgpack")  # a spoiled entry: the file is decoded again, the entry rewritten
    notes, (third,) = _read([path])
    assert notes.cached == 0 and third.column("p50").tolist() == [10.0, 20.0]
    assert index._DECODER.decode(entry.read_bytes()).stamp == third.stamp
    entry.unlink()
    notes, _ = _read([path])
    assert notes.cached == 0 and entry.exists()


def test_with_the_index_off_nothing_is_written(monkeypatch, tmp_path):
    monkeypatch.setenv("MICROBENCH_INDEX", "off")
    path = write_run(tmp_path / "r.jsonl", [result(p50=10.0)])
    notes, (part,) = _read([path])
    assert notes.cached == 0 and part.column("p50").tolist() == [10.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


# ------------------------------------------------------------------------------------------- job_overlay.py
def test_a_curve_is_read_at_a_measured_size_or_between_two():
    sizes, values = [1024, 4096, 16384], [10.0, 30.0, 70.0]
    assert job_overlay.curve_at(sizes, values, 4096) == (30.0, "measured at this size")
    value, how = job_overlay.curve_at(sizes, values, 8192)
    assert value == pytest.approx(50.0, rel=1e-15) and how == "between its 4096 B and 16384 B points"
    value, how = job_overlay.curve_at(sizes, values, 2048)
    assert value == pytest.approx(20.0, rel=1e-15) and how == "between its 1024 B and 4096 B points"
    assert job_overlay.curve_at(sizes, values, 512) == (None, "outside the benchmark's measured sizes")
    assert job_overlay.curve_at(sizes, values, 32768) == (None, "outside the benchmark's measured sizes")


def _busbw(rec: dict, stat: str) -> float:
    return rec["algbw_bytes"] / (rec["latency_us"][stat] * 1e-6) / 1e9 * rec["busbw_factor"]


def test_a_jobs_results_beside_the_newest_measured_curve(tmp_path):
    path = tmp_path / "runs.jsonl"
    old = [result("allreduce", s, 100.0) for s in (1024, 4096, 16384)]
    new = [result("allreduce", s, p) for s, p in ((1024, 4.0), (4096, 8.0), (16384, 16.0))]
    write_run(path, old, run_id="old", time_utc="2026-11-21T07:00:00Z")
    write_run(path, new, run_id="new", time_utc="2026-11-22T07:00:00Z")
    job = [result("allreduce", 8192, 20.0), result("allreduce", 4096, 10.0), result("allreduce", 64, 1.0),
           result("broadcast", 4096, 9.0)]
    write_run(path, job, run_id="job", time_utc="2026-11-20T07:00:00Z", source={"tool": "nccl-inspector"})
    table = load_table([path])
    assert job_overlay.job_runs(table) == [2]
    points = job_overlay.job_points(table)
    assert [(p.benchmark, p.size) for p in points] == [("allreduce", 64), ("allreduce", 4096), ("allreduce", 8192),
                                                       ("broadcast", 4096)]
    small, measured, between, other = points
    curve = {s: _busbw(r, "avg") for s, r in zip((1024, 4096, 16384), new)}
    assert measured.curve_gbps == curve[4096] and measured.how == "measured at this size" and measured.curve_run == 1
    assert measured.job_gbps == pytest.approx(_busbw(job[1], "p50"), rel=1e-15)
    assert measured.job_band == pytest.approx((_busbw(job[1], "p90"), _busbw(job[1], "p10")), rel=1e-15)
    assert measured.share == pytest.approx(_busbw(job[1], "p50") / curve[4096], rel=1e-15)
    assert measured.operations is None and measured.ranks == 2  # the table keeps no "iterations" column
    assert between.curve_gbps == pytest.approx((curve[4096] + curve[16384]) / 2, rel=1e-12)
    assert between.how == "between its 4096 B and 16384 B points"
    assert small.curve_gbps is None and small.share is None and small.job_gbps is not None
    assert small.how == "outside the benchmark's measured sizes" and small.curve_run == 1
    assert other.curve_gbps is None and other.curve_run is None and other.share is None
    assert other.how == "no measured broadcast on 2 ranks among the results"


def test_no_job_run_no_points(tmp_path):
    path = write_run(tmp_path / "r.jsonl", [result()])
    assert job_overlay.job_points(load_table([path])) == []

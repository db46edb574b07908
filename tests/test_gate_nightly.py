"""Nightlies: reading them at scale (copies of one real run, scripts/gate_nightlies.py), and steps in history
(nights drawn from the real-launch corpus, tests/fixtures/corpus).

Reading at scale and the family rate over a year of 147 series need more nights than the corpus has launches:
there one real 2-rank launch is the template, and the nightly copies vary run ids, times and latencies by known
factors. Steps are judged on real launches (their own per-launch values and noise), slowed from a known night.
Small here (tens of nights); the large ones are scripts/bench_gate_scale.py's.
"""

from __future__ import annotations

import json
import random
import sys

import pytest
from fixtures.corpus import corpus
from fixtures.gate.synth import private_index, result, write_run

from microbench.cli import main as microbench_main
from microbench.errors import UsageError
from microbench.results import index as gate_index
from microbench.results.load import load_table
from microbench.results.scan import ScanNotes, jsonl_paths
from microbench.units import format_size

from conftest import REPO, microbench

sys.path.insert(0, str(REPO / "scripts"))
import gate_nightlies as nightlies  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One real run: allreduce and latency at 8 and 64 B on 2 ranks."""
    out = tmp_path_factory.mktemp("real") / "run.jsonl"
    proc = microbench("run", "--np", "2", "allreduce", "latency", "-m", "8,64", "-i", "200", "-x", "20",
                      "--out", str(out), timeout=180)
    assert proc.returncode == 0, proc.output
    return out


@pytest.fixture(scope="module")
def suite_template(tmp_path_factory):
    """A synthetic run of the whole suite's shape: 7 benchmarks at every size from 1 B to 1 MiB (147 series)."""
    out = tmp_path_factory.mktemp("suite") / "run.jsonl"
    benchmarks = ("allreduce", "latency", "broadcast", "allgather", "alltoall", "reduce", "bw")
    return write_run(out, [result(b, 1 << k, 2.0 + (1 << k) * 1e-4) for b in benchmarks for k in range(21)])


def nights(template, folder, count, **plan):
    """``count`` nights under ``folder``, with no noise unless asked (so every step is the plan's)."""
    plan.setdefault("night_sigma", 0.0)
    plan.setdefault("record_sigma", 0.01)
    return nightlies.write_nightlies(template, folder, nightlies.Plan(count, **plan))


def run_cli(*args) -> int:
    return microbench_main([*map(str, args)])


# ------------------------------------------------------------------------------------- reading at scale
def test_a_corrupt_line_mid_year_is_skipped_with_a_note(template, tmp_path, capsys):
    files = nights(template, tmp_path / "year", 30, night_sigma=0.03)
    lines = files[14].read_text().splitlines()
    lines[2] = lines[2][:40]  # a result line cut short, in the middle of a night's file
    files[14].unlink()
    files[14] = files[14].with_name("foreign-nightly.jsonl")  # (the suite's schema check skips foreign-*)
    files[14].write_text("\n".join(lines) + "\n")
    table = load_table([tmp_path / "year"])
    assert len(table.runs) == 30
    assert len(table) == 30 * 4 - 1
    err = capsys.readouterr().err
    assert "skipped 1 unreadable line(s)" in err and f"{files[14]}:3" in err
    assert run_cli("history", tmp_path / "year", "-b", "allreduce") == 0


def test_a_newer_schema_file_is_refused_by_name(template, tmp_path, capsys):
    files = nights(template, tmp_path / "year", 5)
    lines = files[3].read_text().splitlines()
    run = json.loads(lines[0])
    run["schema"] = 99
    files[3].unlink()
    files[3] = files[3].with_name("foreign-nightly.jsonl")
    files[3].write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    with pytest.raises(UsageError, match=f"{files[3]}:1: record schema 99 is newer"):
        load_table([tmp_path / "year"])
    assert run_cli("history", tmp_path / "year") == 2
    assert str(files[3]) in capsys.readouterr().err


def test_other_tools_lines_and_other_machines_are_skipped_and_said(template, tmp_path, capsys):
    folder = tmp_path / "mixed"
    nights(template, folder, 4)
    nights(template, folder / "node7", 3, changes={0: {"hosts": ["node7"]}}, start=nightlies.dt.date(2026, 2, 1))
    (folder / "foreign-imported.jsonl").write_text('{"tool": "osu_latency", "size": 8, "lat_us": 0.2}\n[1, 2]\n')
    assert run_cli("history", folder, "-b", "latency") == 0
    err = capsys.readouterr().err
    assert "skipped 2 line(s) that are not microbench records" in err and "foreign-imported.jsonl" in err
    assert "the runs span 2 host sets" in err and "--hosts picks one" in err
    host = json.loads(next(iter(sorted(folder.glob("2026-01-01/*.jsonl")))).read_text().splitlines()[0])["hosts"]
    assert run_cli("history", folder, "-b", "latency", "--hosts", ",".join(host), "--json") == 0
    captured = capsys.readouterr()
    assert "skipped 3 run(s) outside the selection" in captured.err and "on hosts node7" in captured.err
    assert all(len(s["points"]) == 4 for s in json.loads(captured.out)["series"])
    assert run_cli("history", folder, "--mpi", "MPICH") == 2
    assert "within the selection (MPI ~ 'MPICH')" in capsys.readouterr().err


def test_the_index_is_used_until_a_file_changes(template, tmp_path, capsys):
    files = nights(template, tmp_path / "year", 6)
    first = load_table([tmp_path / "year"])

    def cached() -> int:
        """How many files a scan takes from the index (decoding nothing)."""
        reader = gate_index.PartReader(ScanNotes())
        assert len(list(reader.parts(jsonl_paths(files)))) == len(files)
        return reader.notes.cached

    assert cached() == len(files)  # the first load wrote the index
    with files[-1].open("a") as f:  # the nightly job appends another run to the last file
        f.write("".join(json.dumps(r) + "\n" for r in nightlies.night_lines(
            nightlies.read_template(template), nightlies.Plan(7), 6, nightlies.random.Random(3))))
    assert cached() == len(files) - 1  # only the changed file is decoded again
    again = load_table([tmp_path / "year"])
    assert len(again.runs) == len(first.runs) + 1 and len(again) == len(first) + 4
    np_first, np_again = first.latency["p50"], again.latency["p50"]
    assert list(np_again[:len(np_first)]) == list(np_first)
    assert cached() == len(files)  # and indexed anew


class CountedPool(gate_index.ProcessPoolExecutor):
    """The reader's pool, counted: proof that worker processes decoded the files."""

    started = 0

    def __init__(self, *args, **kwargs):
        type(self).started += 1
        super().__init__(*args, **kwargs)


def test_worker_processes_read_what_one_process_reads(template, tmp_path, monkeypatch):
    files = nights(template, tmp_path / "year", 3 * gate_index.PARALLEL_FROM, night_sigma=0.03)
    monkeypatch.setattr(gate_index, "ProcessPoolExecutor", CountedPool)
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "1")
    monkeypatch.setenv("MICROBENCH_INDEX", "off")
    one = load_table([tmp_path / "year"])
    assert CountedPool.started == 0
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "2")
    monkeypatch.setenv("MICROBENCH_INDEX", str(tmp_path / "index"))
    two = load_table([tmp_path / "year"])
    assert CountedPool.started == 1
    assert [r.run_id for r in two.runs] == [r.run_id for r in one.runs] and len(one.runs) == len(files)
    assert two.configs == one.configs and list(two.config) == list(one.config)
    for stat in one.latency:
        assert two.latency[stat].tobytes() == one.latency[stat].tobytes()
    # the workers wrote the index: a second read decodes nothing and starts no worker
    reader = gate_index.PartReader(ScanNotes())
    assert len(list(reader.parts(jsonl_paths(files)))) == len(files) and reader.notes.cached == len(files)
    assert CountedPool.started == 1


def test_a_worker_error_is_the_same_usage_error(template, tmp_path, monkeypatch):
    files = nights(template, tmp_path / "year", 2 * gate_index.PARALLEL_FROM)
    lines = files[5].read_text().splitlines()
    run = json.loads(lines[0])
    run["schema"] = 99
    files[5].write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    monkeypatch.setenv("MICROBENCH_INDEX", "off")
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "2")
    with pytest.raises(UsageError, match=f"{files[5]}:1: record schema 99 is newer"):
        load_table([tmp_path / "year"])
    monkeypatch.setenv("MICROBENCH_READ_WORKERS", "none")
    with pytest.raises(UsageError, match="MICROBENCH_READ_WORKERS='none': expected a whole number"):
        load_table([tmp_path / "year"])
    files[5].unlink()  # (the suite's schema check reads every *.jsonl under the test folders)


# ------------------------------------------------------------------------------------ steps in history
# (on nights drawn from the real-launch corpus, tests/fixtures/corpus: real per-launch values and real noise)
def test_a_step_is_found_where_it_starts_with_what_changed(tmp_path, capsys):
    files = corpus.write_nights(tmp_path / "nightly", corpus.draw(random.Random(12), 20), step_night=12, factor=1.4,
                                benchmarks=("allreduce",))
    for path in files[12:]:  # a new MPI library from night 13 on
        lines = path.read_text().splitlines()
        run = json.loads(lines[0])
        run["mpi"]["library_version"] = "Open MPI v5.0.12, package: test"
        path.write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    step_run = json.loads(files[12].read_text().splitlines()[0])["run_id"]
    assert run_cli("history", tmp_path / "nightly", "-b", "allreduce,latency", "-m", "8,64", "--json",
                   "--fail-on-step") != 1
    doc = json.loads(capsys.readouterr().out)
    by_label = {s["label"]: s for s in doc["series"]}
    for name in ("allreduce 8", "allreduce 64"):
        step, = by_label[name]["steps"]
        assert step["run_id"] == step_run and step["ratio"] == pytest.approx(1.4, rel=0.15)
        assert step["worse"] and step["explained"] and not step["fails"]
        assert any(c.startswith("MPI: Open MPI v5.0.11") and "-> Open MPI v5.0.12" in c for c in step["changed"])
    assert by_label["latency 8"]["steps"] == [] and by_label["latency 64"]["steps"] == []


def test_an_unexplained_step_for_the_worse_fails_when_asked(tmp_path, capsys):
    corpus.write_nights(tmp_path / "nightly", corpus.draw(random.Random(13), 16), step_night=9, factor=1.5,
                        benchmarks=("latency",))
    assert run_cli("history", tmp_path / "nightly", "-b", "latency", "-m", "8", "-o", tmp_path / "h.png") == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "step at run" in line)
    assert "latency 8" in line and "worse" in line and line.endswith("changed: no recorded change")
    assert "^" in next(row for row in out.splitlines() if row.startswith("2026-01-10"))
    assert (tmp_path / "h.png").stat().st_size > 10_000
    assert run_cli("history", tmp_path / "nightly", "-b", "latency", "-m", "8", "--fail-on-step") == 1
    assert "-> FAIL (--fail-on-step, exit 1)" in capsys.readouterr().out


def test_no_step_in_real_nights_without_one(tmp_path, capsys):
    corpus.write_nights(tmp_path / "nightly", corpus.draw(random.Random(14), 40))
    assert run_cli("history", tmp_path / "nightly", "-m", "8,64", "-b", "allreduce,latency", "--json",
                   "--fail-on-step") != 1
    doc = json.loads(capsys.readouterr().out)
    assert [s["steps"] for s in doc["series"]] == [[], [], [], []]


def test_compare_with_a_lookback_judges_against_the_days(tmp_path, capsys):
    corpus.write_nights(tmp_path / "nightly", corpus.draw(random.Random(15), 15), step_night=14, factor=2.0,
                        benchmarks=("allreduce",))
    last = sorted((tmp_path / "nightly").iterdir())[-1]
    only = ("-b", "allreduce,latency", "-m", "8,64")
    assert run_cli("compare", "--baseline", tmp_path / "nightly", "--new", last, "--lookback", "10", "--json",
                   *only) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["lookback_days"] == 10 and len(doc["baseline"]["run_ids"]) == 10
    verdicts = {(r["config"]["benchmark"], r["config"]["size_bytes"]): r["verdict"] for r in doc["rows"]}
    assert verdicts[("allreduce", 8)] == verdicts[("allreduce", 64)] == "regression"
    assert {verdicts[("latency", 8)], verdicts[("latency", 64)]} <= {"ok", "noise"}
    assert all(r["test"] == "days" and r["baseline_days"] == 10 for r in doc["rows"])
    assert run_cli("compare", "--baseline", tmp_path / "nightly", "--new", last, "--lookback", "10", "--table",
                   *only) == 1
    out = capsys.readouterr().out
    geo = next(line for line in out.splitlines() if line.startswith("allreduce") and " .. " in line).split()
    assert float(geo[geo.index("..") - 2]) == pytest.approx(2.0, rel=0.1) and geo[-1] == "REGRESSION"


# ------------------------------------------------------------------- false steps per call, and short series
def test_a_noise_only_year_has_no_step_in_any_series(suite_template, tmp_path, capsys):
    """365 nights of 147 series, 5 % night and 2 % record noise, no step: one call judges every series, and the
    chance of a false step in that call is what it says. (Judged per series at 5 %, the last 30 nights of this
    year gave 4 false steps: a night's spell moves every series at once.)"""
    nights(suite_template, tmp_path / "year", 365, night_sigma=0.05, record_sigma=0.02, seed=1)
    for extra in (["--lookback", "30"], []):
        assert run_cli("history", tmp_path / "year", "-m", "1:1M", "--json", "--fail-on-step", *extra) == 0
        doc = json.loads(capsys.readouterr().out)
        assert len(doc["series"]) == 147 and [s for s in doc["series"] if s["steps"]] == []
        assert doc["false_steps"]["chance_per_call_at_most"] == pytest.approx(0.05)
        assert doc["false_steps"]["series_judged"] == 147
        assert doc["false_steps"]["rule"].startswith("false-step chance per call <= 5 % over 147 series")
    assert run_cli("history", tmp_path / "year", "-m", "1:1M", "--lookback", "30") == 0
    out = capsys.readouterr().out
    assert "# false-step chance per call <= 5 % over 147 series" in out
    series = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(series) == 147 and all(": no step in 30 runs (a step of x" in line for line in series), series[:3]


def test_a_week_with_a_3x_regression_is_a_step(suite_template, tmp_path, capsys):
    """8 nights, the last 4 three times slower in allreduce: 4 runs against 4, which ranks cannot judge
    (2/70 x 3 split points > 0.05 even for one series), are judged by t on the log values."""
    nights(suite_template, tmp_path / "week", 8, night_sigma=0.05, record_sigma=0.02,
           steps=[nightlies.Step(4, 3.0, ("allreduce",))])
    assert run_cli("history", tmp_path / "week", "-m", "1:1M", "--json", "--fail-on-step") == 1
    doc = json.loads(capsys.readouterr().out)
    found = {s["label"]: s["steps"] for s in doc["series"]}
    assert doc["false_steps"]["series_judged"] == 147
    for k in range(21):
        step, = found[f"allreduce {format_size(1 << k)}"]
        assert step["ratio"] == pytest.approx(3.0, rel=0.15) and step["worse"] and step["test"] == "t on logs"
        assert step["time_utc"].startswith("2026-01-05") and step["p"] <= 0.05
    assert all(steps == [] for label, steps in found.items() if not label.startswith("allreduce"))


def test_a_series_too_short_for_a_step_says_what_it_needs(suite_template, tmp_path, capsys):
    nights(suite_template, tmp_path / "short", 5, steps=[nightlies.Step(3, 3.0, ("allreduce",))])
    assert run_cli("history", tmp_path / "short", "-b", "allreduce", "-m", "8,64") == 0
    out = capsys.readouterr().out
    assert "  allreduce 8: too short: 5 run(s), needs 6 for a step to be found" in out
    assert "  allreduce 64: too short: 5 run(s), needs 6" in out and "no step" not in out
    assert "# false-step chance per call 0: no series has the runs for a step to be judged" in out
    assert run_cli("history", tmp_path / "short", "-b", "allreduce", "-m", "8", "--json") == 0
    series, = json.loads(capsys.readouterr().out)["series"]
    assert series["too_short"] and series["runs"] == 5 and series["runs_needed"] == 6 and series["steps"] == []

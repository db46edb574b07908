"""The own-cost benchmark's parts run (scripts/native_reference): the C reference and the same-launch A/B.

Behaviour only (lines, sizes, positive figures); the speed figures are the benchmark's, never a test's.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO, mpiexec_prefix, run_process, shim_or_reason


@pytest.fixture(scope="module")
def bench_overhead():
    """scripts/bench_overhead.py as a module: its own build of reference.c and its parsing of the output."""
    spec = importlib.util.spec_from_file_location("bench_overhead", REPO / "scripts" / "bench_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_measures_each_size_in_one_launch(tmp_path, mpi_lib, bench_overhead):
    exe = bench_overhead.build_reference(tmp_path, mpi_lib[1])
    cmd, env = mpiexec_prefix(2)
    for bench in ("latency", "allreduce", "iallreduce"):
        proc = run_process([*cmd, str(exe), bench, "8,1024", "200", "10"], env=env)
        assert proc.returncode == 0, proc.output
        rows = bench_overhead.json_lines_rows(proc.stdout)
        assert [(r["benchmark"], r["size_bytes"]) for r in rows] == [(bench, 8), (bench, 1024)]
        assert all(r["avg_us"] > 0 for r in rows)
    proc = run_process([*cmd, str(exe), "bogus", "8", "10", "1"], env=env)
    assert proc.returncode != 0 and "usage: reference" in proc.stderr


def test_same_launch_alternates_both_references_and_both_loops(tmp_path, mpi_lib, bench_overhead):
    if shim_or_reason(mpi_lib)[0] is None:
        pytest.skip(shim_or_reason(mpi_lib)[1])
    so = bench_overhead.build_reference(tmp_path, mpi_lib[1], shared=True)
    again = bench_overhead.build_reference(tmp_path, mpi_lib[1], shared=True, name="again")
    cmd, env = mpiexec_prefix(2)
    proc = run_process([*cmd, sys.executable, str(REPO / "scripts" / "native_reference" / "same_launch.py"), str(so),
                        "8,4096", "--again", str(again), "--blocks", "2"], env=env, timeout=300)
    assert proc.returncode == 0, proc.output
    rows = bench_overhead.json_lines_rows(proc.stdout)
    assert [(r["benchmark"], r["size_bytes"]) for r in rows] == [
        (bench, size) for bench in ("latency", "allreduce", "iallreduce") for size in (8, 4096)]
    for r in rows:
        assert set(r["mean_us"]) == {"c", "c-again", "native", "python"} and min(r["mean_us"].values()) > 0
        for ratio in ("ratio_to_c", "ratio_to_c_median"):
            assert set(r[ratio]) == {"c-again", "native", "python"} and min(r[ratio].values()) > 0


def test_cross_check_needs_an_omb_build(tmp_path):
    # OMB is the user's own build; without one the script says so in one line (CI has no OMB)
    (tmp_path / "osu_latency").write_text("not a program\n")  # not executable: not a program of OMB's
    proc = run_process([sys.executable, str(REPO / "scripts" / "cross_check_omb.py"), "--omb-dir", str(tmp_path)])
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"no OMB program with a microbench counterpart under {tmp_path}"


def test_bench_replay_measures_one_scheme_locally_and_replots_it(tmp_path):
    """scripts/bench_replay.py end to end on the cheapest setting: one local launch of one scheme, its table
    and JSON, and the table and figure drawn again from that JSON."""
    import json
    import subprocess
    import sys

    script = REPO / "scripts" / "bench_replay.py"
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(script), "--rounds", "1", "--settings", "local", "--schemes", "ddp",
                           "--iterations", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    row = [line for line in proc.stdout.splitlines() if line.startswith("| local | ddp |")]
    assert len(row) == 1
    saved = json.loads(out.read_text())["results"]["local/ddp"]
    assert saved["rounds"] == 1 and saved["predicted_ms"] > 0 and saved["ratio"] > 0
    again = subprocess.run([sys.executable, str(script), "--replot", str(out), "--figure", str(tmp_path / "f.png")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == proc.stdout and (tmp_path / "f.png").stat().st_size > 0


def test_bench_gate_errors_detect_tabulates_predicted_against_measured(tmp_path):
    """The detect mode on a tiny pool of real launches: two draws, one slowdown, the table and JSON shape."""
    import json
    import subprocess
    import sys

    pool = tmp_path / "pool"
    pool.mkdir()
    for i in range(4):
        run = microbench_run(pool / f"{i:05d}-s-normal.jsonl")
        assert run.returncode == 0, run.stderr
    out = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_gate_errors.py"), "detect", str(pool),
                           "--draws", "2", "--sides", "2", "--slowdowns", "0.5", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())["figures"]
    assert len(figures) == 1 and figures[0]["k"] == 2 and figures[0]["rows"] == 2 * 2  # 2 draws x 2 sizes
    assert 0 <= figures[0]["predicted"] <= 1 and 0 <= figures[0]["measured"] <= 1


def microbench_run(out):
    from conftest import microbench

    return microbench("run", "--np", "2", "allreduce", "latency", "-m", "8,64", "-i", "20", "-x", "2",
                      "--out", str(out))


def test_the_corpus_script_collects_real_launches_and_measures_the_gates_rates(tmp_path):
    """scripts/gate_corpus.py (issue 39) on its cheapest setting: one quiet launch and one with a busy core,
    their manifest; then the rates over the committed corpus with one draw a cell (the figures are the
    script's, docs/regressions.md's, never a test's)."""
    import json

    script = REPO / "scripts" / "gate_corpus.py"
    out = tmp_path / "corpus"
    proc = run_process([sys.executable, str(script), "collect", str(out), "--nights", "1", "--per-state", "1",
                        "--states", "quiet,one"], timeout=300)
    assert proc.returncode == 0, proc.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launches"] == 2 and manifest["failed"] == 0 and manifest["seconds"] > 0
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["n00-one-0.jsonl", "n00-quiet-0.jsonl"]
    run = json.loads((out / "n00-one-0.jsonl").read_text().splitlines()[0])
    assert run["machine"] and "MICROBENCH_SIGNAL_NOTE" in run["per_launch"]["env"]
    proc = run_process([sys.executable, str(script), "rates", str(REPO / "tests" / "fixtures" / "corpus" / "launches"),
                        "--draws", "1", "--json", str(tmp_path / "rates.json")], timeout=600)
    assert proc.returncode == 0, proc.output
    assert "| 8 + 8 | same code |" in proc.stdout and "| 30 | 2x from night 20 |" in proc.stdout
    doc = json.loads((tmp_path / "rates.json").read_text())
    assert doc["launches"] == 60 and doc["configurations"] == 48 and len(doc["compare"]) == 28

"""The own-cost benchmark's parts run (scripts/native_reference): the C reference and the same-launch A/B.

Behaviour only (lines, sizes, positive figures); the speed figures are the benchmark's, never a test's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, mpiexec_prefix, run_process
from microbench import native

REFERENCE = REPO / "scripts" / "native_reference" / "reference.c"


@pytest.fixture(scope="module")
def mpi():
    from microbench.backends.mpi import import_mpi, library

    return library(import_mpi(initialize=False))


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_reference_measures_each_size_in_one_launch(tmp_path, mpi):
    exe = tmp_path / "reference"
    subprocess.run([native.find_mpicc(mpi.prefix), "-O2", "-o", str(exe), str(REFERENCE)], check=True)
    cmd, env = mpiexec_prefix(2)
    for bench in ("latency", "allreduce"):
        proc = run_process([*cmd, str(exe), bench, "8,1024", "200", "10"], env=env)
        assert proc.returncode == 0, proc.output
        rows = json_lines(proc.stdout)
        assert [(r["benchmark"], r["size_bytes"]) for r in rows] == [(bench, 8), (bench, 1024)]
        assert all(r["avg_us"] > 0 for r in rows)
    proc = run_process([*cmd, str(exe), "bogus", "8", "10", "1"], env=env)
    assert proc.returncode != 0 and "usage: reference" in proc.stderr


def test_same_launch_alternates_the_reference_and_both_loops(tmp_path, mpi):
    try:
        native.build_shim(mpi.prefix, mpi.path)
    except native.NativeUnavailable as exc:
        pytest.skip(f"the C call shim cannot be built here: {exc}")
    so = tmp_path / "reference.so"
    subprocess.run([native.find_mpicc(mpi.prefix), "-O2", "-fPIC", "-shared", "-Dmain=reference_main", "-o", str(so),
                    str(REFERENCE)], check=True)
    cmd, env = mpiexec_prefix(2)
    proc = run_process([*cmd, sys.executable, str(REPO / "scripts" / "native_reference" / "same_launch.py"), str(so),
                        "8,4096", "--blocks", "2"], env=env, timeout=300)
    assert proc.returncode == 0, proc.output
    rows = json_lines(proc.stdout)
    assert [(r["benchmark"], r["size_bytes"]) for r in rows] == [("latency", 8), ("latency", 4096),
                                                                ("allreduce", 8), ("allreduce", 4096)]
    for r in rows:
        assert set(r["mean_us"]) == {"c", "native", "python"} and min(r["mean_us"].values()) > 0
        assert set(r["ratio_to_c"]) == {"native", "python"} and min(r["ratio_to_c"].values()) > 0

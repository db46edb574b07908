"""Issue 46: what a rank imports and touches before it measures (docs/startup.md).

Real launches (2 ranks under the bundled MPI's mpiexec), each process run under scripts/startup_costs.py's
counter, which lists the modules a process ended with and counts its file-system calls. The budgets are module
counts and names, never times.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(600)

#: microbench modules a measuring rank other than rank 0 may import (about 50 today; the budget leaves room
#: for a small module or two, not for a layer: one heavy import brings a dozen)
RANK_MODULES_BUDGET = 62
#: modules of any package beyond the floor's (mpi4py + numpy) that rank 1 may import
RANK_BEYOND_FLOOR_BUDGET = 80
#: what no measuring rank imports: the layers above the run and the plotting library
NEVER_ON_A_RANK = ("microbench.plotting", "microbench.gate", "microbench.report", "microbench.workload",
                   "microbench.importers", "matplotlib")
#: and what only rank 0 needs (the records, the results reader, the replay's model)
NOT_ON_RANK_1 = ("microbench.results", "microbench.replay", "microbench.records.model", "microbench.records.writer",
                 "msgspec", "json", "csv")


def _costs():
    spec = importlib.util.spec_from_file_location("startup_costs", ROOT / "scripts" / "startup_costs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def costs():
    return _costs()


def _launch(costs, tmp: Path, command: list[str], cache: Path | None = None) -> dict[str, dict]:
    """Launch ``command`` (python arguments) on 2 ranks under the counter; rank -> its counter line."""
    runner, extra = costs.mpiexec(2)
    counter = costs.counter_file(tmp)
    env = {**extra, "PYTHONPATH": str(ROOT), "MICROBENCH_CACHE_DIR": str(cache or tmp / "cache")}
    lines = costs.count([*runner, sys.executable, str(counter), *command], env, tmp / "count.counts")
    return {line["rank"]: line for line in lines}


@pytest.fixture(scope="module")
def run_launch(costs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("startup")
    out = tmp / "results.jsonl"
    command = ["-m", "microbench", "run", "allreduce", "-m", "8", "-i", "20", "-x", "2", "--out", str(out)]
    _launch(costs, tmp, command[:-1] + [str(tmp / "first.jsonl")])  # builds the native loop, writes bytecode
    return _launch(costs, tmp, command), out, tmp


def _ours(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "microbench" or m.startswith("microbench.")]


def _hits(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_a_measuring_rank_imports_what_it_runs_and_no_more(run_launch):
    ranks, out, _ = run_launch
    assert set(ranks) == {"0", "1"}, ranks
    assert [json.loads(line)["type"] for line in out.read_text().splitlines()].count("result") == 1
    rank1 = ranks["1"]["modules"]
    assert _hits(rank1, NEVER_ON_A_RANK + NOT_ON_RANK_1) == []
    assert len(_ours(rank1)) <= RANK_MODULES_BUDGET, _ours(rank1)
    assert _hits(ranks["0"]["modules"], NEVER_ON_A_RANK) == []
    assert "microbench.records.writer" in ranks["0"]["modules"]  # the one writer, on rank 0 alone


def test_rank_1_imports_little_beyond_the_floor(costs, run_launch, tmp_path):
    ranks, _, _ = run_launch
    floor = _launch(costs, tmp_path, ["-c", "from mpi4py import MPI; import numpy"])
    floor_modules = set(floor["1"]["modules"])
    beyond = sorted(set(ranks["1"]["modules"]) - floor_modules)
    assert len(beyond) <= RANK_BEYOND_FLOOR_BUDGET, beyond
    assert floor["1"]["total"] > 0 and ranks["1"]["total"] > floor["1"]["total"]  # the counter counts


def test_the_np_parent_loads_no_mpi_and_no_numpy(costs, run_launch, tmp_path):
    _, _, tmp = run_launch  # its cache folder holds the launcher's memo from the launches above
    counter = costs.counter_file(tmp_path)
    env = {"PYTHONPATH": str(ROOT), "MICROBENCH_CACHE_DIR": str(tmp / "cache")}
    command = [sys.executable, str(counter), "-m", "microbench", "run", "--np", "2", "allreduce", "-m", "8", "-i", "10",
               "-x", "1", "--out", str(tmp_path / "r.jsonl")]
    costs.count(command, env, tmp_path / "first.counts")  # the first --np launch loads MPI once to find mpiexec
    lines = costs.count(command, env, tmp_path / "parent.counts")
    parent = next(line for line in lines if line["rank"] == "-")
    assert _hits(parent["modules"], ("numpy", "mpi4py.MPI", "msgspec", "microbench.records.model", "matplotlib")) \
        == [], parent["modules"]
    assert (tmp_path / "r.jsonl").exists()


def _logging_wrapper(tmp: Path) -> tuple[Path, Path]:
    """An mpicc that logs each call (with the rank the launcher gave its caller) and runs the real one."""
    from microbench.cluster.mpi_runtime import launcher_library
    from microbench.measure.native.toolchain import find_mpicc

    real = find_mpicc(launcher_library()[0])
    log = tmp / "mpicc.log"
    wrapper = tmp / "mpicc"
    wrapper.write_text(f'#!/bin/sh\necho "${{OMPI_COMM_WORLD_RANK:-?}} $*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def test_the_compiler_wrapper_runs_on_rank_0_once_and_never_again(costs, tmp_path):
    wrapper, log = _logging_wrapper(tmp_path)
    runner, extra = costs.mpiexec(2)
    env = {**os.environ, **extra, "PYTHONPATH": str(ROOT), "MICROBENCH_CACHE_DIR": str(tmp_path / "cache"),
           "MICROBENCH_MPICC": str(wrapper)}
    command = [*runner, sys.executable, "-m", "microbench", "run", "allreduce", "-m", "8", "-i", "10", "-x", "1",
               "--out", str(tmp_path / "r.jsonl")]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    assert calls and all(c.split()[0] == "0" for c in calls), calls  # rank 0 builds; rank 1 loads its file
    log.unlink()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert not log.exists(), log.read_text()  # flags and the built loop both remembered


def test_the_launcher_memo_is_used_and_checked(tmp_path):
    """The --np parent's memo of which MPI mpi4py loads: written once, then read without loading MPI; a memo
    whose facts no longer match (garbled, or a library replaced) is not trusted."""
    probe = ("import sys, json; from microbench.cluster.mpi_runtime import launcher_library; "
             "print(json.dumps([list(launcher_library()), 'mpi4py.MPI' in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MICROBENCH_CACHE_DIR": str(tmp_path / "cache")}

    def ask():
        proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    truth, loaded = ask()
    assert loaded and truth[1] in ("openmpi", "mpich")
    again, loaded = ask()
    assert again == truth and not loaded
    memos = list((tmp_path / "cache").glob("launcher-*.txt"))
    assert len(memos) == 1
    lines = memos[0].read_text().split("\n")
    memos[0].write_text("\n".join([lines[0], "/nowhere", lines[2], lines[3], "1 1"]))  # a replaced library
    answer, loaded = ask()
    assert answer == truth and loaded
    memos[0].write_text("garbage")
    answer, loaded = ask()
    assert answer == truth and loaded


def test_the_bundled_wheel_is_named_as_importlib_metadata_names_it():
    from importlib import metadata

    from microbench.cluster.mpi_runtime import _bundled_distribution, import_mpi, library

    path = library(import_mpi(initialize=False)).path
    expected = None
    for name in ("openmpi", "mpich", "impi-rt", "msmpi"):
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        if any(f.name.startswith("libmpi") and os.path.realpath(f.locate()) == os.path.realpath(path) for f in files):
            expected = name
            break
    assert expected is not None  # the bundled wheel is what these tests run on
    assert _bundled_distribution(path) == expected
    assert _bundled_distribution("/usr/lib/libmpi.so.40") is None


def test_a_zip_application_runs_and_writes_records(costs, tmp_path):
    pyz = tmp_path / "microbench.pyz"
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_zipapp.py"), "-o", str(pyz)],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert built.returncode == 0, built.stderr
    runner, extra = costs.mpiexec(2)
    out = tmp_path / "z.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the archive alone supplies microbench
    env.update(extra, MICROBENCH_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([*runner, sys.executable, str(pyz), "run", "allreduce", "-m", "8:64", "-i", "10", "-x", "1",
                           "-c", "--out", str(out)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["type"] for r in records].count("result") == 4 and records[-1]["status"] == "complete"

"""Helpers for tests that launch real ranks: every launch has a timeout and leaves nothing behind."""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The test-only fault hooks (microbench/measure/testhooks.py) act only with this set; the suite sets it for every
# process it starts, and a test that checks the gate itself removes it.
os.environ["MICROBENCH_TESTING"] = "1"


# ------------------------------------------------------------------------------ required groups
#: test module (glob) -> the group of optional parts its tests need; every other module is "core"
GROUPS = {"test_torch.py": "torch", "test_slurm.py": "slurm", "test_emulated_slurm.py": "slurm",
          "test_emulated_*.py": "emulated-cluster", "test_reframe.py": "reframe", "test_report*.py": "report",
          "test_required_groups.py": "canary", "canary_*.py": "canary"}
#: groups that must each pass at least one test and may not skip (CI sets them: .ci/run)
REQUIRED = {g for g in os.environ.get("MICROBENCH_REQUIRED_GROUPS", "").split(",") if g}

#: The only tests that may skip where their group is required, each with the reason (test id without its
#: parameters). Nothing else can exempt itself: the ``gpu`` marker only documents.
MAY_SKIP = {
    **{f"tests/test_torch.py::{name}": "needs a CUDA GPU (CI has none; run by hand on a GPU node)" for name in (
        "test_single_rank_nccl_with_cuda_events_and_graph", "test_mpi_device_buffers_staged_or_cuda_aware",
        "test_gpu_cold_cache_uses_the_l2", "test_graph_replays_start_aligned",
        "test_cold_graphs_rotate_through_the_pool", "test_mpi_device_buffers_with_a_device_flush",
        "test_staged_in_place_moves_the_device_data")},
    "tests/test_cache.py::test_huge_pages_granted_by_this_kernel_are_counted":
        "whether the kernel grants huge pages depends on its THP mode and fragmentation",
    "tests/canaries/canary_skips.py::test_listed_skip": "a canary: shows that a listed test may skip",
}


def group_of(path) -> str:
    """The group a test module belongs to (see GROUPS)."""
    name = Path(str(path)).name
    return next((group for pattern, group in GROUPS.items() if fnmatch.fnmatch(name, pattern)), "core")


def may_skip(nodeid: str) -> bool:
    """Whether a test is on the MAY_SKIP list (its id relative to the repository, parameters dropped)."""
    return nodeid.split("[")[0] in MAY_SKIP


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (documents it; MAY_SKIP in conftest.py lets it skip)")
    config.addinivalue_line("markers", "may_skip(reason): documents a skip that MAY_SKIP in conftest.py allows")
    config._microbench_passed = {group: 0 for group in REQUIRED}


def _required_skip(report, group: str) -> None:
    """Turn a skip of a required group into a failure that says which group and why it skipped."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"required group '{group}' skipped (MICROBENCH_REQUIRED_GROUPS): {reason}"


def _nodeid(item) -> str:
    """The test's id relative to the repository (pytest's own is relative to its rootdir)."""
    return f"{Path(str(item.path)).resolve().relative_to(REPO)}::{item.name}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    group = group_of(item.path)
    if report.skipped and group in REQUIRED and not may_skip(_nodeid(item)):
        _required_skip(report, group)
    if report.passed and report.when == "call" and group in REQUIRED:
        item.config._microbench_passed[group] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(collector, pytest.Module) and group_of(collector.path) in REQUIRED:
        _required_skip(report, group_of(collector.path))


def pytest_sessionfinish(session, exitstatus):
    """A required group that passed no test fails the run, naming the group (deleted, deselected, all skipped)."""
    passed = getattr(session.config, "_microbench_passed", {})
    empty = sorted(group for group, count in passed.items() if count == 0)
    if empty:
        session.config._microbench_empty_groups = empty
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for group in getattr(config, "_microbench_empty_groups", ()):
        terminalreporter.write_line(f"FAILED: required group '{group}' passed no test (MICROBENCH_REQUIRED_GROUPS)",
                                    red=True)


@pytest.fixture(scope="session", autouse=True)
def every_record_matches_the_schema(tmp_path_factory):
    """After the whole session: every JSON Lines file any test wrote under pytest's temporary folders holds
    records that conform to microbench/records/schema.json (files of other formats are left alone)."""
    yield
    from microbench.records.validate import file_problems  # needs jsonschema, from the test extra

    base = tmp_path_factory.getbasetemp()
    found = []
    for path in sorted(base.rglob("*.jsonl")):
        if path.name.startswith("foreign-") or not path.is_file() or path.is_symlink():
            continue  # inputs deliberately not in microbench's format, and hostile ones (FIFOs, device links)
        found.extend(file_problems(path))
    assert not found, "records that do not match the schema:\n" + "\n".join(found[:20])


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_process(cmd: list[str], timeout: float = 120, env: dict | None = None, cwd=None) -> Completed:
    """Run a command in its own process group; on timeout kill the group and fail the test."""
    import time

    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\nstdout:\n{out}\nstderr:\n{err}")
    return Completed(proc.returncode, out, err, time.monotonic() - start)


def microbench(*args: str, timeout: float = 120, env: dict | None = None, cwd=None) -> Completed:
    """``python -m microbench ARGS`` (self-launching with --np where the args say so)."""
    return run_process([sys.executable, "-m", "microbench", *args], timeout=timeout, env=env, cwd=cwd)


def mpiexec_prefix(nranks: int) -> tuple[list[str], dict]:
    """The matching mpiexec for the installed MPI, with the environment microbench itself would use."""
    from microbench.cluster import launch
    from microbench.cluster.mpi_runtime import import_mpi, library

    lib = library(import_mpi(initialize=False))
    return launch.mpiexec_command(lib.prefix, lib.abi, nranks)


def mpiexec(nranks: int, *args: str, timeout: float = 120, env: dict | None = None) -> Completed:
    """``mpiexec -n N python -m microbench ARGS``: microbench under a launcher, as on a cluster."""
    cmd, extra = mpiexec_prefix(nranks)
    return run_process([*cmd, sys.executable, "-m", "microbench", *args], timeout=timeout, env={**extra, **(env or {})})


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def results_of(path) -> list[dict]:
    return [r for r in read_jsonl(path) if r.get("type") == "result"]


@pytest.fixture(scope="module")
def mpi_lib():
    """(mpi4py.MPI without initialising MPI, the loaded library's facts)."""
    from microbench.cluster.mpi_runtime import import_mpi, library

    MPI = import_mpi(initialize=False)
    return MPI, library(MPI)


def shim_or_reason(mpi_lib):
    """The C call shim's path, or why it cannot be built here (only a missing Python.h is acceptable)."""
    from microbench.measure.native import toolchain

    _, lib = mpi_lib
    try:
        return toolchain.build_shim(lib.prefix, lib.path), None
    except toolchain.NativeUnavailable as exc:
        assert "Python.h" in str(exc), exc
        return None, str(exc)


@pytest.fixture(scope="session")
def emulated_cluster():
    """Five nodes as network namespaces (tests/emulated_cluster.py), for this test session; torn down at its
    end whatever the tests did. Skips where namespaces cannot be made."""
    import atexit

    import emulated_cluster as emu

    why = emu.missing()
    if why:
        pytest.skip(why)
    cluster = emu.EmulatedCluster(5, f"t{os.getpid()}")
    atexit.register(cluster.down)  # also when the session ends without running finalizers
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()

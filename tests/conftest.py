"""Helpers for tests that launch real ranks: every launch has a timeout and leaves nothing behind."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
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
# ... so a fault hook left in the calling shell (MICROBENCH_TEST_*) would act in every test: the tests set their own
for _name in [n for n in os.environ if n.startswith("MICROBENCH_TEST_")]:
    del os.environ[_name]


# Under pytest-xdist (the README's `-n auto`) tests run in worker processes gw0, gw1, ... at once. torchrun's
# rendezvous port (29500 unless --master-port; PET_MASTER_PORT sets its default) and the doctor's store port
# (MASTER_PORT, else 29500) are fixed: each worker gets its own, from the session's id (another session on the same
# machine, a CI run beside a developer's, gets others 89 times in 90), in 20000..28999, below the kernel's ephemeral
# range (32768 and up) so that no outgoing connection takes it.
_WORKER, _SESSION = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    _base = 20000 + 100 * (int(hashlib.sha256(_SESSION.encode()).hexdigest(), 16) % 90)  # 100 workers apart
    for _name in ("PET_MASTER_PORT", "MASTER_PORT"):
        os.environ.setdefault(_name, str(_base + int(_WORKER[2:]) % 100))

#: test modules that share a machine-wide resource run on one worker, one after another: the emulated cluster
#: (a session fixture: five network namespaces, built once) and the test Slurm clusters. Every other module is a
#: group of its own, so the launches its tests share (module-scoped fixtures) are made once.
RUN_TOGETHER = {"test_emulated_*.py": "emulated cluster and Slurm", "test_slurm.py": "emulated cluster and Slurm"}
#: the longest groups (a minute or more of launches each on a 2-core VM), handed to the workers first so that no
#: worker is left running one of them while the others are done; the rest follow in their usual order
LONGEST_FIRST = ("emulated cluster and Slurm", "test_replay_mpi.py", "test_hostile_findings.py", "test_torch.py",
                 "test_overlap_launch.py", "test_reframe.py", "test_run_mpi.py", "test_doctor.py")


def _matching(path, table: dict[str, str], default: str | None = None) -> str:
    """The value of the first glob in ``table`` that a test module's file name matches; else ``default`` (its
    file name where None)."""
    name = Path(str(path)).name
    return next((value for pattern, value in table.items() if fnmatch.fnmatch(name, pattern)), default or name)


def dist_group(path) -> str:
    """The group of workers' work a test module belongs to (its file name, or its RUN_TOGETHER group)."""
    return _matching(path, RUN_TOGETHER)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the order the groups are handed out
        rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(dist_group(item.path), len(rank)))  # stable: each keeps its order


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by file (``--dist loadfile``, pyproject.toml), with RUN_TOGETHER's files one unit
    and the units handed out in collection order (LONGEST_FIRST), not by their number of tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return dist_group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False
    return ByGroup(config, log)


# ------------------------------------------------------------------------------ required groups
#: test module (glob) -> the group of optional parts its tests need; every other module is "core"
GROUPS = {"test_torch.py": "torch", "test_doctor_torch.py": "torch", "test_slurm.py": "slurm",
          "test_emulated_slurm.py": "slurm",
          "test_emulated_*.py": "emulated-cluster", "test_reframe.py": "reframe", "test_report*.py": "report",
          "test_required_groups.py": "canary", "canaries.py": "canary"}
#: groups whose tests must run (CI sets them: .ci/run): a skip in one fails the run, unless the test is in
#: ALLOWED_SKIPS and skipped for the reason given there; each must pass at least one test; none may be deselected
REQUIRED = {g for g in os.environ.get("MICROBENCH_REQUIRED_GROUPS", "").split(",") if g}

_NO_CUDA = ("needs a CUDA GPU, and CI has none (README: run them by hand with `-m gpu`)",
            r"^no CUDA device \(torch\.cuda\.is_available\(\) is False\)$")
#: the only tests that may skip where their group is required: "module::function" -> (why, a regular expression
#: the skip's reason must match). A test marked ``gpu`` or ``may_skip`` must be here; the marks alone allow nothing.
ALLOWED_SKIPS: dict[str, tuple[str, str]] = {
    "test_torch.py::test_single_rank_nccl_with_cuda_events_and_graph": _NO_CUDA,
    "test_torch.py::test_mpi_device_buffers_staged_or_cuda_aware": _NO_CUDA,
    "test_torch.py::test_gpu_cold_cache_uses_the_l2": _NO_CUDA,
    "test_torch.py::test_graph_replays_start_aligned": _NO_CUDA,
    "test_torch.py::test_cold_graphs_rotate_through_the_pool": _NO_CUDA,
    "test_torch.py::test_mpi_device_buffers_with_a_device_flush": _NO_CUDA,
    "test_torch.py::test_staged_in_place_moves_the_device_data": _NO_CUDA,
    "test_torch.py::test_paired_nccl_samples_wait_behind_the_gate": _NO_CUDA,
    "test_torch.py::test_two_ranks_on_one_gpu_are_refused_before_nccl": _NO_CUDA,
    "test_cache.py::test_huge_pages_granted_by_this_kernel_are_counted": (
        "whether the kernel grants huge pages depends on its THP mode and on fragmentation",
        r"^transparent huge pages are \w+ on this kernel|^this kernel granted no huge page"),
    "canaries.py::test_allowed_skip": ("canary: shows that an allowed skip stays a skip", r"^canary: allowed$"),
}
_EXEMPTING_MARKS = ("gpu", "may_skip")
#: what the required-group check counts, in the process that reports (the one process, or under pytest-xdist the
#: controller, which receives every worker's reports; a worker's deselections reach it at the worker's end)
_COUNTS: dict = {"passed": {}, "deselected": set()}
_DESELECTED_KEY = "microbench_deselected"  #: a worker's deselected node ids, in its workeroutput


def group_of(path) -> str:
    """The group a test module belongs to (see GROUPS)."""
    return _matching(path, GROUPS, "core")


def skip_key(item) -> str:
    """The item's key in ALLOWED_SKIPS: its module's file name and its function's name (no parameters)."""
    return f"{item.path.name}::{getattr(item, 'originalname', item.name)}"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (select with -m gpu); may skip only if in ALLOWED_SKIPS")
    config.addinivalue_line("markers", "may_skip(reason): may skip only if in ALLOWED_SKIPS (tests/conftest.py)")
    known = set(GROUPS.values()) | {"core"}
    if REQUIRED - known:
        raise pytest.UsageError(f"MICROBENCH_REQUIRED_GROUPS names unknown groups {sorted(REQUIRED - known)}; "
                                f"the groups are {sorted(known)}")
    _COUNTS["passed"] = dict.fromkeys(sorted(REQUIRED), 0)
    _COUNTS["deselected"] = set()


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def _required_skip(report, group: str) -> None:
    """Turn a skip of a required group into a failure that says which group and why it skipped."""
    report.longrepr = f"required group '{group}' skipped (MICROBENCH_REQUIRED_GROUPS): {_skip_reason(report)}"
    report.outcome = "failed"


def _allowed_skip(item, report) -> bool:
    allowed = ALLOWED_SKIPS.get(skip_key(item))
    return allowed is not None and re.search(allowed[1], _skip_reason(report)) is not None


@pytest.hookimpl(tryfirst=True)  # before skipif marks are evaluated
def pytest_runtest_setup(item):
    marks = [m for m in _EXEMPTING_MARKS if item.get_closest_marker(m)]
    if marks and skip_key(item) not in ALLOWED_SKIPS:
        pytest.fail(f"marked {', '.join(marks)} but not in ALLOWED_SKIPS (tests/conftest.py): a test may be "
                    f"exempted from the required groups only there, with its reason", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    group = group_of(item.path)
    if group in REQUIRED and report.skipped and not _allowed_skip(item, report):
        _required_skip(report, group)


def pytest_runtest_logreport(report):
    group = group_of(report.nodeid.split("::")[0])
    if group in REQUIRED and report.passed and report.when == "call":
        _COUNTS["passed"][group] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(collector, pytest.Module) and group_of(collector.path) in REQUIRED:
        _required_skip(report, group_of(collector.path))


def pytest_deselected(items):
    if REQUIRED:
        _COUNTS["deselected"].update(i.nodeid for i in items if group_of(i.path) in REQUIRED)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, in the controller: a worker's deselections
def pytest_testnodedown(node, error):
    _COUNTS["deselected"].update(getattr(node, "workeroutput", {}).get(_DESELECTED_KEY, []))


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _required_group_problems() -> list[str]:
    out = [f"required group '{g}' passed no test (MICROBENCH_REQUIRED_GROUPS): its modules were not collected, "
           f"were deselected or all failed" for g, n in _COUNTS["passed"].items() if n == 0]
    deselected = sorted(_COUNTS["deselected"])
    if deselected:
        out.append(f"{len(deselected)} tests of required groups deselected (-k, -m, --deselect, PYTEST_ADDOPTS), "
                   f"e.g. {deselected[0]}")
    return out


def pytest_sessionfinish(session, exitstatus):
    if _is_xdist_worker(session.config):  # the controller judges, from every worker's reports
        session.config.workeroutput[_DESELECTED_KEY] = sorted(_COUNTS["deselected"])
        return
    if _required_group_problems() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_xdist_worker(config):
        return
    problems = _required_group_problems()
    if problems:
        terminalreporter.section("required groups", sep="=", red=True, bold=True)
        for line in problems:
            terminalreporter.line(f"FAILED {line}", red=True)


#: files of the session whose records are also checked against the JSON Schema (jsonschema is slow; the model
#: checks every file, and the schema is printed from the model: tests/test_record_model.py)
SCHEMA_SAMPLE = 40


@pytest.fixture(scope="session", autouse=True)
def every_record_matches_the_schema(tmp_path_factory):
    """After the whole session: every JSON Lines file any test wrote under pytest's temporary folders holds
    records that the record model accepts (microbench/records/model.py: types, ranges, relations), and a sample
    of them (every ``len // SCHEMA_SAMPLE``-th file) also validates against the JSON Schema printed from it.
    Files of other formats are left alone."""
    yield
    from microbench.records.validate import file_problems, model_problems  # jsonschema: the test extra

    base = tmp_path_factory.getbasetemp()
    paths = [p for p in sorted(base.rglob("*.jsonl"))
             if not p.name.startswith("foreign-") and p.is_file() and not p.is_symlink()]  # hostile inputs aside
    found = [problem for path in paths for problem in model_problems(path)]
    step = max(1, len(paths) // SCHEMA_SAMPLE)
    found += [problem for path in paths[::step] for problem in file_problems(path)]
    assert not found, "records that do not match the record model or its schema:\n" + "\n".join(found[:20])


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


#: Open MPI's launcher failing to start itself, before any rank (seen about once in 1,600 launches with both cores
#: busy, exit 213 in 0.05 s; other projects' CI meets it too): not what a test checks, so such a launch is made again
LAUNCHER_DID_NOT_START = "The PMIx server's listener thread failed to start"


def run_process(cmd: list[str], timeout: float = 120, env: dict | None = None, cwd=None) -> Completed:
    """Run a command in its own process group; on timeout kill the group and fail the test. A launch whose
    mpiexec did not start at all (``LAUNCHER_DID_NOT_START``, nothing on stdout) is made again, twice at most."""
    for _ in range(2):
        done = _run_once(cmd, timeout, env, cwd)
        if done.returncode == 0 or done.stdout or LAUNCHER_DID_NOT_START not in done.stderr:
            return done
    return _run_once(cmd, timeout, env, cwd)


def _run_once(cmd: list[str], timeout: float, env: dict | None, cwd) -> Completed:
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


def assert_figure(path, min_side: int = 100) -> None:
    """``path`` is a PNG that decodes to a picture of at least ``min_side`` pixels a side and more than one colour."""
    from matplotlib.image import imread

    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pixels = imread(path)
    assert min(pixels.shape[:2]) >= min_side and pixels.min() < pixels.max(), (path, pixels.shape)


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

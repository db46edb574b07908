"""The engine and the sweep in this process, on a real one-rank MPI (a singleton on MPI_COMM_WORLD).

Seconds, not minutes: a change to the timed loop or the sweep is checked here first; the multi-rank
launch tests (test_run_mpi.py and others) check the same paths across ranks.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from microbench.benchmarks.table import ALLREDUCE, COLLECTIVES, Context
from microbench.cli import build_parser
from microbench.measure import engine
from microbench.measure.loops import PythonLoop
from microbench.measure.native import loops as native_loops
from microbench.measure.native import toolchain
from microbench.measure.testhooks import FaultHooks, SizeHooks
from microbench.options import RunOptions
from microbench.records import Output
from microbench.records.validate import problems
from microbench.run import watchdog as faults


@pytest.fixture(scope="module")
def world():
    """MPI initialised in this process as a one-rank job (Open MPI's singleton mode)."""
    os.environ.setdefault("OMPI_MCA_btl", "^ofi")  # as microbench's own launches: no libfabric probe
    os.environ.setdefault("OMPI_MCA_mtl", "^ofi")
    from microbench.cluster.world import init_world

    w = init_world()
    assert w.nranks == 1
    return w


def _options(*argv: str) -> RunOptions:
    args = build_parser(["run", *argv]).parse_args(["run", *argv])
    return RunOptions.from_args(args)


def _context(world, *argv: str, out: Output | None = None):
    from microbench.run import driver as runner

    opts = _options(*argv)
    watchdog = faults.Watchdog(faults.RunState(0), 0, abort=world.abort)
    rc = runner.set_up(world, opts, FaultHooks({}), watchdog)
    rc.out = out
    return rc


class _Records:
    """A stand-in for the table: collects what the one writer hands it."""

    def __init__(self):
        self.seen: list[tuple[str, dict]] = []

    def __call__(self, kind: str, rec: dict) -> None:
        self.seen.append((kind, rec))

    def of(self, kind: str) -> list[dict]:
        return [r for k, r in self.seen if k == kind]


def _allreduce_pool(world, count: int, nslots: int = 1):
    from microbench.measure.backends.mpi import MPIBackend
    from microbench.measure.buffers import BufferPool

    backend = MPIBackend(world.MPI.COMM_SELF, world.MPI)
    pool = BufferPool(count, count, np.dtype(np.float32), nslots=nslots)
    ctx = Context(rank=0, nranks=1)
    calls = [ALLREDUCE.build(backend, slot, ctx) for slot in pool.slots]
    return backend, pool, ctx, calls


def test_engine_gives_one_sample_per_timed_iteration(world):
    backend, pool, ctx, calls = _allreduce_pool(world, 2, nslots=3)
    settings = engine.LoopSettings(iterations=50, warmup=7)
    m = engine.measure(ALLREDUCE, ctx, pool.slots, calls, PythonLoop(), settings, backend.barrier(), lambda v: v,
                       timing=True)
    assert (m.iterations, m.warmup, m.check_errors) == (50, 7, None)
    assert m.samples_us.shape == (50,) and np.all(m.samples_us > 0)
    assert m.first_call_us is not None and m.first_call_us > 0
    pool.close()


def test_engine_checks_every_iteration_and_sees_corruption(world):
    backend, pool, ctx, calls = _allreduce_pool(world, 16, nslots=2)
    settings = engine.LoopSettings(iterations=5, warmup=2, check=True, first_call=False)
    clean = engine.measure(ALLREDUCE, ctx, pool.slots, calls, PythonLoop(), settings, backend.barrier(), lambda v: v,
                           timing=True)
    assert clean.check_errors == 0 and len(clean.samples_us) == 5
    bad = engine.measure(ALLREDUCE, ctx, pool.slots, calls, PythonLoop(), settings, backend.barrier(), lambda v: v,
                         timing=True, hooks=SizeHooks(corrupt=True))
    assert bad.check_errors == 5  # one flipped byte of one element per iteration
    pool.close()


def test_engine_time_budget_agrees_on_the_slowest_estimate(world):
    backend, pool, ctx, calls = _allreduce_pool(world, 2)
    asked = []

    def agree_max(value: float) -> float:
        asked.append(value)
        return 0.001  # another rank says 1 ms per iteration

    settings = engine.LoopSettings(iterations=1, warmup=1, time_budget_s=0.02)
    m = engine.measure(ALLREDUCE, ctx, pool.slots, calls, PythonLoop(), settings, backend.barrier(), agree_max,
                       timing=True)
    assert len(asked) == 1 and asked[0] > 0
    assert m.iterations == 20 and m.warmup == 3  # 0.02 s / 1 ms; warmup topped up to 3 for the estimate
    pool.close()


def test_native_loop_through_the_engine(world, mpi_lib):
    _, lib = mpi_lib
    try:
        loop = native_loops.NativeLoop(native_loops.load(toolchain.build(lib.prefix, lib.path), world.MPI.Get_library_version()))
    except toolchain.NativeUnavailable as exc:
        pytest.skip(f"native loop unavailable here: {exc}")
    from microbench.measure.backends.mpi import NativeMPIBackend
    from microbench.measure.buffers import BufferPool

    backend = NativeMPIBackend(world.MPI.COMM_SELF, world.MPI)
    pool = BufferPool(4, 4, np.dtype(np.float32), nslots=2)
    ctx = Context(rank=0, nranks=1)
    calls = [ALLREDUCE.build(backend, slot, ctx) for slot in pool.slots]
    m = engine.measure(ALLREDUCE, ctx, pool.slots, calls, loop, engine.LoopSettings(iterations=30, warmup=3),
                       backend.barrier(), lambda v: v, timing=True)
    assert m.samples_us.shape == (30,) and loop.last_timer in ("tsc", "host")
    checked = engine.measure(ALLREDUCE, ctx, pool.slots, calls, loop,
                             engine.LoopSettings(iterations=4, warmup=1, check=True), backend.barrier(), lambda v: v,
                             timing=True)
    assert checked.check_errors == 0 and loop.last_timer == loop.timer  # one lean iteration at a time
    pool.close()


def test_sweep_writes_one_valid_record_per_size_and_cache_pass(world, tmp_path):
    from microbench.run import sweep

    table = _Records()
    out = Output(str(tmp_path / "r.jsonl"), table=table)
    rc = _context(world, "allreduce", "reduce_scatter", "-m", "2,8,12", "-i", "5", "-x", "1", "-c",
                  "--cache", "both", "--cache-size", "64K", "--loop", "mpi4py", out=out)
    failed = sweep.run_benchmark(rc, COLLECTIVES["allreduce"]) + sweep.run_benchmark(rc, COLLECTIVES["reduce_scatter"])
    out.close()
    results = table.of("result")
    assert failed == []
    # 2 B is below one float32 (skipped, noted); 8 and 12 measured warm and cold; reduce_scatter likewise
    assert [(r["benchmark"], r["size_bytes"], r["cache"]) for r in results] == [
        (b, s, c) for b in ("allreduce", "reduce_scatter") for s in (8, 12) for c in ("warm", "cold")]
    assert all(r["check"] == "pass" and r["iterations"] == 5 and r["call_path"] == "mpi4py" for r in results)
    assert [r["first_call_us"] is not None for r in results] == [True, False] * 4  # the first pass only
    assert any("sizes 2 B skipped" in n["text"] for n in table.of("note"))
    assert [p for r in results for p in problems(r)] == []


def test_sweep_marks_a_corrupted_size_failed(world, tmp_path):
    from microbench.run import sweep

    table = _Records()
    out = Output(None, table=table)
    rc = _context(world, "allreduce", "-m", "8,16", "-i", "3", "-x", "0", "-c", "--loop", "mpi4py", out=out)
    rc.hooks = FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_CORRUPT": "0:allreduce:16"})
    assert sweep.run_benchmark(rc, COLLECTIVES["allreduce"]) == ["16 at rank 0"]  # the node whose data was wrong
    assert [r["check"] for r in table.of("result")] == ["pass", "fail"]


LAUNCH_AGREEMENT = """
from types import SimpleNamespace
from microbench.cluster.world import init_world
from microbench.measure.loops import LaunchFacts
from microbench.run.sweep import agree_launch
world = init_world()
mine = LaunchFacts(1.0, 10.0) if world.rank == 0 else LaunchFacts(9.5, 10.0)  # rank 1 is launch-bound
agreed = agree_launch(SimpleNamespace(reducer=world.reducer), mine)
print(f"rank {world.rank}: {agreed.host_us_per_call} {agreed.device_us_per_call} {agreed.bound}")
"""


def test_the_launch_verdict_is_the_slowest_ranks(world):
    import sys

    from conftest import mpiexec_prefix, run_process

    cmd, env = mpiexec_prefix(2)
    proc = run_process([*cmd, sys.executable, "-c", LAUNCH_AGREEMENT], env=env, timeout=120)
    assert proc.returncode == 0, proc.output
    assert sorted(proc.stdout.split("\n")[:2]) == ["rank 0: 9.5 10.0 True", "rank 1: 9.5 10.0 True"], proc.output

"""The replay on every rank, top-down: world -> calls and layout -> records -> issuer and plan -> iterations and
per-call latencies -> summary beside the prediction -> record -> printout.

Order in the launch: the first iteration (cold: its calls are the first of their sizes), the other warm-up
iterations, the per-call latencies of every distinct call (``calibrate.py``), then the timed iterations and as many
compute-only ones. Each iteration starts after a barrier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from microbench.cluster import launch
from microbench.cluster.agree import raise_if_any
from microbench.cluster.world import init_world, require_mpi
from microbench.errors import RunError, UsageError
from microbench.replay import arguments, calibrate, predict, summary
from microbench.replay.execute import Executor
from microbench.replay.layout import Layout
from microbench.replay.schedule import COMPUTE_RULE, Call, Step, steps
from microbench.replay.summary_text import as_text
from microbench.workload.distribution import Workload


@dataclass
class Replay:
    """What the steps after setup share: the arguments, the world, the calls and where they run, the records."""

    args: Any
    world: Any
    workload: Workload | None
    schedule: list[Call]
    notes: list[str]
    layout: Layout
    curves: Any  #: ``arguments.curves``: the pricer on --results curves and its notes, or None
    hosts: Any  #: ``cluster.world.Layout``: every rank's host
    run_id: str
    out: Any  #: ``records.writer.Output`` on rank 0 with --out, else None
    compute_s: float = 0.0  #: seconds of compute per iteration (--tflops)


def replay(args, workload: Workload | None) -> int:
    """The replay on this rank (every rank runs it); 0 when it completed."""
    backend = arguments.backend(args, launch.discover().launcher)
    world = init_world()
    if backend == "mpi":
        require_mpi(world, "microbench replay")
    r = _set_up(args, world, workload)
    issuer = _issuer(r, backend)
    try:
        plan, kernel = _plan(r, "cuda" if getattr(issuer, "cuda", False) else "cpu")
        executor = _executor(r, issuer, plan, kernel)
        timings = _iterations(r, issuer, executor)
        checked = _checked(r, issuer, executor) if args.check else None
        result = _summary(r, issuer, executor, plan, kernel, timings)
    finally:
        issuer.close()
    if checked is not None:
        result["check"] = checked
    _write_record(r, result)
    if world.rank == 0:
        print(json.dumps(result, indent=2) if args.json else as_text(result), flush=True)
    failures = world.reducer.bcast(checked["failures"] if checked else 0, root=0) if args.check else 0
    world.close()
    if failures:
        raise RunError(f"replay --check: {failures} call(s) did not move the data their collective defines on "
                       "the group the schedule names (the record's check.failed lists them)")
    return 0


def _set_up(args, world, workload: Workload | None) -> Replay:
    """The calls and layout on this world, the pricing curves, and the records (collective)."""
    schedule, notes, layout = arguments.schedule(args, workload, world.nranks)
    curves = arguments.curves(args, layout)
    out, run_id, hosts = _open_records(args, world)
    return Replay(args, world, workload, schedule, notes, layout, curves, hosts, run_id, out)


def _open_records(args, world):
    """Collective: rank 0 opens the one writer on ``--out`` as ``run --out`` does (missing folders made; an error
    there ends every rank with its message), a run id is shared, and every rank's host gathered.
    Returns (the writer or None, run id, ``cluster.world.Layout``)."""
    import os

    from microbench.cluster import facts
    from microbench.cluster.world import gather_layout

    out, error = None, None
    if world.rank == 0 and args.out:
        from microbench.records.writer import Output

        try:
            out = Output(args.out)
        except OSError as exc:
            error = UsageError(f"--out {args.out}: cannot write there ({exc.strerror or exc})")
    raise_if_any(world.reducer, error)
    run_id = world.reducer.bcast(os.urandom(6).hex() if world.rank == 0 else None, root=0)
    return out, run_id, gather_layout(world.reducer, facts.versions(), "")


def _issuer(r: Replay, backend: str):
    """This rank's issuer: its groups' communicators, their primitives, the pool (collective: every rank builds its
    groups; an error on any rank ends every rank)."""
    issuer, error = None, None
    try:
        if backend == "mpi":
            from microbench.replay.issue_mpi import MpiIssuer

            issuer = MpiIssuer(r.world.MPI, r.world.MPI.COMM_WORLD, r.layout, r.world.rank, r.schedule)
        else:
            from microbench.replay.issue_torch import TorchIssuer

            issuer = TorchIssuer(r.world, r.layout, r.world.rank, r.schedule, r.args.torch_backend, r.args.device)
    except (UsageError, RunError) as exc:
        error = exc
    raise_if_any(r.world.reducer, error)
    return issuer


def _plan(r: Replay, device: str = "cpu") -> tuple[list[Step], Any]:
    """The calls with ``--tflops`` compute placed between them, and the kernel calibrated for its slices (on the
    GPU where the calls move device tensors)."""
    if not r.args.tflops:
        return steps(r.schedule), None
    from microbench.replay import compute

    r.compute_s = compute.iteration_compute_s(r.workload, r.args.tflops)
    plan = steps(r.schedule, r.compute_s)
    return plan, compute.SliceKernel(plan, device)


def _executor(r: Replay, issuer, plan: list[Step], kernel) -> Executor:
    """Every call of the plan prepared (collective: an error on any rank ends every rank)."""
    executor, error = None, None
    try:
        executor = Executor(issuer.issued, plan, kernel)
    except (UsageError, RunError) as exc:
        error = exc
    raise_if_any(r.world.reducer, error)
    return executor


def _iterations(r: Replay, issuer, executor: Executor) -> summary.Timings:
    """The cold and warm-up iterations, the per-call latencies, the timed and compute-only iterations."""
    def after_barrier(compute_only: bool = False):
        issuer.barrier()
        return executor.iteration(compute_only=compute_only)

    first = after_barrier()
    for _ in range(r.args.warmup - 1):
        after_barrier()
    latencies = calibrate.measure(issuer, r.layout, r.world.rank, r.schedule)
    timed = [after_barrier() for _ in range(r.args.iterations)]
    compute_only = [after_barrier(True) for _ in range(r.args.iterations if r.compute_s else 0)]
    return summary.Timings(first, timed, compute_only, latencies)


def _checked(r: Replay, issuer, executor: Executor) -> dict | None:
    """``--check``: every rank's checked pass over one iteration's calls (``verify.py``), after the timed
    iterations; the ``check`` block on rank 0, None elsewhere (collective on every rank)."""
    from microbench.replay import verify

    issuer.barrier()
    ordered = executor.issued_in_order()
    mine = verify.check(ordered, issuer.issued, issuer.ran_on, r.layout, r.world.rank)
    issuer.barrier()
    every = r.world.reducer.gather(mine, root=0)
    return verify.summarize(every, len(ordered)) if r.world.rank == 0 else None


def _summary(r: Replay, issuer, executor: Executor, plan: list[Step], kernel, t: summary.Timings) -> dict:
    """The slowest rank's figures, the prediction and the comparison (collective on every rank)."""
    pricer = r.curves[0] if r.curves else predict.from_latencies(t.latencies)
    figures = summary.predicted(issuer, predict.predict(plan, pricer))
    result = summary.measured(issuer, r.workload, r.schedule, t, executor.issued_calls())
    result.update(notes=r.notes, backend=issuer.backend, prediction=summary.prediction(figures, r.curves, r.args),
                  compute=({"tflops_per_device": r.args.tflops, "seconds_per_iteration": r.compute_s,
                            "rule": COMPUTE_RULE, **kernel.describe()} if kernel else None))
    return summary.compared(result, figures, summary.context(r.schedule, r.layout, r.hosts, bool(r.compute_s)),
                            r.args.threshold)


def _write_record(r: Replay, result: dict) -> None:
    """Rank 0 with --out: the replay record through the one writer, then the writer closed."""
    if r.out is None:
        return
    from microbench.cluster.mpi_runtime import library
    from microbench.records.build import replay_record

    mpi = library(r.world.MPI).as_record() if r.world.MPI is not None else None
    r.out.record(replay_record(run_id=r.run_id, argv=r.args._argv, backend=result["backend"], layout=r.hosts,
                               mpi=mpi, summary=result))
    r.out.close()

"""``microbench run`` on every rank, top-down: options -> world -> transport -> preflight -> run record ->
sweep -> pairs -> bisect (once, or once per soak cycle) -> end record.

Errors found before the ranks can talk (a bad option on one rank) are held until the world exists and then
raised on every rank together (microbench.cluster.agree). From the run record on, rank 0 writes every record
through one writer; the watchdog and the signal thread close the records on a stall or a signal, so a run
that dies keeps every size it finished.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from microbench.benchmarks.table import Collective
from microbench.cluster import agree, launch
from microbench.cluster import facts
from microbench.cluster.nodes import NodePlane
from microbench.cluster.world import World, gather_layout, init_world
from microbench.errors import RunError, UsageError
from microbench.measure.device import DeviceChoice
from microbench.measure.testhooks import FaultHooks
from microbench.measure.transport import Transport, open_transport, select_device
from microbench.options import RunOptions, collective_for
from microbench.run import peaks as run_peaks
from microbench.run import preflight, sweep
from microbench.run import watchdog
from microbench.run.context import RunContext
from microbench.run.diagnostics import soak
from microbench.run.machine_state import MachineWatch

if TYPE_CHECKING:  # pragma: no cover
    from microbench.run.diagnostics import bisection, pairs

# What only rank 0 runs (the records, the table, the run id) and what only some options run (the pairwise test,
# the bisection, NCCL's tuning log) is imported where it is used: a measuring rank imports what it runs
# (docs/startup.md; tests/test_startup_budget.py holds the count).


def run(args, argv: list[str]) -> int:
    """``microbench run`` on every rank; returns the exit status."""
    info = launch.discover()
    watch = MachineWatch()  # the host's counters before MPI's setup: the start state's window
    opts, hooks, error = read_options(args, warn=info.rank == 0)
    state = watchdog.RunState(info.rank)
    watchdog.SignalGuard(state, getattr(args, "out", None))
    selected, error = _select_device(opts, error)  # before MPI_Init: CUDA-aware MPIs pick NICs near the GPU
    world = init_world()
    guard = watchdog.Watchdog(state, opts.timeout if opts else 0, abort=world.abort)
    guard.arm("setup (MPI, agreement, loop build)")
    if error is None and args.np is not None and args.np != world.nranks:
        error = UsageError(f"--np {args.np} but the launcher started {world.nranks} ranks")
    agree.raise_if_any(world.reducer, error)
    agree.check_same_everywhere(world.reducer, "options", opts.digest_fields())

    rc = set_up(world, opts, hooks, guard, selected)
    rc.machine = watch
    starts = watch.start_states(world.reducer, rc.layout.hosts_by_rank, rc.transport.device.runtime
                                or rc.transport.device.kind, [g.get("uuid") for g in rc.transport.gpus or ()
                                                              if isinstance(g, dict) and g.get("uuid")])
    pairs_plan = bisect_plan = None
    if opts.pairs:
        from microbench.run.diagnostics import pairs

        pairs_plan = pairs.plan(rc.layout.hosts_by_rank, opts.serial)
    if opts.bisect:
        from microbench.run.diagnostics import bisection

        bisect_plan = bisection.plan(rc.nodes.nodes, opts)
    cycles = soak.Soak(rc)
    if world.rank == 0:
        _open_records(rc, state, argv, pairs_plan, cycles, starts)

    failed: list[str] = []
    status, reason = "failed", "interrupted"
    try:
        failed = cycles.run(lambda cycle_rc: _measure(cycle_rc, pairs_plan, bisect_plan))
        rc.machine_end = watch.end_states(world.reducer)
        status, reason = "complete", ""
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc} (during {state.where})"
        watchdog.leave_failure_note(opts.out, state, reason)
        raise
    finally:
        guard.disarm()
        state.close(status, reason)
        if rc.tuning is not None:
            rc.tuning.remove()
    world.close()
    if failed and world.rank == 0:
        print(f"microbench: check FAILED: {', '.join(failed)}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def _measure(rc: RunContext, pairs_plan: "pairs.Plan | None", bisect_plan: "bisection.Plan | None") -> list[str]:
    """Collective: every benchmark's sweep, then the pairwise test and the bisection; what failed its check."""
    failed = []
    for name in rc.opts.benchmarks:
        failed += [f"{name} {size}" for size in run_benchmark(rc, collective_for(rc.opts, name))]
    if pairs_plan is not None:
        from microbench.run.diagnostics import pairs

        failed += pairs.run_pairs(rc, pairs_plan)
    if bisect_plan is not None:
        from microbench.run.diagnostics import bisection

        failed += bisection.run_bisection(rc, bisect_plan)
    return failed


def run_benchmark(rc: RunContext, coll: Collective) -> list[int]:
    """Collective: one benchmark's table header (rank 0), then its sweep; the sizes whose check failed."""
    if rc.out is not None:
        from microbench.run import terminal

        section = terminal.section(coll, rc.opts, rc.transport, rc.nranks, len(rc.layout.ranks_per_host))
        # the path's peak and each size's share of it, where the data crosses a link (not shared memory alone)
        if rc.peaks is not None and not coll.nonblocking and rc.peaks.crosses_a_link(coll, rc.layout, rc.nranks):
            section["lines"].append(rc.peaks.section_line(coll, rc.layout, rc.nranks))
            section["extra_columns"].append("peak")
        rc.out.section(section)
    return sweep.run_benchmark(rc, coll)


def set_up(world: World, opts: RunOptions, hooks: FaultHooks, guard: watchdog.Watchdog,
           selected: tuple[DeviceChoice, int | None] | None = None) -> RunContext:
    """Collective: transport (with its timed loop) -> hosts -> preflight; the run's context (records not opened).

    ``selected``: the device ``select_device`` chose before MPI_Init (chosen here when not given)."""
    tuning = None
    if opts.nccl_algo or os.environ.get("NCCL_INSPECTOR_ENABLE") == "1":
        from microbench.cluster.nccl_tuning import InspectorLog, TuningLog

        tuning = TuningLog.ask_nccl() if opts.nccl_algo else InspectorLog.find()  # before NCCL starts
    transport = open_transport(world, opts, selected or select_device(opts))
    layout = gather_layout(world.reducer, facts.versions(), _mpi_first_line(transport))
    preflight.check_run(opts, world, layout, transport)
    peaks = run_peaks.gather(world.reducer, layout, transport.device.runtime or transport.device.kind,
                             transport.gpus, tuning)
    if opts.nccl_algo and tuning is None and world.rank == 0:
        print("microbench: warning: --nccl-algo: NCCL_DEBUG, NCCL_DEBUG_SUBSYS or NCCL_DEBUG_FILE is set already; "
              "NCCL's algorithms are not recorded", file=sys.stderr, flush=True)
    rc = RunContext(opts, world, layout, transport, hooks, guard,
                    run_id=world.reducer.bcast(_new_run_id() if world.rank == 0 else None),
                    nodes=NodePlane.build(world.reducer, layout.hosts_by_rank), peaks=peaks)
    rc.tuning = tuning
    return rc


def _new_run_id() -> str:
    """Rank 0: the run's id, 12 random hex digits (48 bits from the kernel's random source, as the first 12 digits
    of a random UUID are; the uuid module would load its C part and ctypes' library search for them)."""
    return os.urandom(6).hex()


def read_options(args, warn: bool) -> tuple[RunOptions | None, FaultHooks, Exception | None]:
    """The options and the test hooks, or the usage error to raise once every rank can hear it."""
    try:
        opts = RunOptions.from_args(args)
        hooks = FaultHooks.from_env(warn=warn)
        hooks.check_usable(opts.timeout)
        return opts, hooks, None
    except UsageError as exc:
        return None, FaultHooks({}), exc


def _select_device(opts: RunOptions | None, error: Exception | None):
    """This rank's device, chosen before MPI starts; an error is kept for the ranks to agree on."""
    if error is not None:
        return None, error
    try:
        return select_device(opts), None
    except (UsageError, RunError) as exc:
        return None, exc


def _mpi_first_line(transport: Transport) -> str:
    lib = transport.lib
    return lib.version_string.splitlines()[0] if lib and lib.version_string else ""


def _open_records(rc: RunContext, state: watchdog.RunState, argv: list[str], pairs_plan, cycles: soak.Soak,
                  machine: list[dict] | None = None) -> None:
    """Rank 0: the progress bar, the one writer, the run record, and the notes and warnings it carries."""
    from microbench.cluster.mpi_runtime import shadow_warning
    from microbench.records import Output, build
    from microbench.run.terminal import Progress, TerminalTable

    o = rc.opts
    pair_rounds = 2 * len(pairs_plan.schedule) * max(1, o.pair_repeats) if pairs_plan else 0
    total = sum(len(o.sizes_for(b)) for b in o.benchmarks) + pair_rounds
    rc.progress = Progress(total * (o.cycles or 1))
    rc.out = Output(o.out, o.csv, TerminalTable(progress=rc.progress), samples_path=o.samples)
    state.close_records = lambda status, reason: _close_records(rc, status, reason, cycles)
    rc.out.run(build.run_record(rc.run_id, argv, o, rc.nranks, rc.layout, rc.transport,
                                links=rc.peaks.links if rc.peaks else None,
                                path_peak=rc.peaks.across if rc.peaks else None, machine=machine))
    if rc.transport.notice:
        rc.note(rc.transport.notice)
    warnings = [shadow_warning(rc.transport.lib) if rc.transport.lib else None]
    if rc.layout.version_mismatch:
        warnings.append(f"library versions differ between ranks: {', '.join(rc.layout.version_mismatch)}")
    for text in filter(None, warnings):
        print(f"microbench: warning: {text}", file=sys.stderr, flush=True)
        rc.note(text)


def _close_records(rc: RunContext, status: str, reason: str, cycles: soak.Soak) -> None:
    """Rank 0: the soak summary and the run's end record (called once, from whichever thread ends the run)."""
    from microbench.records import build

    with rc.out.lock:  # no result or cycle record slips in between the summary and the end record
        cycles.close()
        machine = rc.machine_end
        if machine is None and rc.machine is not None:  # ended by a signal, the watchdog or an error: rank 0's host
            local = rc.machine.local_end()
            machine = [local] if local else None
        rc.out.end(build.end_record(rc.run_id, status, reason, len(rc.out.results), machine))
        rc.out.close()


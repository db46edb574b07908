"""``microbench run``: validate, agree across ranks, sweep sizes per benchmark, write records."""

from __future__ import annotations

import sys

from microbench import agree, faults, launch
from microbench.collectives import COLLECTIVES
from microbench.errors import UsageError
from microbench.options import RunOptions, preflight_local, validate_for_ranks
from microbench.session import Session
from microbench.world import init_world

def run(args, argv: list[str]) -> int:
    """Entry point of ``microbench run`` on every rank."""
    info = launch.discover()
    error: Exception | None = None
    opts = None
    try:
        opts = RunOptions.from_args(args)
    except UsageError as exc:
        error = exc

    if args.np is not None:
        if args.np < 1:
            raise UsageError(f"--np must be at least 1 (got {args.np})")
        if not info.under_launcher:
            if error:
                raise error
            validate_for_ranks(opts, args.np, args.np)
            preflight_local(opts)
            return launch.self_launch(argv, args.np)

    state = faults.RunState(info.rank)
    faults.SignalGuard(state)
    world = init_world()
    watchdog = faults.Watchdog(state, opts.timeout if opts else 0, abort=world.abort)
    watchdog.arm("setup (MPI, agreement, loop build)")
    if error is None and args.np is not None and args.np != world.nranks:
        error = UsageError(f"--np {args.np} but the launcher started {world.nranks} ranks")
    agree.raise_if_any(world.reducer, error)
    agree.check_same_everywhere(world.reducer, "options", opts.digest_fields())
    session = Session(world, opts, argv, state, watchdog)
    session.setup_transport()
    session.gather_hosts()
    session.validate()
    session.choose_loop()
    session.write_run_record()
    failed = []
    status, reason = "failed", "interrupted"
    try:
        for name in opts.benchmarks:
            for size in session.run_benchmark(COLLECTIVES[name]):
                failed.append(f"{name} {size}")
        if opts.pairs:
            failed.extend(session.run_pairs())
        status, reason = "complete", ""
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc} (during {state.where})"
        raise
    finally:
        session.finish(status, reason)
    world.close()
    if failed:
        if session.rank == 0:
            print(f"microbench: check FAILED: {', '.join(failed)}", file=sys.stderr, flush=True)
        return 1
    return 0

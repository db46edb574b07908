"""The ``microbench`` command: one parser, one verb per module.

Errors end with one line (``microbench: error: ...``) printed by rank 0 and a non-zero status on every
rank; an unexpected exception on any rank aborts the whole MPI job within seconds.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from microbench import __version__
from microbench.cluster import launch
from microbench.errors import RunError, UsageError

#: verb -> (module, one-line help). Each module has add_arguments(parser) and main(args) -> int, and its
#: ``HELP`` (else its docstring) is the verb's --help text; ``args._argv`` holds the command's arguments as
#: typed (after the program name). A verb's module is imported only when that verb is asked for, so
#: ``--version``, ``--help`` and one verb pay for nothing else.
VERBS = {
    "run": ("microbench.run.cli", "measure benchmarks over a size sweep"),
    "workload": ("microbench.workload.cli", "message-size distributions of LLM training, and their cost"),
    "check": ("microbench.gate.check_cli", "judge results against an acceptance spec (pass/fail)"),
    "compare": ("microbench.gate.compare_cli", "compare new results against baseline runs"),
    "history": ("microbench.gate.history_cli", "latency over time across many runs"),
    "import": ("microbench.importers.cli", "read OMB and nccl-tests output as microbench records"),
    "plot": ("microbench.plotting.cli", "latency and bandwidth figures from results"),
    "report": ("microbench.report.cli", "one self-contained HTML page of results, verdicts and history"),
    "info": ("microbench.cluster.info_cli", "what this machine, MPI and torch offer"),
    "replay": ("microbench.replay.cli", "replay one training iteration's communication and time it"),
}


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, and prints help on rank 0 only."""

    def error(self, message: str):
        raise UsageError(message)

    def _print_message(self, message, file=None):
        if message and launch.is_rank0():
            super()._print_message(message, file)


def _verb_in(argv: list[str]) -> str | None:
    """The verb the command line asks for (its first word that is not an option), if it is one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in VERBS else None


def build_parser(argv: list[str] | None = None) -> Parser:
    """The parser; only the verb named in ``argv`` gets its arguments (and its module imported)."""
    parser = Parser(prog="microbench", description=__doc__.splitlines()[0].rstrip("."),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"microbench {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    sub.required = True
    chosen = _verb_in(argv or [])
    for verb, (module_name, help_text) in VERBS.items():
        if verb != chosen:
            sub.add_parser(verb, help=help_text, description=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise UsageError(f"the {verb} verb is not in this build ({exc.name} is missing)") from None
            raise
        description = getattr(module, "HELP", None) or module.__doc__ or help_text
        p = sub.add_parser(verb, help=help_text, description=description.strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _debug() -> bool:
    return os.environ.get("MICROBENCH_DEBUG", "") not in ("", "0")


def _abort_job(exc: BaseException) -> int:
    """An unexpected exception: one line from this rank, then end every rank of the job."""
    info = launch.discover()
    where = f"rank {info.rank}: " if info.under_launcher else ""
    print(f"microbench: {where}{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if _debug():
        traceback.print_exc()
    else:
        print("microbench: set MICROBENCH_DEBUG=1 for the traceback", file=sys.stderr, flush=True)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        mpi.COMM_WORLD.Abort(1)
    return 1


def _leave_torch_distributed() -> None:
    """On an error every rank shares: leave torch.distributed (no barrier: the ranks may be anywhere)."""
    from microbench.cluster.world import leave_torch_distributed

    try:
        leave_torch_distributed(barrier=False)
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass


def _collective_usage_error(argv: list[str], exc: UsageError) -> None:
    """Under a launcher, a parse error on some ranks must reach the others (which may parse fine)."""
    if not (argv and argv[0] == "run" and launch.discover().under_launcher):
        return
    from microbench.cluster import agree
    from microbench.cluster.world import init_world

    world = init_world()
    agree.raise_if_any(world.reducer, exc)


def main(argv: list[str] | None = None) -> int:
    """Run the ``microbench`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser(argv).parse_args(argv)
        except UsageError as exc:
            _collective_usage_error(argv, exc)
            raise
        args._argv = argv
        return int(args._module.main(args) or 0)
    except (UsageError, RunError) as exc:
        if launch.is_rank0():
            print(f"microbench: error: {exc}", file=sys.stderr, flush=True)
        _leave_torch_distributed()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output went away (| head): stop quietly, as SIGPIPE would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the last line of defence against a hung job
        return _abort_job(exc)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

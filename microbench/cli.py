"""The ``microbench`` command: one parser, one verb per module.

Errors end with one line (``microbench: error: ...``) printed by rank 0 and a non-zero status on every
rank; an unexpected exception on any rank aborts the whole MPI job within seconds. Exit statuses: 0 success,
1 a verdict of FAIL (or a run that failed), 2 bad input or environment, 3 an internal error (a bug), 4
a verdict of INCONCLUSIVE, 130 interrupted, 141 a closed pipe (``microbench.errors``). For the verb's duration stdout and
stderr pass every line through one sanitizer (``errors.PrintableStream``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings
from typing import Iterator

from microbench import __version__
from microbench.cluster import launch
from microbench.errors import (EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, OutputError,
                               PrintableStream, RunError, UsageError, printable)

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
    "doctor": ("microbench.doctor.cli", "name the layer that is broken when a multi-node launch hangs or crawls"),
}


EXIT_STATUSES = """exit status:
  0  success (every verdict PASS)
  1  a verdict of FAIL (check, compare, history --fail-on-step); for run and replay, a run that failed
  2  bad input or environment: one line 'microbench: error: ...' naming the file (FILE:LINE for a line of it)
  3  an internal error: a bug, one line 'microbench: internal error: ...' (MICROBENCH_DEBUG=1 for the traceback)
  4  a verdict of INCONCLUSIVE: no failure seen, and the gate could not have seen one (--inconclusive-exit 0|1)
  130 interrupted; 141 the reader of the output went away"""


def _argparse_without_catalog_lookups() -> None:
    """argparse looks each of its messages up in gettext's catalogs at every call: a stat of
    ``<prefix>/share/locale/<language>/LC_MESSAGES/messages.mo`` per language $LANG expands to (four for
    en_US.UTF-8), some 25 calls per command line, on every rank. Python ships no catalog for that domain; where
    none is installed the messages are the same without the lookups (checked once here)."""
    import gettext

    if gettext.find("messages") is None and not getattr(gettext, "_localedirs", {}).get("messages"):
        argparse._ = lambda message: message
        argparse.ngettext = lambda singular, plural, n: singular if n == 1 else plural


_argparse_without_catalog_lookups()


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help as written (descriptions keep their lines), as wide as the terminal; the width is read from the
    terminal here, not by argparse through ``shutil`` (which a measuring rank would import for nothing)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        if width is None:
            width = launch.terminal_columns(80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


#: What ``microbench --help`` says above the verbs: what the tool is for, for its users (this module's docstring is
#: for its developers).
DESCRIPTION = """Collective-communication microbenchmarks in the style of the OSU Micro-Benchmarks and nccl-tests, over
MPI and torch.distributed: a sweep of message sizes printed as a table and appended to a JSON Lines file of
records, which the other verbs judge against a spec, compare with a baseline, follow over time, plot and report."""

EXAMPLES = """examples:
  microbench info                                      the MPI, launcher and torch this machine offers
  microbench run --np 2 --out results/run.jsonl        the six core benchmarks, 1 B to 1 MiB, on 2 local ranks
  microbench run --np 2 allreduce -m 8:64M -c          one benchmark over a size range, its data checked
  srun --mpi=pmix -N 4 microbench run --out ar.jsonl   under a launcher (srun, mpirun, torchrun): its ranks
  microbench check results/ --spec scripts/specs/local-2rank.toml    PASS or FAIL against a spec (exit 1)
  microbench compare --baseline nightly/old/ --new nightly/new/      regressions against a baseline
  microbench plot results/run.jsonl -o figs/           latency and bandwidth figures
  microbench run --help                                a verb's options (every verb has --help)"""


def _docs_line() -> str:
    """Where the documentation is: the checkout's README and docs/ when this is one, else the source's."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(checkout, "README.md")) and os.path.isdir(os.path.join(checkout, "docs")):
        return (f"documentation: {os.path.join(checkout, 'README.md')} (start there) and "
                f"{os.path.join(checkout, 'docs')}/ (definitions.md: what every column means; faults.md: errors)")
    return ("documentation: README.md and docs/ of the microbench-collectives source (definitions.md: what every "
            "column means; faults.md: errors)")


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, and prints help on rank 0 only; its help formatter is
    ``Formatter`` unless a caller names another."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

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
    parser = Parser(prog="microbench", description=DESCRIPTION,
                    epilog=f"{EXAMPLES}\n\n{EXIT_STATUSES}\n\n{_docs_line()}", formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"microbench {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    sub.required = True
    chosen = _verb_in(argv or [])
    for verb, (module_name, help_text) in VERBS.items():
        if chosen is not None and verb != chosen:
            continue  # a verb named: the others' parsers are never used (each costs a rank file-system calls)
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
        p = sub.add_parser(verb, help=help_text, description=description.strip(), formatter_class=Formatter)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _debug() -> bool:
    return os.environ.get("MICROBENCH_DEBUG", "") not in ("", "0")


def _say(line: str) -> None:
    """One line on stderr, whatever state stderr is in (full, closed)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, UsageError):
        pass


def _end_job(code: int) -> None:
    """A rank-local error under MPI with other ranks: end every rank now, with ``code`` where the launcher passes
    it on (Open MPI's and MPICH's mpiexec return the code given to MPI_Abort)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        mpi.COMM_WORLD.Abort(code)


def _where() -> str:
    info = launch.discover()
    return f"rank {info.rank}: " if info.under_launcher else ""


def _abort_job(exc: BaseException) -> int:
    """An unexpected exception (a bug): one line from this rank, then end every rank of the job (exit 3)."""
    _say(f"microbench: {_where()}internal error: {type(exc).__name__}: {printable(str(exc))} "
         + ("(a bug)" if _debug() else "(a bug; set MICROBENCH_DEBUG=1 for the traceback)"))
    if _debug():
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
    _end_job(EXIT_INTERNAL)
    return EXIT_INTERNAL


def _system_error(exc: OSError) -> int:
    """What the operating system refused (a file that cannot be read or written, a full disk): bad environment,
    one line from this rank naming the file, exit 2 (every rank of the job ends)."""
    name = f"{printable(os.fsdecode(exc.filename))}: " if exc.filename is not None else ""
    _say(f"microbench: {_where()}error: {name}{printable(exc.strerror or str(exc))}")
    if _debug():
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
    _end_job(EXIT_USAGE)
    return EXIT_USAGE


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


def _silence_stdout() -> None:
    """stdout failed (a closed pipe, a full disk): what it still buffers goes to /dev/null, so the interpreter's
    last flush neither fails nor prints."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _terminal() -> Iterator[None]:
    """For the verb's duration: stdout and stderr through the one sanitizer (``errors.terminal_safe``), and no
    numpy floating-point warning on the terminal (a figure that is not finite is the output's to say: strict
    JSON writes null and notes it); any other warning is one sanitized line."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = out if isinstance(out, PrintableStream) else PrintableStream(out)
    sys.stderr = err if isinstance(err, PrintableStream) else PrintableStream(err)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning,
                                message=r".*(encountered|empty slice|Degrees of freedom)")
        warnings.showwarning = _one_line_warning
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    _say(f"# note: {category.__name__}: {printable(str(message))}")


def _run(argv: list[str]) -> int:
    """Parse, run the verb, flush its output; exceptions go to ``main``."""
    try:
        args = build_parser(argv).parse_args(argv)
    except UsageError as exc:
        _collective_usage_error(argv, exc)
        raise
    args._argv = argv
    code = int(args._module.main(args) or 0)
    sys.stdout.flush()  # a full disk is found here, not in the interpreter's last flush
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the ``microbench`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _terminal():
        try:
            return _run(argv)
        except OutputError as exc:  # this rank's stdout or stderr: the other ranks do not know
            _say(f"microbench: {_where()}error: {exc}")
            _silence_stdout()
            _end_job(EXIT_USAGE)
            return EXIT_USAGE
        except (UsageError, RunError) as exc:  # raised on every rank (agree.raise_if_any): rank 0 says it
            if launch.is_rank0():
                _say(f"microbench: error: {printable(str(exc))}")
            _leave_torch_distributed()
            return exc.exit_code
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # the reader of our output went away (| head): stop quietly, as SIGPIPE would
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        except SystemExit:
            raise
        except OSError as exc:
            return _system_error(exc)
        except BaseException as exc:  # noqa: BLE001 - the last line of defence against a hung job
            return _abort_job(exc)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

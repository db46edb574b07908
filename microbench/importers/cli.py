"""Read other tools' results as microbench records: ``microbench import omb|nccl-tests|nccl-inspector FILE...
--out RUN.jsonl``.

Each run the files hold becomes a run record, its results and an end record, appended to --out, so
check, compare, history and plot read years of existing logs. Every record names its source (tool,
version, file, line); what the tool's output does not say is null (or left out) and listed as
unknown, never guessed. A run already in --out (same file content) is not written twice. docs/import.md
describes the formats and how each figure maps.

  microbench import omb osu_allreduce.log --ranks 64 --args "-m 8:1M -f" --out omb.jsonl
  microbench import nccl-tests all_reduce.json all_gather.log --out nccl.jsonl --time mtime
  microbench import nccl-inspector nccl-inspector-1234/*.log --out job.jsonl

An NCCL Inspector dump (one file per process) is one job: all its files make one run, whose results are the
job's operations per collective, size and group size (microbench report and plot draw them on the measured
curves: docs/peaks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from microbench.errors import UsageError, printable
from microbench.importers import inspector, nccl_tests, nccl_text, omb, to_records
from microbench.importers.parsed import ToolRun
from microbench.records import read_runs
from microbench.records.files import max_file_bytes, read_small
from microbench.records.model import ModelError
from microbench.records.writer import append_whole
from microbench.results.load import parse_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    tools = p.add_subparsers(dest="tool", metavar="TOOL", parser_class=type(p))
    tools.required = True
    o = tools.add_parser("omb", help="OSU Micro-Benchmarks text output (osu_latency ... osu_alltoall)",
                         description=omb.__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(o, "OMB's command-line options, e.g. \"-m 8:1M -i 1000 -x 100 -T mpi_float\" (OMB prints few of "
               "them); with -m the table is checked to reach the largest size")
    n = tools.add_parser("nccl-tests", help="nccl-tests text output or its -J JSON file",
                         description=nccl_tests.__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(n, "the nccl-tests command line, e.g. \"all_reduce_perf -b 8 -e 1G -f 2 -a 1\" (JSON files carry "
               "their own)")
    n.add_argument("--benchmark", metavar="PROGRAM",
                   help="the nccl-tests program (all_reduce_perf ...) where the output does not name it")
    i = tools.add_parser("nccl-inspector", help="a job's NCCL Inspector plugin files (JSON lines, one per process)",
                         description=inspector.__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(i, "unused: the Inspector's records say what they measured")


def _common(p: argparse.ArgumentParser, args_help: str) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="the tool's output files")
    p.add_argument("--out", required=True, metavar="RUN.jsonl", help="append the records here")
    p.add_argument("--ranks", type=int, metavar="N", help="ranks the tool ran on, where its output does not say")
    p.add_argument("--args", metavar="ARGS", help=args_help)
    p.add_argument("--time", metavar="WHEN",
                   help="when the runs started: an ISO 8601 UTC time, or 'mtime' for each file's modification "
                        "time (default: unknown, unless the tool printed it with a zone)")


def main(args) -> int:
    if args.ranks is not None and args.ranks < 1:
        raise UsageError(f"--ranks must be at least 1 (got {args.ranks})")
    runs: list[tuple[ToolRun, str]] = []
    if args.tool == "nccl-inspector":
        texts = [(path, _read(path)) for path in args.files]
        run = inspector.parse(texts, args.ranks)
        _set_time(run, args.time, args.files[0])
        runs.append((run, to_records.file_digest(args.files[0]) if len(args.files) == 1 else
                     _digest_of([to_records.file_digest(p) for p in args.files])))
        _write(runs, args.out)
        return 0
    for path in args.files:
        text = _read(path)
        found, notes = _parse(args, text, path)
        for note in notes:
            print(f"microbench: note: {note}", file=sys.stderr)
        digest = to_records.file_digest(path)
        for run in found:
            _set_time(run, args.time, path)
            runs.append((run, digest))
    if not runs:
        raise UsageError("nothing to import: no section of the files has a microbench counterpart")
    _write(runs, args.out)
    return 0


def _digest_of(digests: list[str]) -> str:
    """One digest of several files' digests (the same files in any order give the same run id)."""
    import hashlib

    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()


def _read(path: str) -> str:
    data = read_small(path, max_file_bytes(), "file")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text") from None


def _parse(args, text: str, path: str) -> tuple[list[ToolRun], list[str]]:
    if args.tool == "omb":
        return omb.parse(text, path, args.ranks, args.args)
    benchmark = nccl_tests.benchmark_of(args.benchmark) if args.benchmark else None
    if text.lstrip().startswith("{"):
        return [nccl_tests.parse_json(text, path, args.ranks, benchmark, args.args)], []
    return nccl_text.parse_text(text, path, args.ranks, benchmark, args.args), []


def _set_time(run: ToolRun, when: str | None, path: str) -> None:
    if when is None:
        return
    if when == "mtime":
        stamp = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc)
        run.time_from = "the file's modification time (--time mtime)"
    else:
        stamp = parse_time(when)
        if stamp is None:
            raise UsageError(f"--time: not an ISO 8601 time or 'mtime': {when!r}")
        run.time_from = "--time"
    run.time_utc = stamp.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _records(runs: list[tuple[ToolRun, str]]) -> list[tuple[ToolRun, list[dict]]]:
    """Every run's records, each made through the record model (values in range, finite, figures consistent)
    before any is written: a failed import leaves nothing behind."""
    out = []
    for run, digest in runs:
        try:
            records = to_records.imported_records(run, digest)
        except ModelError as exc:
            line = _line_of(run, exc)
            raise UsageError(f"{printable(run.file)}:{line}: the tool's figures break the record model: "
                             f"{printable(exc.problem)}; nothing imported") from None
        out.append((run, records))
    return out


def _line_of(run: ToolRun, exc: ModelError) -> int:
    """The line of the row whose record broke the model (the run's first line when it is not a row's)."""
    for row in run.rows:
        try:
            to_records.imported_result(run, row, "x")
        except ModelError:
            return row.line
    return run.first_line


def _write(runs: list[tuple[ToolRun, str]], out: str) -> None:
    """Append every run not already in --out, all in one write that lands whole or not at all."""
    checked = _records(runs)
    present = {r.run_id for r in read_runs([out]) if r.complete} if Path(out).is_file() else set()
    batch: list[dict] = []
    written = []
    for run, records in checked:
        where = f"{printable(run.file)}:{run.first_line}"
        if records[0]["run_id"] in present:
            print(f"microbench: note: {where}: already in {printable(out)} (run {records[0]['run_id']}); "
                  "not written again", file=sys.stderr)
            continue
        present.add(records[0]["run_id"])
        batch += records
        written.append((where, run, records))
    try:
        append_whole(out, batch)
    except OSError as exc:
        raise UsageError(f"cannot write {printable(out)}: {exc.strerror or exc}; nothing imported") from None
    for where, run, records in written:
        benchmarks = ", ".join(dict.fromkeys(r["benchmark"] for r in records[1:-1]))
        print(f"{where}: {run.tool} {run.tool_version or '(version not printed)'} {benchmarks}: "
              f"{len(records) - 2} results, {run.ranks or '?'} ranks, {records[-1]['status']} -> {printable(out)} "
              f"(run {records[0]['run_id']})")

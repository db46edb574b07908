"""OSU Micro-Benchmarks (OMB) text output: every section a benchmark printed, as tool runs.

A section starts at OMB's title line (``# OSU MPI Allreduce Latency Test v7.4``; ``-CUDA``, ``-ROCM``
after ``MPI`` for device buffers) and holds, in OMB 7.x, ``# Datatype: MPI_CHAR.`` lines, a column
header (``# Size  Avg Latency(us)`` and, with ``-f``, ``Min Latency(us)  Max Latency(us)
Iterations``; ``Validation`` with ``-c``; ``P50 Tail Lat(us)`` ... with ``-z``) and one row per size.
Several sections may follow each other in one file (a job log running many benchmarks).

OMB's reductions use MPI_SUM. What OMB does not print comes from ``--args`` (the options OMB ran
with: ``-i``, ``-x``, ``-W``, ``-T``, ``-l``, ``-m``) or ``--ranks`` (required for collectives), else
stays unknown. Sizes are OMB's, which microbench shares (allgather and alltoall: each rank's
contribution; reduce_scatter: each rank's input).
"""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Iterator

from microbench.benchmarks.dtypes import DTYPES, get_dtype
from microbench.benchmarks.table import COLLECTIVES
from microbench.errors import UsageError
from microbench.importers.parsed import Row, ToolRun, where
from microbench.units import parse_sizes

#: OMB title (without "OSU MPI" and " Test") -> (microbench benchmark, the MPI call OMB times)
TITLES = {
    "Latency": ("latency", "MPI_Send/MPI_Recv ping-pong"),
    "Bandwidth": ("bw", "MPI_Isend window"),
    "Bi-Directional Bandwidth": ("bibw", "MPI_Isend/MPI_Irecv window both ways"),
    "Allreduce Latency": ("allreduce", "MPI_Allreduce"),
    "Allgather Latency": ("allgather", "MPI_Allgather"),
    "Reduce_scatter Latency": ("reduce_scatter", "MPI_Reduce_scatter"),
    "Reduce_scatter_block Latency": ("reduce_scatter", "MPI_Reduce_scatter_block"),
    "Broadcast Latency": ("broadcast", "MPI_Bcast"),
    "Reduce Latency": ("reduce", "MPI_Reduce"),
    "All-to-All Personalized Exchange Latency": ("alltoall", "MPI_Alltoall"),
}
POINT_TO_POINT = ("latency", "bw", "bibw")
MPI_TYPES = {"MPI_CHAR": "int8", "MPI_SIGNED_CHAR": "int8", "MPI_UNSIGNED_CHAR": "uint8", "MPI_BYTE": "uint8",
             "MPI_INT": "int32", "MPI_LONG": "int64", "MPI_FLOAT": "float32", "MPI_DOUBLE": "float64"}

# Every pattern reads a stripped line in linear time: no lazy group is followed by an optional tail and ``$``
# (``(.+?)\s*$`` tried every split of a run of spaces: 55 s for one 60,000-character line).
_TITLE = re.compile(r"#\s*OSU MPI(?P<accel>-[A-Z]+(?: MANAGED)?)? (?P<name>.+) Test(?: v(?P<version>\S+))?")
_DATATYPE = re.compile(r"#\s*Datatype:\s*(\S+)")
_BUFFERS = re.compile(r"#\s*Send Buffer on (.+?) and Receive Buffer on (.+)")
MAX_LINE_CHARS = 1 << 16  #: the longest line an importer reads (OMB's and nccl-tests' lines are under 300)
_COLUMN = re.compile(r"Avg Latency\(us\)|Min Latency\(us\)|Max Latency\(us\)|Iterations|Validation|Latency \(us\)|"
                     r"Bandwidth \(MB/s\)|P\d+ Tail (?:Lat\(us\)|BW\(MB/s\))|Transmit Size")
_TAIL = re.compile(r"P(\d+) Tail Lat\(us\)")

DEFINITIONS = {
    "collective": {"avg": "mean across ranks of each rank's mean iteration time (OMB's Avg Latency)",
                   "min": "minimum across ranks of each rank's mean iteration time (OMB -f)",
                   "max": "maximum across ranks of each rank's mean iteration time (OMB -f)",
                   "pNN": "OMB -z tail latency: the NN-th percentile over iterations of the iteration time "
                          "summed over ranks and divided by the rank count"},
    "latency": {"avg": "rank 0's mean over iterations of half the round trip (OMB's Latency)",
                "pNN": "OMB -z tail latency: NN-th percentile over iterations of half the round trip"},
    "bw": {"avg": "the time per message OMB's bandwidth implies: size / bandwidth (1 MB/s = 1e6 B/s)"},
    "bibw": {"avg": "the time per message pair OMB's bandwidth implies: 2 x size / bandwidth (1 MB/s = 1e6 B/s)"},
}


def parse_args(text: str | None) -> dict:
    """The OMB options that decide what was measured, from its command line (program name optional)."""
    if not text:
        return {}
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("-m", "--message-size")
    p.add_argument("-i", "--iterations", type=int)
    p.add_argument("-x", "--warmup", type=int)
    p.add_argument("-W", "--window-size", type=int)
    p.add_argument("-T", "--type")
    p.add_argument("-l", "--in-place", action="store_true")
    try:
        known, _ = p.parse_known_args(shlex.split(text))
    except (argparse.ArgumentError, ValueError) as exc:
        raise UsageError(f"--args: cannot read OMB options from {text!r}: {exc}") from None
    out = {k: v for k, v in vars(known).items() if v not in (None, False)}
    if "type" in out:
        types = out["type"].split(",")
        if len(types) != 1:
            raise UsageError("--args: give one -T type (OMB prints a Datatype line per type where it runs several)")
        out["type"] = "MPI_" + types[0].upper().removeprefix("MPI_")
    if "message_size" in out:
        text_sizes = out["message_size"]
        out["max_size"] = parse_sizes(text_sizes if ":" in text_sizes else f":{text_sizes}")[-1]
    return out


def dtype_name(mpi_type: str) -> str:
    """microbench's name for an MPI datatype OMB printed (an unknown one is kept as OMB wrote it)."""
    name = MPI_TYPES.get(mpi_type.upper())
    return get_dtype(name).name if name in DTYPES else mpi_type


def numbered_lines(text: str, path: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of ``text``, split at newlines only (as editors and ``wc -l`` count: not at form feeds
    or U+2028, which ``str.splitlines`` also splits at); a line over ``MAX_LINE_CHARS`` is an error naming it."""
    for lineno, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE_CHARS:
            raise UsageError(f"{path}:{lineno}: a line of {len(line)} characters: OMB and nccl-tests print none "
                             f"longer than {MAX_LINE_CHARS}")
        yield lineno, line


def parse(text: str, path: str, ranks: int | None, args: str | None) -> tuple[list[ToolRun], list[str]]:
    """(the OMB runs in the file, a note for every section skipped); bad content is a UsageError."""
    options = parse_args(args)
    runs, notes = [], []
    section: _Section | None = None
    for lineno, raw in numbered_lines(text, path):
        line = raw.strip()
        title = _TITLE.fullmatch(line)
        if title:
            section = _Section.start(title, path, lineno, ranks, options, args)
            if section.run is None:
                notes.append(f"{path}:{lineno}: OMB's {title['name']} test has no microbench counterpart; skipped")
            else:
                runs.append(section.run)
        elif section is not None and section.run is not None:
            with where(f"{path}:{lineno}"):
                section.feed(line, lineno)
    for run in runs:
        _finish(run, options)
    return runs, notes


class _Section:
    """The state of the section being read: its run, the current datatype and columns."""

    def __init__(self, run: ToolRun | None, benchmark: str | None, options: dict):
        self.run, self.benchmark, self.options = run, benchmark, options
        self.dtype = dtype_name(options["type"]) if "type" in options else None
        self.columns: list[str] | None = None

    @classmethod
    def start(cls, title, path: str, lineno: int, ranks: int | None, options: dict, args: str | None) -> "_Section":
        found = TITLES.get(title["name"])
        if found is None:
            return cls(None, None, options)
        benchmark, call = found
        if ranks is None and benchmark not in POINT_TO_POINT:
            raise UsageError(f"{path}:{lineno}: OMB does not print how many ranks ran its {title['name']} test: "
                             f"pass --ranks N")
        accel = (title["accel"] or "").lstrip("-").split(" ")[0].lower()
        run = ToolRun(tool="omb", tool_version=title["version"], file=path, first_line=lineno, backend="mpi",
                      ranks=2 if benchmark in POINT_TO_POINT else ranks,
                      device={"kind": accel or "cpu"}, command=args or None,
                      options={"title": title.group(0).lstrip("# ").strip(), "mpi_call": call, **options},
                      definitions=DEFINITIONS["collective" if benchmark not in POINT_TO_POINT else benchmark])
        if benchmark in POINT_TO_POINT:
            run.assumed.append("2 ranks: OMB's osu_latency, osu_bw and osu_bibw run on exactly two processes "
                               "(--ranks applies to collectives)")
        return cls(run, benchmark, options)

    def feed(self, line: str, lineno: int) -> None:
        dtype = _DATATYPE.fullmatch(line)
        buffers = _BUFFERS.fullmatch(line)
        if dtype:
            self.dtype = dtype_name(dtype.group(1).removesuffix("."))
        elif buffers:
            self.run.options["buffers"] = f"send {buffers.group(1)}, receive {buffers.group(2)}"
        elif line.startswith("# Size"):
            self.columns = _COLUMN.findall(line)
        elif line.startswith("DATA VALIDATION ERROR"):
            self.run.complete, self.run.end_reason = False, f"OMB stopped: {line}"
        elif line[:1].isdigit():
            if self.columns is None:
                raise UsageError(f"{self.run.file}:{lineno}: a table row before OMB's column header")
            self.run.add(self._row(line.split(), lineno))

    def _row(self, tokens: list[str], lineno: int) -> Row:
        if len(tokens) != len(self.columns) + 1:
            raise UsageError(f"{self.run.file}:{lineno}: {len(tokens)} columns where OMB's header has "
                             f"{len(self.columns) + 1} ({', '.join(['Size', *self.columns])})")
        try:
            size = int(tokens[0])
            values = {col: (tok if col == "Validation" else float(tok)) for col, tok in zip(self.columns, tokens[1:])}
        except ValueError:
            raise UsageError(f"{self.run.file}:{lineno}: not an OMB row: {' '.join(tokens)!r}") from None
        row = Row(benchmark=self.benchmark, size_bytes=size, latency_us={}, line=lineno, values=values,
                  dtype=self.dtype, op="sum" if COLLECTIVES[self.benchmark].reduces else None,
                  iterations=self.options.get("iterations"), warmup=self.options.get("warmup"),
                  in_place=self.options.get("in_place", False) if self.run.command else None,
                  window=self.options.get("window_size"))
        _latencies(row, values)
        if "Iterations" in values:
            row.iterations = int(values["Iterations"])
        if "Validation" in values:
            row.check = {"pass": "pass", "fail": "fail"}.get(str(values["Validation"]).lower())
        return row


def _latencies(row: Row, values: dict) -> None:
    """latency_us from the printed columns (bandwidth: the time per message it implies)."""
    for column, stat in (("Avg Latency(us)", "avg"), ("Min Latency(us)", "min"), ("Max Latency(us)", "max"),
                         ("Latency (us)", "avg")):
        if column in values:
            row.latency_us[stat] = values[column]
    for column, value in values.items():
        tail = _TAIL.fullmatch(column)
        if tail:
            row.latency_us[f"p{tail.group(1)}"] = value
    bandwidth = values.get("Bandwidth (MB/s)")
    if bandwidth:
        moved = 2 * row.size_bytes if row.benchmark == "bibw" else row.size_bytes
        row.latency_us["avg"] = moved / bandwidth  # bytes / (MB/s) = us with 1 MB = 1e6 B
        row.derived["latency_us.avg"] = DEFINITIONS[row.benchmark]["avg"]
    if row.benchmark in POINT_TO_POINT and "avg" in row.latency_us:
        avg = row.latency_us["avg"]
        row.latency_us.update(min=avg, max=avg, timing_ranks=1)
        row.derived["latency_us.min, latency_us.max"] = ("equal to avg: one rank (rank 0) timed, so the minimum and "
                                                         "maximum across timing ranks are its mean")


def _finish(run: ToolRun, options: dict) -> None:
    """Completeness: with -m known, the table must reach its largest size; else it is assumed."""
    if not run.rows:
        raise UsageError(f"{run.file}:{run.first_line}: OMB's {run.options['title']!r} has no table rows"
                         + (" of 1 B or more" if run.skipped else ""))
    if not run.complete:
        return
    largest = options.get("max_size")
    if largest is None:
        run.assumed.append("the table is complete: OMB prints no end line (give --args with -m to check)")
    elif max(r.size_bytes for r in run.rows) < largest:
        run.complete, run.end_reason = False, f"the table stops before -m's largest size ({largest} B)"

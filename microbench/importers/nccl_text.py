"""The line-by-line reader of nccl-tests' text output (see microbench.importers.nccl_tests)."""

from __future__ import annotations

import re
import shlex

from microbench.errors import UsageError
from microbench.importers import nccl_tests as nt
from microbench.importers.omb import numbered_lines
from microbench.importers.parsed import ToolRun, where


class TextReader:
    """Feeds on a log's lines; ``finish`` returns the runs found. State: the run being read and its table."""

    def __init__(self, path: str, ranks: int | None, benchmark: str | None, args: str | None):
        self.path, self.ranks, self.benchmark = path, ranks, benchmark
        self.argv = shlex.split(args or "")
        self.options = nt.args_options(self.argv)
        self.runs: list[ToolRun] = []
        self.run: ToolRun | None = None
        self.pending: dict = {}  #: version and program printed before the run's '# nThread' line
        self.columns: list[str] | None = None
        self.ranks_seen: dict[int, tuple[str, str]] = {}

    def feed(self, line: str, lineno: int) -> None:
        if self._header_line(line, lineno):
            return
        if self.run is None:
            return
        rank = nt.RANK_LINE.match(line)
        if rank:
            self.ranks_seen[int(rank.group(1))] = (rank.group(2), rank.group(3).strip())
        elif line.startswith("#") and " size " in f" {line[1:]} " and " count " in f" {line[1:]} ":
            self.columns = line[1:].split()
        elif line.startswith("# Out of bounds values"):
            self.run.complete, self.run.end_reason = True, ""
        elif self.columns and line[:1] != "#" and re.match(r"^\s*\d+\s", line):
            self._row(line.split(), lineno)

    def _header_line(self, line: str, lineno: int) -> bool:
        """Lines that start a run or describe the next one (version, program, NCCL version)."""
        version, starting, info = nt.VERSION_LINE.match(line), nt.STARTING.match(line), nt.NCCL_INFO.search(line)
        if version:
            self.pending["version"] = version.group(1)
            if version.group(2):
                self.pending["nccl"] = nt.nccl_version(int(version.group(2)))
        elif starting:
            self.pending["program"] = starting.group(1)
        elif info and "NCCL INFO" in line:
            (self.run.versions if self.run else self.pending)["nccl"] = info.group(1)
        elif nt.NTHREAD.match(line):
            self._start(line, lineno)
        else:
            return False
        return True

    def _start(self, line: str, lineno: int) -> None:
        self._close()
        program = self.pending.get("program") or (self.argv[0] if self.argv and not self.argv[0].startswith("-")
                                                  else None)
        if self.benchmark is None and program is None:
            raise UsageError(f"{self.path}:{lineno}: this nccl-tests output does not name its program (older "
                             f"versions print none): pass --benchmark")
        options = {k: int(m.group(1)) for k, pattern in nt.HEADER_ITEMS.items() if (m := re.search(pattern, line))}
        self.run = ToolRun(tool="nccl-tests", tool_version=self.pending.get("version"), file=self.path,
                           first_line=lineno, backend="nccl", command=shlex.join(self.argv) if self.argv else None,
                           options={"header": line.lstrip("# ").strip(), **options}, definitions=nt.DEFINITIONS,
                           complete=False, end_reason="the table ends without nccl-tests' summary (Out of bounds "
                                                      "values): the run stopped early")
        self.run.options["benchmark"] = self.benchmark or nt.benchmark_of(program)
        if "nccl" in self.pending:
            self.run.versions["nccl"] = self.pending["nccl"]
        self.stat = nt.latency_stat(self.options, f"{self.path}:{lineno}")
        if "average" not in self.options:
            self.run.assumed.append("time is the mean over ranks (-a 1, nccl-tests' default): give --args if the "
                                    "run used -a")
        self.pending, self.columns, self.ranks_seen = {}, None, {}

    def _row(self, tokens: list[str], lineno: int) -> None:
        cols = self.columns
        first_time = next((i for i, c in enumerate(cols) if c in ("time", "cputime")), None)
        if first_time is None or "cputime" in cols:
            raise UsageError(f"{self.path}:{lineno}: nccl-tests reported CPU time (-C 1) or no time column; not "
                             f"imported")
        meta_cols, rest = cols[:first_time], [c for c in cols[first_time:] if c != "timestamp"]
        group = len(rest) // 2
        if len(tokens) < len(meta_cols) + 2 * group:
            raise UsageError(f"{self.path}:{lineno}: {len(tokens)} columns where the header has "
                             f"{len(meta_cols) + 2 * group}")
        meta = dict(zip(meta_cols, tokens))
        values = tokens[len(meta_cols):len(meta_cols) + 2 * group]
        halves = [(i == 1, {c: _number(v) for c, v in zip(rest[:group], values[i * group:(i + 1) * group])})
                  for i in (0, 1)]
        for _, figures in halves:
            if "error" in figures:  # older versions: the largest error, not a count of wrong elements
                figures["#wrong"] = "N/A"
        for row in nt.rows_from(self.run.options["benchmark"], self._ranks(), meta, halves, lineno, self.stat,
                                f"{self.path}:{lineno}"):
            self.run.add(row)

    def _ranks(self) -> int | None:
        return self.ranks or len(self.ranks_seen) or None

    def _close(self) -> None:
        run = self.run
        if run is None:
            return
        if not run.rows:
            raise UsageError(f"{self.path}:{run.first_line}: an nccl-tests run without table rows")
        hosts = [self.ranks_seen[r][0] for r in sorted(self.ranks_seen)]
        run.ranks, run.hosts_by_rank = self._ranks(), hosts or None
        if run.ranks is None:
            raise UsageError(f"{self.path}:{run.first_line}: the output lists no ranks ('# Rank ...' lines): "
                             f"pass --ranks N")
        run.device = nt.device_of([self.ranks_seen[r][1] for r in sorted(self.ranks_seen)])
        for row in run.rows:
            row.iterations, row.warmup = run.options.get("iterations"), run.options.get("warmup")
        self.runs.append(run)
        self.run = None

    def finish(self) -> list[ToolRun]:
        self._close()
        return self.runs


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text  # N/A


def parse_text(text: str, path: str, ranks: int | None, benchmark: str | None, args: str | None) -> list[ToolRun]:
    """Every nccl-tests run in a text log (several runs may follow each other)."""
    reader = TextReader(path, ranks, benchmark, args)
    for lineno, raw in numbered_lines(text, path):
        with where(f"{path}:{lineno}"):
            reader.feed(raw.rstrip(), lineno)
    runs = reader.finish()
    if not runs:
        raise UsageError(f"{path}: no nccl-tests run found (no '# nThread ...' line)")
    return runs

"""DeepSpeed comms-logger output (deepspeed/utils/comms_logging.py, DeepSpeed 0.7 to 0.16).

Two shapes, both printed by rank 0 only (``log_summary`` prints on rank 0; verbose lines go through
``log_dist(..., ranks=[0])``):

- the ``log_summary()`` table: a ``Comm. Op  Message Size  Count ...`` header, an op-name line (with
  ``| [Caller Func: f]`` under ``debug``), then one indented row per message size. Counts are cumulative,
  so the last table is used; the "Breakdown with straggler effect" table repeats it and is left out;
- verbose lines, one per call: ``comm op: all_reduce | time (ms): 9.46 | msg size: 24.0 MB | ...``
  (until mid-2023 with ``rank=0 | `` before ``comm op``), used when the file holds no table.

Sizes are the logged tensor argument (the input; for all_to_all the whole input buffer), printed rounded to
two decimals in binary units. Launcher prefixes (launchers.py) are taken off every line first.
"""

from __future__ import annotations

import re
from collections import Counter

from microbench.workload.traces.launchers import strip_launcher
from microbench.workload.traces.names import DEEPSPEED_NO_DATA, DEEPSPEED_OPS, NO_DATA, UNCURVED, letters
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_ROW = re.compile(r"\s+(?P<size>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?B)\s+(?P<count>\d+)\s+\d")
_OP = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\s*\|\s*\[Caller Func: [^\]]*\])?\s*$")
_VERBOSE = re.compile(r"(?:\[Rank (?P<logrank>\d+)\] )?(?:rank=(?P<rank>\d+)\s*\|\s*)?comm op: "
                      r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\s*\|\s*\[Caller Func: [^\]]*\])?\s*\|\s*time \(ms\):"
                      r"\s*[\d.]+\s*\|\s*msg size:\s*(?P<size>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?B)")
_NOT_LOGGER = "not a comms logger line"


def _bytes(size: str, unit: str) -> int:
    return round(float(size) * _UNITS[unit])


class _Reader:
    """Line-by-line state: which table we are in, the last summary table, the verbose calls."""

    def __init__(self, tally: TraceTally):
        self.tally = tally
        self.mode: str | None = None  # "summary", "straggler" or None (outside a table)
        self.op: str | None = None
        self.summary: list[tuple[str, int, int]] = []
        self.verbose: Counter = Counter()  # (rank, name, bytes) -> calls

    def line(self, raw: str) -> None:
        line, who = strip_launcher(raw)
        if "Comm. Op" in line and "Message Size" in line:
            self.mode, self.op = ("straggler" if "straggler" in line.lower() or "comm lat" in line else "summary"), None
            if self.mode == "summary":
                self.summary = []
        elif "Breakdown with straggler effect" in line:
            self.mode = "straggler"
        elif "comm op:" in line and (match := _VERBOSE.search(line)):
            rank = match["rank"] or match["logrank"]
            nbytes = _bytes(match["size"], match["unit"])
            self.verbose[(f"rank {rank}" if rank else "rank 0", match["name"], nbytes)] += 1
        else:
            self._table_line(line)

    def _table_line(self, line: str) -> None:
        stripped = line.strip()
        if self.mode is None or not stripped or set(stripped) <= set("_-"):
            if stripped and self.mode is None:
                self.tally.skipped[_NOT_LOGGER] += 1
        elif line[:1].isspace():  # a row of the table
            row = _ROW.match(line)
            if self.mode == "straggler":
                self.tally.skipped["straggler breakdown row (repeats the summary)"] += 1
            elif row and self.op is not None:
                self.summary.append((self.op, _bytes(row["size"], row["unit"]), int(row["count"])))
            else:
                self.tally.unreadable += 1
        elif name := _OP.match(line):
            self.op = name["name"]
        else:  # the table has ended
            self.mode = None
            self.tally.skipped[_NOT_LOGGER] += 1

    def finish(self, group: int | None) -> None:
        tally = self.tally
        if self.summary:
            for name, nbytes, count in self.summary:
                _add(tally, "rank 0", name, nbytes, group, count)
            if self.verbose:
                tally.skipped["verbose line (the summary table counts it)"] += sum(self.verbose.values())
            tally.note("counts come from the last log_summary table (rank 0's cumulative counts)")
        else:
            for (rank, name, nbytes), count in self.verbose.items():
                _add(tally, rank, name, nbytes, group, count)
        tally.note("DeepSpeed prints sizes rounded to 2 decimals in binary units: bytes are approximate")


def _add(tally: TraceTally, rank: str, name: str, nbytes: int, group: int | None, count: int) -> None:
    """One DeepSpeed op; all_to_all sizes are whole input buffers and need the group size."""
    if name in DEEPSPEED_NO_DATA:
        tally.skipped[NO_DATA] += count
        return
    collective = DEEPSPEED_OPS.get(name)
    if collective is None:
        tally.uncurved[UNCURVED.get(letters(name), name)] += count
        return
    if collective == "alltoall":
        if not group:
            tally.skipped["all_to_all without --trace-group-size (its size is the whole buffer)"] += count
            return
        nbytes //= group
    tally.add(rank, collective, nbytes, group, count)


def read_deepspeed(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    reader = _Reader(tally)
    for block in source.blocks(tally.skipped):
        lines = block.decode("utf-8", errors="replace").splitlines()
        tally.entries += len(lines)
        for line in lines:
            reader.line(line)
    reader.finish(group)

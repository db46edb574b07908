"""Terminal output on rank 0: the OMB-style table (header lines begin with '#'), notes and progress."""

from __future__ import annotations

import sys
from typing import TextIO

from microbench.sizes import format_size

COLUMNS = ("Size(B)", "Avg(us)", "Min(us)", "Max(us)", "P50(us)", "P99(us)", "AlgBW(GB/s)", "BusBW(GB/s)", "Check")
_WIDTHS = (12, 11, 11, 11, 11, 11, 13, 13, 7)
#: Optional columns, shown when the run's options make them meaningful: name -> (header, width).
EXTRA_COLUMNS = {"cache": ("Cache", 7), "first": ("First(us)", 11)}


def _fmt_row(values, widths) -> str:
    return "".join(str(v).rjust(w) for v, w in zip(values, widths))


def _widths(extra) -> tuple:
    return _WIDTHS + tuple(EXTRA_COLUMNS[e][1] for e in extra)


def format_header(extra=()) -> str:
    return "#" + _fmt_row(COLUMNS + tuple(EXTRA_COLUMNS[e][0] for e in extra), _widths(extra))[1:]


def _us(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_result_row(res: dict, extra=()) -> str:
    lat = res.get("latency_us") or {}
    check = {"pass": "pass", "fail": "FAIL", None: "-"}.get(res.get("check"), str(res.get("check")))
    values = [
        res["size_bytes"], _us(lat.get("avg")), _us(lat.get("min")), _us(lat.get("max")), _us(lat.get("p50")),
        _us(lat.get("p99")), f"{res.get('algbw_gbps', 0):.4f}", f"{res.get('busbw_gbps', 0):.4f}", check,
    ]
    for e in extra:
        if e == "cache":
            values.append(res.get("cache", "-"))
        elif e == "first":
            first = res.get("first_call_us")
            values.append(_us(first.get("max")) if isinstance(first, dict) else "-")
    return _fmt_row(values, _widths(extra))


class Table:
    """Prints what the records writer hands it; the stream is stdout unless told otherwise."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.extra: tuple = ()

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def __call__(self, kind: str, rec: dict) -> None:
        if kind == "run":
            self._print(f"# microbench {rec.get('microbench_version')}  run {rec.get('run_id')}  {rec.get('time_utc')}")
            hosts = rec.get("ranks_per_host") or {}
            hostlist = ", ".join(f"{h} ({n})" for h, n in list(hosts.items())[:8])
            more = f" and {len(hosts) - 8} more" if len(hosts) > 8 else ""
            self._print(f"# {rec.get('ranks')} ranks on {len(hosts)} host(s): {hostlist}{more}")
            lib = (rec.get("mpi") or {}).get("library_version")
            if lib:
                self._print(f"# MPI: {lib.splitlines()[0]}")
            cond = rec.get("conditions") or {}
            self._print("# huge pages: {} (kernel THP {}), timer {}".format(
                cond.get("huge_pages"), cond.get("thp"), cond.get("timer")))
        elif kind == "section":
            self._print("")
            self._print(f"# {rec['benchmark']}: {rec['summary']}")
            for line in rec.get("lines", ()):
                self._print(f"# {line}")
            self.extra = tuple(rec.get("extra_columns", ()))
            self._print(format_header(self.extra))
        elif kind == "result":
            self._print(format_result_row(rec, self.extra))
        elif kind == "note":
            self._print(f"# note: {rec['text']}")
        elif kind == "end":
            status = rec.get("status")
            if status != "complete":
                self._print(f"# run {status}: {rec.get('reason', '')}")


def describe_counts(iterations: tuple[int, int], warmup: tuple[int, int], fixed: bool) -> str:
    """'iterations 1000 / 100 above 8K, warmup 100 / 10' style summary."""
    if fixed:
        return f"iterations {iterations[0]}, warmup {warmup[0]}"
    return (f"iterations {iterations[0]} (up to {format_size(8192)}) / {iterations[1]} (above), "
            f"warmup {warmup[0]} / {warmup[1]}")

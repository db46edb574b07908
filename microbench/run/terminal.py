"""Terminal output on rank 0: the OMB-style table (header lines begin with '#'), notes and progress."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

from microbench.benchmarks.base import LARGE_MESSAGE_BYTES
from microbench.errors import printable, terminal_safe, unwrapped
from microbench.measure import overlap_stats
from microbench.measure.loops import LAUNCH_BOUND_ADVICE
from microbench.options import counts_for, dtype_for
from microbench.run.diagnostics.terminal import DIAGNOSTIC_LINES
from microbench.units import format_bytes

COLUMNS = ("Size(B)", "Avg(us)", "Min(us)", "Max(us)", "P50(us)", "P99(us)", "AlgBW(GB/s)", "BusBW(GB/s)", "Check")
_WIDTHS = (12, 11, 11, 11, 11, 11, 13, 13, 7)
#: Optional columns, shown when the run's options make them meaningful: name -> (header, width).
EXTRA_COLUMNS = {"cache": ("Cache", 7), "first": ("First(us)", 11), "skew": ("Skew", 10),
                 "slowest": ("Slowest", 16), "fastest": ("Fastest", 16), "peak": ("Peak%", 9)}


def _fmt_row(values, widths) -> str:
    return "".join(str(v).rjust(w) for v, w in zip(values, widths))


def _widths(extra) -> tuple:
    return _WIDTHS + tuple(EXTRA_COLUMNS[e][1] for e in extra)


def format_header(extra=()) -> str:
    return "#" + _fmt_row(COLUMNS + tuple(EXTRA_COLUMNS[e][0] for e in extra), _widths(extra))[1:]


def _us(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _gbps(value) -> str:
    """A bandwidth cell; ``-`` where the record has none (imported logs without a mean latency)."""
    return "-" if value is None else f"{value:.4f}"


LAUNCH_MARK = "  launch-bound"  #: after a row whose samples the host's launch rate set (issue 44)


def launch_bound(res: dict) -> bool:
    """The result's samples measured the host's launches, not the collective (its ``launch.bound``)."""
    launch = res.get("launch")
    return isinstance(launch, dict) and launch.get("bound") is True


def format_result_row(res: dict, extra=()) -> str:
    lat = res.get("latency_us") or {}
    check = {"pass": "pass", "fail": "FAIL", None: "-"}.get(res.get("check"), str(res.get("check")))
    values = [
        res["size_bytes"], _us(lat.get("avg")), _us(lat.get("min")), _us(lat.get("max")), _us(lat.get("p50")),
        _us(lat.get("p99")), _gbps(res.get("algbw_gbps")), _gbps(res.get("busbw_gbps")), check,
    ]
    for e in extra:
        if e == "cache":
            values.append(res.get("cache", "-"))
        elif e == "first":
            first = res.get("first_call_us")
            values.append(_us(first.get("max")) if isinstance(first, dict) else "-")
        elif e == "peak":
            values.append(peak_cell(res.get("peak")))
        else:
            values.append(_straggler_cell(res.get("stragglers"), e))
    return _fmt_row(values, _widths(extra)) + (LAUNCH_MARK if launch_bound(res) else "")


def peak_cell(peak: dict | None) -> str:
    """busbw as a share of the path's peak (``62.5%``); ``>wire`` where NCCL reduced inside a switch (NVLS,
    SHARP: busbw can exceed the wire); ``-`` where no peak is known."""
    if not isinstance(peak, dict):
        return "-"
    if peak.get("beyond_wire"):
        return ">wire"
    share = peak.get("share")
    return "-" if share is None else f"{share * 100:.1f}%"


def _straggler_cell(block: dict | None, column: str) -> str:
    """Skew as ``12.3x``; the slowest or fastest rank as its node's label (the host, or ``rank N`` on one host)."""
    if not block:
        return "-"
    if column == "skew":
        return "-" if block.get("skew") is None else f"{block['skew']:.2f}x"
    who = block[column]
    label = f"rank {who['rank']}" if block.get("unit") == "rank" else who["host"]
    return label[-15:]


def progress_wanted(stream: TextIO | None = None) -> bool:
    """Progress only for a person watching: the output is a terminal, or the --np parent saw one.

    Under a launcher the rank cannot tell: Open MPI's mpiexec hands ranks a pseudo-terminal even when
    the job's output goes to a file, so there the bar is off unless MICROBENCH_PROGRESS=1 asks for it."""
    stream = stream or sys.stdout
    if os.environ.get("MICROBENCH_PROGRESS") in ("0", "1"):
        return os.environ["MICROBENCH_PROGRESS"] == "1"
    from microbench.cluster import launch

    if launch.discover().under_launcher:
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress bar over all sizes of the run (tqdm), on the table's stream so the two never interleave.

    The bar writes carriage returns, which the sanitized stdout (``errors.PrintableStream``) would show as
    ``\\r``: the bar gets the stream under it, and lines printed above the bar pass ``terminal_safe`` here."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.stream = stream or sys.stdout
        self.enabled = progress_wanted(self.stream) if enabled is None else enabled
        self._raw = unwrapped(self.stream)
        self._bar = None
        self._started = False
        if self.enabled and total > 0:
            from tqdm import tqdm

            # Under mpiexec rank 0 has no terminal of its own: the --np parent passes its width along.
            columns = int(os.environ.get("MICROBENCH_COLUMNS") or shutil.get_terminal_size((100, 24)).columns)
            self._bar = tqdm(total=total, file=self._raw, leave=False, unit="size", ncols=max(columns, 40), nrows=24,
                             bar_format="{desc} {bar} {n_fmt}/{total_fmt} sizes [{elapsed}<{remaining}]")

    def step(self, what: str) -> None:
        """Say what is being measured now (before it starts)."""
        if self._bar is not None:
            self._bar.set_description_str(printable(what), refresh=True)

    def next(self, what: str) -> None:
        """The previous step (if any) finished; ``what`` starts now."""
        if self._started:
            self.done()
        self._started = True
        self.step(what)

    def done(self) -> None:
        """One size finished."""
        if self._bar is not None:
            self._bar.update(1)

    def write(self, text: str) -> None:
        """Print a line above the bar."""
        if self._bar is not None:
            self._bar.write(terminal_safe(text), file=self._raw)
            self._raw.flush()
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class TerminalTable:
    """Prints what the records writer hands it; the stream is stdout unless told otherwise."""

    def __init__(self, stream: TextIO | None = None, progress: Progress | None = None):
        self.stream = stream or sys.stdout
        self.extra: tuple = ()
        self.progress = progress
        self.launch_noted = False

    def _print(self, text: str) -> None:
        if self.progress is not None:
            self.progress.write(text)
        else:
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
            self.launch_noted = False
            self._print(overlap_stats.header() if rec.get("table") == "overlap" else format_header(self.extra))
        elif kind == "result" and rec.get("benchmark") == "pairs":
            for line in format_pairs(rec):
                self._print(line)
        elif kind == "result":
            self._print(overlap_stats.row(rec) if rec.get("overlap") else format_result_row(rec, self.extra))
            if launch_bound(rec) and not self.launch_noted:  # once per benchmark: what the mark means
                self._print(f"# note: {LAUNCH_BOUND_ADVICE}")
                self.launch_noted = True
        elif kind in DIAGNOSTIC_LINES:
            for line in DIAGNOSTIC_LINES[kind](rec):
                self._print(line)
        elif kind == "note":
            self._print(f"# note: {rec['text']}")
        elif kind == "end":
            if self.progress is not None:
                self.progress.close()
            status = rec.get("status")
            if status != "complete":
                self._print(f"# run {status}: {rec.get('reason', '')}")


def format_pairs(rec: dict) -> list[str]:
    """The pairwise test's matrix: '#' header lines, one row per participant, then the outliers."""
    labels, matrix, unit = rec["labels"], rec["matrix"], rec["matrix_unit"]
    what = "latency (p50 of half the round trip)" if rec["metric"] == "latency" else \
        f"bandwidth (p50 per-message time, window {rec.get('window')})"
    width = max(10, max(len(l) for l in labels) + 2)
    lines = ["", f"# pairs: {what} at {rec['size_bytes']} B, {len(labels)} {rec['unit']}s, "
                 f"{rec['schedule']} schedule in {rec['rounds']} rounds; cells in {unit}",
             "#" + "".rjust(width - 1) + "".join(l.rjust(width) for l in labels)]
    for label, row in zip(labels, matrix):
        cells = "".join(("-" if v is None else f"{v:.3f}").rjust(width) for v in row)
        lines.append(label.rjust(width) + cells)
    return lines + outlier_lines(rec)


def outlier_lines(rec: dict) -> list[str]:
    """What the pairwise test judged: each link and each node that stands out, else that none does (per rule)."""
    unit, rule = rec["matrix_unit"], rec["outlier_rule"]
    node_rule = rec.get("node_outlier_rule") or {}
    lines = [f"# OUTLIER link {o['labels'][0]} - {o['labels'][1]}: {o['value']:.3f} {unit} "
             f"(z {o['z']}, {rule['direction']} {rule.get('threshold', 0):.3f})" for o in rec["outliers"]]
    lines += [f"# OUTLIER node {n['label']}: row median {n['row_median']:.3f} {unit} (z {n['z']}, "
              f"{node_rule['direction']} {node_rule.get('threshold', 0):.3f})" for n in rec.get("node_outliers", [])]
    if rec["outliers"] or rec.get("node_outliers"):  # issue 39: what one run's flags are worth
        passes = rule.get("passes")
        lines.append(f"# outliers: stood out in the median of {passes} passes and in a majority of them; one run: "
                     "repeat the run before acting (a spec with min_runs judges the median run)" if passes else
                     "# outliers: one pass of one run: repeat before acting (--pair-repeats, more runs)")
    if not rec["outliers"]:
        med = rule.get("median")
        lines.append(f"# no link stands out (median {med:.3f} {unit}, limit z {rule['z_limit']})" if med is not None
                     else "# too few pairs to judge link outliers")
    if not rec.get("node_outliers"):
        med = node_rule.get("median")
        lines.append(f"# no node stands out (median of row medians {med:.3f} {unit}, limit z {node_rule['z_limit']})"
                     if med is not None else "# too few participants to judge node outliers (4 needed)")
    return lines


STRAGGLER_COLUMNS = ("skew", "slowest", "fastest")  #: the table's optional straggler columns


def section(coll, opts, transport, nranks: int, nhosts: int) -> dict:
    """What the writer shows above a benchmark's table: its name, its '#' lines and its columns."""
    extra = (["cache"] if opts.cache != "warm" else []) + (["first"] if opts.first_call_samples > 1 else [])
    extra += list(STRAGGLER_COLUMNS) if opts.straggler_columns else []
    lines = section_lines(coll, dtype_for(opts, coll), opts, transport, nranks, nhosts,
                          transport.in_place_for(coll, opts))
    return {"benchmark": coll.name, "summary": coll.summary, "lines": lines, "extra_columns": extra,
            "table": "overlap" if coll.nonblocking else "latency"}


def section_lines(coll, dtype, opts, transport, nranks: int, nhosts: int, in_place: bool) -> list[str]:
    """The '#' lines above a benchmark's table: what runs, on what, how it is timed, how figures are made."""
    call = transport.call_name(coll.primitive)
    what = [f"backend {opts.backend} ({transport.describe()}{', ' + call if call else ''})",
            f"{nranks} ranks on {nhosts} host(s)", f"dtype {dtype.name}"]
    if transport.device.kind == "cuda":
        what.append(f"{opts.buffer} buffers on {transport.device.name}"
                    + (" staged through the host" if transport.staged else ""))
    if coll.reduces:
        what.append(f"op {opts.op}")
    if coll.in_place_ok:
        forced = in_place and not opts.in_place
        what.append("in-place" + (" (the torch API has no out-of-place form)" if forced else "")
                    if in_place else "out-of-place")
    if coll.rooted:
        what.append(f"root {opts.root}")
    if coll.point_to_point:
        pairs = nranks // 2
        what.append(f"{pairs} pair(s): rank i with i+{pairs}")
        if coll.windowed:
            what.append(f"window {opts.window}")
    small, large = counts_for(opts, coll, 1), counts_for(opts, coll, LARGE_MESSAGE_BYTES + 1)
    if opts.time_budget:
        counts = f"iterations chosen for {opts.time_budget:g} s per size, warmup {small[1]} / {large[1]}"
    elif opts.iterations is not None:
        counts = f"iterations {opts.iterations}, warmup {small[1]} / {large[1]} (sizes above 8K)"
    else:
        counts = f"iterations {small[0]} / {large[0]} and warmup {small[1]} / {large[1]} (up to 8K / above)"
    cache = f"cache {opts.cache}"
    if opts.cache != "warm" or opts.flush:
        flush = ", flush before each iteration" if opts.flush else ""
        cache += f" (against {format_bytes(transport.cache_bytes)}{flush})"
    return [", ".join(what),
            f"loop {transport.loop.label()}, {cache}, sync {opts.sync}, check {'on' if opts.check else 'off'}, {counts}",
            "latency: avg/min/max across ranks of per-rank means; P50/P99 of all samples; "
            f"algbw = S / avg, busbw = algbw x {coll.busbw_formula}",
            *(overlap_stats.section_lines(opts) if coll.nonblocking else ())]

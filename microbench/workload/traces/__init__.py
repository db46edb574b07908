"""Trace readers: the messages of real runs from their logs and traces, one rank at a time.

Formats (docs/workload-traces.md lists the versions each handles and how they were checked):

- ``nccl``: NCCL/RCCL ``NCCL_DEBUG=INFO`` logs (nccl_log.py)
- ``nccl-profiler``: NCCL profiler-plugin JSON of the example plugin (nccl_profiler.py)
- ``deepspeed``: DeepSpeed comms-logger summaries and verbose lines (deepspeed.py)
- ``kineto``: PyTorch profiler traces, 2.0-era annotations and newer metadata (kineto.py)
- ``execution-trace``: PyTorch Execution Trace JSON (execution_trace.py)
- ``param``: PARAM's basic comms trace (param.py)
- ``nccl-inspector``: NCCL Inspector plugin files, JSON lines (inspector.py; issue 43)
- ``nccl-tests-json``: nccl-tests' ``-J`` JSON file (nccl_tests_json.py; issue 43)

Every reader streams its file (plain or gzip) and tallies calls per rank, collective, size and group
(tally.py); bytes are message sizes as microbench defines them (messages.py).
"""

from __future__ import annotations

import re
from collections import Counter

from microbench.errors import UsageError
from microbench.workload.traces.deepspeed import read_deepspeed
from microbench.workload.traces import inspector as _inspector
from microbench.workload.traces import nccl_tests_json as _nccl_tests_json
from microbench.workload.traces.execution_trace import read_execution_trace
from microbench.workload.traces.kineto import read_kineto
from microbench.workload.traces.nccl_log import RECORD, read_nccl_log
from microbench.workload.traces.nccl_profiler import read_nccl_profiler
from microbench.workload.traces.param import read_param
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

READERS = {"nccl": read_nccl_log, "nccl-profiler": read_nccl_profiler, "deepspeed": read_deepspeed,
           "kineto": read_kineto, "execution-trace": read_execution_trace, "param": read_param,
           "nccl-inspector": _inspector.read_inspector, "nccl-tests-json": _nccl_tests_json.read_nccl_tests_json}
FORMATS = tuple(READERS)
JSON_FORMATS = ("nccl-profiler", "kineto", "execution-trace", "param", "nccl-inspector", "nccl-tests-json")
#: formats whose calls record no group size: --trace-group-size states it
NO_GROUP_FORMATS = ("deepspeed", "nccl-profiler")

_PROFILER_CAT = re.compile(rb'"cat": "(?:GROUP|COLL|P2P|PROXY|NET|GROUP_API|COLL_API|P2P_API|KERNEL_LAUNCH)"')
_DEEPSPEED = re.compile(rb"Comm\. Op\s+Message Size|comm op: \w+")

__all__ = ["FORMATS", "TraceTally", "detect_format", "read_trace", "read_traces"]


def detect_format(head: bytes) -> str | None:
    """The format from a file's first bytes, or None when they cannot tell."""
    start = head.lstrip()[:1]
    if _inspector.looks_like(head):  # issue 43: before the others, which a JSON-lines file can resemble
        return "nccl-inspector"
    if _nccl_tests_json.looks_like(head):
        return "nccl-tests-json"
    if start == b"{" and b'"traceEvents"' in head:
        return "kineto"
    if start == b"{" and b'"nodes"' in head and b'"schema"' in head:
        return "execution-trace"
    if start == b"[" and _PROFILER_CAT.search(head):
        return "nccl-profiler"
    if start == b"[" and re.search(rb'"(?:comms|compute)"\s*:', head):
        return "param"
    if RECORD.search(head):
        return "nccl"
    if _DEEPSPEED.search(head):
        return "deepspeed"
    if start == b"[" and re.search(rb'"ph"\s*:', head):
        return "kineto"
    return None


def _scan_whole_text(path: str) -> str | None:
    """A text format whose marks come after the first MiB (a long log, a summary at its end)."""
    with TraceSource(path) as source:
        for block in source.blocks(Counter()):
            if RECORD.search(block):
                return "nccl"
            if _DEEPSPEED.search(block):
                return "deepspeed"
    return None


def _open(path: str, fmt: str | None, partial: bool) -> tuple[TraceSource, str]:
    source = TraceSource(path, partial)
    try:
        if not source.head.strip():
            raise UsageError(f"trace {path} is empty")
        if b"\x00" in source.head[:65536]:
            raise UsageError(f"cannot read trace {path}: not a text or gzip-compressed text file")
        looks_json = source.head.lstrip()[:1] in (b"{", b"[")
        if fmt in JSON_FORMATS and not looks_json:
            raise UsageError(f"cannot read trace {path} as {fmt}: it is not a JSON file")
        found = fmt or detect_format(source.head) or (None if looks_json else _scan_whole_text(path))
        if found is None:
            raise UsageError(f"cannot tell the format of trace {path}: pass --trace-format {'|'.join(FORMATS)}")
        return source, found
    except BaseException:
        source.close()
        raise


def read_trace(path: str, fmt: str | None = None, group_size: int | None = None,
               partial: bool = False) -> TraceTally:
    """Read one trace (format detected when not given); UsageError when it holds no call to price.

    ``group_size`` states the group of calls whose format records none; ``partial`` reads a truncated file
    as far as it goes (and says so in the notes).
    """
    source, fmt = _open(path, fmt, partial)
    with source:
        tally = TraceTally(path, fmt)
        READERS[fmt](source, tally, group_size)
        if source.truncated:
            tally.note(f"the gzip data ends after {source.text_bytes} bytes of text: counted what came before "
                        "(--trace-partial)")
    if group_size and fmt not in NO_GROUP_FORMATS:
        tally.note("--trace-group-size is used only for calls whose trace records no group size")
    if not tally.calls:
        unattributed = sum(tally.unattributed.values())
        uncurved = ", ".join(f"{name} {n}" for name, n in sorted(tally.uncurved.items()))
        raise UsageError(f"no collective calls found in {path} read as {fmt} ({tally.unreadable} unreadable of "
                         f"{tally.entries} {tally.unit}" + (f", {unattributed} unattributed" if unattributed else "")
                         + (f", uncurved: {uncurved}" if uncurved else "")
                         + "".join(f", {n} {why}" for why, n in sorted(tally.skipped.items()) if n > 0) + ")")
    return tally


def read_traces(paths: list[str], fmt: str | None = None, group_size: int | None = None,
                partial: bool = False) -> TraceTally:
    """Several traces (one per rank, or a job's logs) as one: ranks of the same name are the same rank."""
    tallies = [read_trace(path, fmt, group_size, partial) for path in paths]
    combined = tallies[0]
    for other in tallies[1:]:
        combined.absorb(other)
    return combined

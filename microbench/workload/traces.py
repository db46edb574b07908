"""Trace readers: the same messages from real logs (NCCL, DeepSpeed comms logger, PyTorch profiler, PARAM).

Every reader turns one file into calls (process, collective, bytes, group size) with bytes as microbench
defines message size; unreadable lines or entries are counted, never fatal. Counts are calls per process
(the mean over the processes the file holds), divided by ``iterations`` when given.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from microbench.errors import UsageError
from microbench.workload.messages import Message, merge

FORMATS = ("nccl", "deepspeed", "kineto", "param")

#: ncclDataType_t codes (nccl.h) -> bytes per element
NCCL_TYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}

#: element type names of the PyTorch profiler (c10 ScalarType) and of PARAM, lower case -> bytes
TYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16,
}

NO_DATA = "no data (barrier, wait, init)"


@dataclass(frozen=True)
class Call:
    """One collective call read from a trace."""

    process: str
    collective: str
    bytes: int
    group_size: int | None


@dataclass
class TraceReport:
    """What a trace file held: its calls, what could not be read, what was left out and why."""

    path: str
    format: str
    entries: int = 0  #: lines (text formats) or events (JSON formats) examined
    calls: list[Call] = field(default_factory=list)
    unreadable: int = 0
    skipped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def processes(self) -> list[str]:
        return sorted({c.process for c in self.calls})

    def messages(self, iterations: int = 1) -> list[Message]:
        """Calls per process per iteration: mean over the file's processes, divided by ``iterations``."""
        per_process = max(len(self.processes), 1) * iterations
        tally = Counter((c.collective, c.bytes, c.group_size) for c in self.calls)
        return merge(Message(coll, nbytes, n / per_process, group, "trace")
                     for (coll, nbytes, group), n in tally.items())

    def summary(self) -> dict:
        return {"file": self.path, "format": self.format, "entries": self.entries, "calls": len(self.calls),
                "processes": len(self.processes), "unreadable": self.unreadable, "skipped": dict(self.skipped),
                "notes": self.notes}


def _classify(report: TraceReport, name: str, key: str, names: dict[str, str],
              no_data: set[str] = frozenset()) -> str | None:
    """The collective a traced op name stands for, or None once the reason it is left out is counted."""
    if key in no_data:
        report.skipped[NO_DATA] += 1
        return None
    collective = names.get(key)
    if collective is None:
        report.skipped[f"unsupported collective {name}"] += 1
    return collective


# ------------------------------------------------------------------------------------------ NCCL
_NCCL_OP = re.compile(r"(?P<op>[A-Za-z]+): opCount\s+[0-9a-fA-F]+\s")
_NCCL_FIELDS = re.compile(r"\bcount (?P<count>\d+) datatype (?P<dtype>\d+)\b.*?\[nranks=(?P<nranks>\d+)\]")
_NCCL_PROCESS = re.compile(r"(?P<host>[^\s:\[\]()]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO")
_NCCL_NAMES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
               "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce", "send": "send", "recv": "recv",
               "alltoall": "alltoall"}


def read_nccl(text: str, report: TraceReport) -> None:
    """NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL lines: ``<Op>: opCount .. count N datatype D .. [nranks=n]``.

    count is per-rank sendcount for AllGather and recvcount for ReduceScatter (so the message size is
    count*size and count*nranks*size); datatype codes are nccl.h's. Other lines are not collective lines.
    """
    for line in text.splitlines():
        report.entries += 1
        op = _NCCL_OP.search(line)
        if not op:
            report.skipped["not a collective line"] += 1
            continue
        fields = _NCCL_FIELDS.search(line, op.end())
        if not fields or int(fields["dtype"]) not in NCCL_TYPE_BYTES:
            report.unreadable += 1
            continue
        collective = _classify(report, op["op"], op["op"].lower(), _NCCL_NAMES)
        if collective is None:
            continue
        count, nranks = int(fields["count"]), int(fields["nranks"])
        nbytes = count * NCCL_TYPE_BYTES[int(fields["dtype"])] * (nranks if collective == "reduce_scatter" else 1)
        proc = _NCCL_PROCESS.search(line[:op.start()])
        process = f"{proc['host']}:{proc['pid']}" if proc else "?"
        report.calls.append(Call(process, collective, nbytes, nranks))
    report.notes.append("processes are told apart by the host:pid prefix of each line")


# ------------------------------------------------------------------------------------- DeepSpeed
_DS_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_DS_ROW = re.compile(r"^\s+(?P<size>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?B)\s+(?P<count>\d+)\s+\d")
_DS_OP = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\s*\|\s*\[Caller Func: [^\]]*\])?\s*$")
_DS_VERBOSE = re.compile(r"(?:rank=(?P<rank>\d+)\s*\|\s*)?comm op: (?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                         r"(?:\s*\|\s*\[Caller Func: [^\]]*\])?\s*\|\s*time \(ms\):\s*[\d.]+\s*\|\s*"
                         r"msg size:\s*(?P<size>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?B)")
_DS_LAUNCHER_PREFIX = re.compile(r"^\[[^\]]*\]:")  # torchrun --tee's "[default0]:"
_DS_NAMES = {
    "all_reduce": "allreduce", "all_reduce_coalesced": "allreduce", "inference_all_reduce": "allreduce",
    "all_gather": "allgather", "all_gather_into_tensor": "allgather", "all_gather_base": "allgather",
    "allgather_fn": "allgather", "all_gather_coalesced": "allgather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_fn": "reduce_scatter",
    "reduce_scatter_coalesced": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "all_to_all_single": "alltoall", "all_to_all": "alltoall",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv",
}
_DS_NO_DATA = {"barrier", "monitored_barrier", "log_summary_barrier"}


def _ds_bytes(size: str, unit: str) -> int:
    return round(float(size) * _DS_UNITS[unit])


def _ds_call(report: TraceReport, process: str, name: str, nbytes: int, group: int | None) -> Call | None:
    """One DeepSpeed op as a call; all_to_all sizes are whole input buffers and need the group size."""
    collective = _classify(report, name, name, _DS_NAMES, _DS_NO_DATA)
    if collective is None:
        return None
    if collective == "alltoall":
        if not group:
            report.skipped["all_to_all without --trace-group-size (its size is the whole buffer)"] += 1
            return None
        nbytes //= group
    return Call(process, collective, nbytes, group)


def read_deepspeed(text: str, report: TraceReport, group: int | None = None) -> None:
    """DeepSpeed comms logger: the log_summary() table (the last one: its counts are cumulative) or,
    without one, the verbose per-call lines. Sizes are the logged tensor argument, printed rounded to
    two decimals in binary units; the straggler breakdown repeats the summary and is left out."""
    summary: list[tuple[str, int, int]] = []
    verbose: list[Call] = []
    mode, op = None, None
    for line in text.splitlines():
        report.entries += 1
        line = _DS_LAUNCHER_PREFIX.sub("", line)
        if "Comm. Op" in line and "Message Size" in line:
            mode, op = ("straggler" if "straggler" in line.lower() or "comm lat" in line else "summary"), None
            if mode == "summary":
                summary = []
            continue
        if "Breakdown with straggler effect" in line:
            mode = "straggler"
            continue
        match = _DS_VERBOSE.search(line)
        if match:
            call = _ds_call(report, f"rank {match['rank'] or 0}", match["name"],
                            _ds_bytes(match["size"], match["unit"]), group)
            if call:
                verbose.append(call)
            continue
        stripped = line.strip()
        if mode is None or not stripped or set(stripped) <= set("_-"):
            if stripped and mode is None:
                report.skipped["not a comms logger line"] += 1
            continue
        if line[:1].isspace():  # a row of the table
            row = _DS_ROW.match(line)
            if mode == "straggler":
                report.skipped["straggler breakdown row (repeats the summary)"] += 1
            elif row and op is not None:
                summary.append((op, _ds_bytes(row["size"], row["unit"]), int(row["count"])))
            else:
                report.unreadable += 1
            continue
        name = _DS_OP.match(line)
        if name:
            op = name["name"]
        else:  # the table has ended
            mode = None
            report.skipped["not a comms logger line"] += 1
    if summary:
        for name, nbytes, count in summary:
            call = _ds_call(report, "rank 0", name, nbytes, group)
            report.calls += [call] * count if call else []
        if verbose:
            report.skipped["verbose line (the summary table counts it)"] += len(verbose)
        report.notes.append("counts come from the last log_summary table (rank 0's cumulative counts)")
    else:
        report.calls += verbose
    report.notes.append("DeepSpeed prints sizes rounded to 2 decimals in binary units: bytes are approximate")
    if group is None:
        report.notes.append("DeepSpeed logs no group size: pass --trace-group-size to state it")


# --------------------------------------------------------------------------- PyTorch / PARAM names
def _letters(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalpha())


#: letters of a PyTorch profiler "Collective name" or a PARAM "comms" value -> collective
_TORCH_NAMES = {
    "allreduce": "allreduce", "allreducecoalesced": "allreduce",
    "allgather": "allgather", "allgatherbase": "allgather", "allgatherintotensorcoalesced": "allgather",
    "allgathercoalesced": "allgather", "allgatherintotensor": "allgather",
    "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensorcoalesced": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "broadcast": "broadcast", "broadcastoop": "broadcast", "reduce": "reduce", "reduceoop": "reduce",
    "alltoall": "alltoall", "alltoallv": "alltoall", "alltoallbase": "alltoall",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "recvanysource": "recv",
}
_TORCH_NO_DATA = {"wait", "barrier", "init", "coalesced", "batchisendirecv", ""}


def _torch_call(report: TraceReport, process: str, name: str, in_elems, dtype, group) -> Call | None:
    """A PyTorch/PARAM collective with its input element count: the message size as microbench defines it."""
    collective = _classify(report, name, _letters(str(name)), _TORCH_NAMES, _TORCH_NO_DATA)
    if collective is None:
        return None
    size = TYPE_BYTES.get(str(dtype).lower())
    if size is None or not isinstance(in_elems, int) or isinstance(in_elems, bool) or in_elems < 0:
        report.unreadable += 1
        return None
    group = group if isinstance(group, int) and group > 0 else None
    nbytes = in_elems * size
    if collective == "alltoall":
        if not group:
            report.unreadable += 1
            return None
        nbytes //= group
    return Call(process, collective, nbytes, group)


def read_kineto(doc, report: TraceReport) -> None:
    """PyTorch profiler (Kineto) JSON: events whose args carry "Collective name", "In msg nelems",
    "dtype" and "Group size". The CPU-side record_param_comms events are used; the GPU kernels carry
    the same arguments and are used only when a trace has no CPU-side ones."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise UsageError(f"{report.path}: no traceEvents list in this profiler trace")
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    process = f"rank {rank}" if rank is not None else "trace"
    cpu, gpu = [], []
    for event in events:
        report.entries += 1
        args = event.get("args") if isinstance(event, dict) else None
        if not isinstance(args, dict) or "Collective name" not in args:
            report.skipped["not a collective event"] += 1
            continue
        (cpu if event.get("cat") != "kernel" else gpu).append(args)
    chosen = cpu or gpu
    if cpu and gpu:
        report.skipped["GPU kernel event (its CPU-side record_param_comms is counted)"] += len(gpu)
    for args in chosen:
        call = _torch_call(report, process, args.get("Collective name"), args.get("In msg nelems"),
                           args.get("dtype"), args.get("Group size"))
        if call:
            report.calls.append(call)
    report.notes.append("sizes from \"In msg nelems\" x dtype (allgather: the input; reduce_scatter: the full "
                        "input; all_to_all: the input over the group size)")


def read_param(doc, report: TraceReport) -> None:
    """PARAM's basic comms trace: a JSON list of {"comms", "in_msg_size" (elements), "dtype", "world_size",
    ...}; compute entries are left out."""
    if not isinstance(doc, list):
        raise UsageError(f"{report.path}: a PARAM basic trace is a JSON list of entries")
    for entry in doc:
        report.entries += 1
        if not isinstance(entry, dict):
            report.unreadable += 1
            continue
        if "comms" not in entry:
            if "compute" in entry:
                report.skipped["compute entry"] += 1
            else:
                report.unreadable += 1
            continue
        group = entry.get("world_size")
        if not isinstance(group, int) and isinstance(entry.get("global_ranks"), list):
            group = len(entry["global_ranks"])
        call = _torch_call(report, "trace", entry["comms"], entry.get("in_msg_size"), entry.get("dtype"), group)
        if call:
            report.calls.append(call)


# ------------------------------------------------------------------------------------ the file
def _load_text(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise UsageError(f"cannot read trace {path}: not a text or gzip-compressed text file") from exc


def detect_format(text: str, doc) -> str | None:
    """The trace format from the content, or None when it cannot be told."""
    if isinstance(doc, dict) and "traceEvents" in doc:
        return "kineto"
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        if any("comms" in e for e in doc if isinstance(e, dict)):
            return "param"
        if "ph" in doc[0]:
            return "kineto"
    if doc is None:
        if _NCCL_OP.search(text):
            return "nccl"
        if "Comm. Op" in text or "comm op:" in text:
            return "deepspeed"
    return None


def read_trace(path: str, fmt: str | None = None, group_size: int | None = None) -> TraceReport:
    """Read a trace file (format detected when not given); UsageError when it holds no collective calls."""
    text = _load_text(path)
    if not text.strip():
        raise UsageError(f"trace {path} is empty")
    doc = None
    if text.lstrip()[:1] in ("{", "["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            if fmt in ("kineto", "param"):
                raise UsageError(f"cannot read trace {path}: not valid JSON ({exc.msg} at line {exc.lineno})")
    found = detect_format(text, doc)
    fmt = fmt or found
    if fmt is None:
        raise UsageError(f"cannot tell the format of trace {path}: pass --trace-format {'|'.join(FORMATS)}")
    if fmt in ("kineto", "param") and doc is None:
        raise UsageError(f"cannot read trace {path} as {fmt}: it is not a JSON file")
    report = TraceReport(path, fmt)
    if fmt == "nccl":
        read_nccl(text, report)
    elif fmt == "deepspeed":
        read_deepspeed(text, report, group_size)
    elif fmt == "kineto":
        read_kineto(doc, report)
    else:
        read_param(doc, report)
    zero = sum(1 for c in report.calls if c.bytes == 0)
    if zero:  # an empty tensor moves nothing and has no place on a size axis
        report.skipped["zero-size call (moves no data)"] += zero
        report.calls = [c for c in report.calls if c.bytes]
    if group_size and fmt != "deepspeed":
        report.notes.append("--trace-group-size is used for DeepSpeed logs only (this format records groups)")
    if not report.calls:
        raise UsageError(f"no collective calls found in {path} read as {fmt} ({report.unreadable} unreadable "
                         f"of {report.entries} {'lines' if fmt in ('nccl', 'deepspeed') else 'entries'})")
    return report

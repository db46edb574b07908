"""PyTorch profiler (Kineto) traces: ``{"traceEvents": [...], "distributedInfo": {...}}`` or a bare event list.

Which events count (torch_calls.py says how each is sized):

- ``record_param_comms`` CPU ops with "Collective name" (PyTorch 2.1 and later): counted (an ``all_to_allv``
  with the split pattern of its "In split size"). Since Kineto
  late 2023 (PyTorch 2.2+) the NCCL kernels carry the same arguments; they are the same calls and are
  counted only in a trace without the CPU ops. "In msg size" (Kineto's name in late 2023) is read as
  "In msg nelems".
- ProcessGroup annotations ``nccl:all_reduce`` with "Input Dims" and "Input type" (recorded with
  ``record_shapes=True``; the only record in PyTorch 2.0 and earlier): counted when no event carries
  "Collective name". Their ``gpu_user_annotation`` copies on the GPU timeline are left out.
- ``symm_mem::*`` ops: counted as the collective they perform; their kernels are reported by name when no
  sized op is in the trace.

A trace is one process: its rank is distributedInfo's "rank" (written before the events, or after them by
on-demand tracing), else the process id of its CPU events.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from microbench.workload.traces.jsonread import elements, freeze, thaw, top_level_value
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally
from microbench.workload.traces.torch_calls import (
    ANNOTATION,
    SYMMETRIC_KERNEL,
    add_annotation_call,
    add_metadata_call,
    add_symmetric_call,
    split_pattern,
)


class _Tally:
    """The trace's collective events by kind, tallied by what sizes them."""

    def __init__(self, tally: TraceTally):
        self.tally = tally
        self.metadata = {"cpu": Counter(), "gpu": Counter()}  # (name, elements, dtype, group) -> events
        self.annotations: Counter = Counter()  # (op, shapes, types) -> events
        self.symmetric: Counter = Counter()  # (name, shapes, types) -> events
        self.symmetric_kernels: Counter = Counter()
        self.pid = None

    def event(self, event) -> None:
        if not isinstance(event, dict):
            self.tally.unreadable += 1
            return
        name, cat, args = event.get("name"), event.get("cat"), event.get("args")
        args = args if isinstance(args, dict) else {}
        if self.pid is None and cat == "cpu_op":
            self.pid = event.get("pid")
        if "Collective name" in args:
            elems = args.get("In msg nelems", args.get("In msg size"))
            splits = split_pattern(args.get("In split size"))  # all_to_allv: its pattern, never the list (bounded)
            key = (args["Collective name"], elems, args.get("dtype"), args.get("Group size"), splits)
            self.metadata["gpu" if cat == "kernel" else "cpu"][tuple(map(freeze, key))] += 1
        elif not isinstance(name, str) or cat in ("gpu_user_annotation", "gpu_op"):
            self.tally.skipped["not a collective event"] += 1
        elif (match := ANNOTATION.match(name)) and cat != "kernel":
            self.annotations[(match[1], freeze(args.get("Input Dims")), freeze(args.get("Input type")))] += 1
        elif name.startswith("symm_mem::") and cat != "kernel":
            self.symmetric[(name, freeze(args.get("Input Dims")), freeze(args.get("Input type")))] += 1
        elif cat == "kernel" and (match := SYMMETRIC_KERNEL.search(name)):
            self.symmetric_kernels[match[0]] += 1
        else:
            self.tally.skipped["not a collective event"] += 1

    def finish(self, rank: str, group: int | None) -> None:
        tally, cpu, gpu = self.tally, self.metadata["cpu"], self.metadata["gpu"]
        chosen = cpu or gpu
        if cpu and gpu:
            tally.skipped["GPU kernel event (its CPU-side record_param_comms is counted)"] += sum(gpu.values())
        for (name, elems, dtype, group_size, splits), n in chosen.items():
            add_metadata_call(tally, rank, name, elems, dtype, group if group_size is None else group_size, n, splits)
        if chosen and self.annotations:
            tally.skipped["ProcessGroup annotation (its record_param_comms event is counted)"] += \
                sum(self.annotations.values())
        elif self.annotations:
            for (op, shapes, types), n in self.annotations.items():
                add_annotation_call(tally, rank, op, thaw(shapes), thaw(types), group, n)
            tally.note("no event carries \"Collective name\" (NCCL traces of PyTorch 2.0, gloo traces still): calls "
                        "are the ProcessGroup annotations (nccl:*, gloo:*), sized by Input Dims x Input type; they "
                        "record no group size")
        for (name, shapes, types), n in self.symmetric.items():
            add_symmetric_call(tally, rank, name, thaw(shapes), thaw(types), group, n)
        why = "its op is counted" if self.symmetric else "no sized op in the trace: not counted"
        for name, n in self.symmetric_kernels.items():
            tally.skipped[f"symmetric-memory kernel {name} ({why})"] += n
        if chosen:
            tally.note("sizes from \"In msg nelems\" x dtype (allgather: the input; reduce_scatter: the full "
                        "input; all_to_all: the input over the group size)")


def read_kineto(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    tally.unit = "events"
    events = _Tally(tally)
    prefix = "traceEvents.item" if source.head.lstrip()[:1] == b"{" else "item"
    for event in elements(source, prefix, tally.notes):
        tally.entries += 1
        events.event(event)
    info = top_level_value(source, "distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int):
        label = f"rank {rank}"
    elif isinstance(events.pid, int):
        label = f"pid {events.pid}"
    else:
        label = f"the process of {Path(source.path).name}"
    events.finish(label, group)

"""PyTorch Execution Trace (``torch.profiler.ExecutionTraceObserver``; what PARAM's et_replay and Chakra read).

``{"schema": "1.1.1-chakra.0.0.4", "pid": P, "time": ..., "start_ts": ..., "nodes": [...], "finish_ts": ...}``
(schema "1.0.x" before the Chakra suffix). Each node is an op: ``{"id", "name", "ctrl_deps", "inputs":
{"values", "shapes", "types", "strides"}, "outputs": {...}, "attrs": [{"name", "type", "value"}, ...]}``.

Counted, as torch_calls.py sizes them:

- ``record_param_comms`` nodes whose attrs carry collective_name, dtype, in_msg_nelems, pg_size (and
  pg_name, pg_desc): PyTorch 2.4 and later (pytorch/pytorch#124674); an ``all_to_allv`` with the split pattern
  of its in_split_size;
- when no node carries them (older traces), the ProcessGroup annotation nodes ``nccl:all_reduce`` with their
  input shapes and types ("Tensor(c10::BFloat16)"), no group size;
- ``symm_mem::*`` nodes, as the collective they perform.

The c10d ops (``c10d::allreduce_``) that wrap these are the same calls and are not counted. An execution
trace is one process: its rank is named by the trace's "pid".
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from microbench.workload.traces.jsonread import elements, freeze, thaw, top_level_value
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally
from microbench.workload.traces.torch_calls import (
    ANNOTATION,
    add_annotation_call,
    add_metadata_call,
    add_symmetric_call,
    split_pattern,
)

_COMMS_ATTRS = ("collective_name", "in_msg_nelems", "dtype", "pg_size")  # and in_split_size's pattern


def _attrs(node: dict) -> dict:
    attrs = node.get("attrs")
    if not isinstance(attrs, list):
        return {}
    return {a["name"]: a.get("value") for a in attrs if isinstance(a, dict) and isinstance(a.get("name"), str)}


def _inputs(node: dict) -> tuple:
    inputs = node.get("inputs")
    inputs = inputs if isinstance(inputs, dict) else {}
    return freeze(inputs.get("shapes")), freeze(inputs.get("types"))


def read_execution_trace(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    tally.unit = "nodes"
    comms: Counter = Counter()  # (name, elements, dtype, group) -> nodes
    annotations: Counter = Counter()  # (op, shapes, types) -> nodes
    symmetric: Counter = Counter()
    for node in elements(source, "nodes.item", tally.notes):
        tally.entries += 1
        name = node.get("name") if isinstance(node, dict) else None
        if not isinstance(name, str):
            tally.unreadable += 1
            continue
        attrs = _attrs(node) if name == "record_param_comms" else {}
        if "collective_name" in attrs:
            comms[(*(freeze(attrs.get(k)) for k in _COMMS_ATTRS), split_pattern(attrs.get("in_split_size")))] += 1
        elif match := ANNOTATION.match(name):
            annotations[(match[1],) + _inputs(node)] += 1
        elif name.startswith("symm_mem::"):
            symmetric[(name,) + _inputs(node)] += 1
        else:
            tally.skipped["not a collective node"] += 1
    pid = top_level_value(source, "pid")
    rank = f"pid {pid}" if isinstance(pid, int) else f"the process of {Path(source.path).name}"
    for (name, elems, dtype, group_size, splits), n in comms.items():
        add_metadata_call(tally, rank, name, elems, dtype, group if group_size is None else group_size, n, splits)
    if comms and annotations:
        tally.skipped["ProcessGroup annotation (its record_param_comms node is counted)"] += sum(annotations.values())
    elif annotations:
        for (op, shapes, types), n in annotations.items():
            add_annotation_call(tally, rank, op, thaw(shapes), thaw(types), group, n)
        tally.note("no record_param_comms node carries collective attributes (PyTorch before 2.4): calls are the "
                    "nccl:* annotation nodes, sized by their input shapes and types; they record no group size")
    for (name, shapes, types), n in symmetric.items():
        add_symmetric_call(tally, rank, name, thaw(shapes), thaw(types), group, n)
    schema = top_level_value(source, "schema")
    tally.note(f"execution trace schema {schema!r}" if isinstance(schema, str) else "execution trace without a schema")

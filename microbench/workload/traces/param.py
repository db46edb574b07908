"""PARAM's basic comms trace (param_bench commsTraceParser "basic"): a JSON list of entries.

A comms entry: ``{"comms": "all_reduce", "in_msg_size": 1024 (elements), "out_msg_size", "dtype": "Float",
"world_size": 8 or "global_ranks": [...], "req", "pg_id", ...}``, an ``all_to_allv`` with ``"in_split": [...]``
(the elements sent to each peer: its split pattern); compute entries ``{"compute": ...}`` are left out. A basic
trace is one rank's (PARAM writes one file per rank), named here by its file name.
"""

from __future__ import annotations

from pathlib import Path

from microbench.workload.traces.jsonread import elements
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally
from microbench.workload.traces.torch_calls import add_metadata_call, split_pattern


def read_param(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    tally.unit = "entries"
    rank = f"the rank of {Path(source.path).name}"
    for entry in elements(source, "item", tally.notes):
        tally.entries += 1
        if not isinstance(entry, dict):
            tally.unreadable += 1
        elif "comms" not in entry:
            if "compute" in entry:
                tally.skipped["compute entry"] += 1
            else:
                tally.unreadable += 1
        else:
            size = entry.get("world_size")
            if not isinstance(size, int) and isinstance(entry.get("global_ranks"), list):
                size = len(entry["global_ranks"])
            size = size if isinstance(size, int) else group
            add_metadata_call(tally, rank, entry["comms"], entry.get("in_msg_size"), entry.get("dtype"), size,
                              splits=split_pattern(entry.get("in_split")))

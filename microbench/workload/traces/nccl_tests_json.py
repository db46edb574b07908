"""nccl-tests' ``-J`` JSON file (nccl-tests 2.17 and later, src/util.cu): the calls a benchmark run made.

``args`` names the program (``all_reduce_perf`` ...) and ``config`` its iterations (``iterations``, and
``warmup_iters`` before them) and devices (one per rank, with its hostname); each item of ``results`` is a size,
run out of place and in place (one of them absent, or ``null``, where the run skipped it). Every rank makes
(warmup + iterations) calls per half that ran. Sizes as microbench counts them: allgather and alltoall print the
whole buffer, microbench each rank's part (``count`` x element size). The calls of a benchmark are no training
job's, but they price and replay like one (``workload --trace``).
"""

from __future__ import annotations

import os
import re

from microbench.workload.traces.jsonread import elements, top_level_value
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

#: nccl-tests program (without _perf, _mpi) -> microbench's collective
PROGRAMS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall"}
#: nccl-tests type names -> bytes per element
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
              "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}


def looks_like(head: bytes) -> bool:
    first = head.lstrip()[:65536]
    return first.startswith(b"{") and b'"nccl_version"' in first and b'"results"' in head


def read_nccl_tests_json(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    tally.unit = "results"
    args = top_level_value(source, "args") or []
    program = re.sub(r"(_perf)?(_mpi)?$", "", os.path.basename(str(args[0]))) if args else ""
    collective = PROGRAMS.get(program)
    config = top_level_value(source, "config") or {}
    devices = config.get("devices") if isinstance(config, dict) else None
    n = len(devices) if isinstance(devices, list) and devices else group
    labels = [f"{d.get('hostname')} rank {d.get('rank', i)}" if isinstance(d, dict) else f"rank {i}"
              for i, d in enumerate(devices or [])] or ["rank 0"]
    per_half = sum(v for v in (config.get("iterations"), config.get("warmup_iters")) if isinstance(v, int)) \
        if isinstance(config, dict) else 0
    for item in elements(source, "results.item", tally.notes):
        tally.entries += 1
        if not isinstance(item, dict) or not isinstance(item.get("size"), int):
            tally.unreadable += 1
            continue
        if collective is None:
            tally.uncurved[program or "unnamed program"] += 1
            continue
        halves = sum(isinstance(item.get(k), dict) for k in ("out_of_place", "in_place"))
        size = item["size"]
        if collective in ("allgather", "alltoall"):
            count, itemsize = item.get("count"), TYPE_BYTES.get(item.get("type"))
            size = count * itemsize if isinstance(count, int) and itemsize else size // max(n or 1, 1)
        for label in labels:
            tally.add(label, collective, size, n, halves * max(per_half, 1))
    tally.note("nccl-tests -J: every rank calls the collective (warmup + iterations) times per size and half "
               "(out of place, in place); a benchmark's calls, not a training job's")

"""NCCL Inspector plugin files (JSON lines, ``<host>-pid<pid>.log``): a job's collectives, one line per operation.

Each ``coll_perf`` line is one call: ``coll``, ``coll_msg_size_bytes`` (count x element size: each rank's
buffer; its contribution for AllGather; its result for ReduceScatter, whose input, the message size as
microbench counts it, is ``n_ranks`` times that) in a group of ``header.n_ranks``. A rank is a (hostname, pid)
of the metadata, the process that drives one GPU. ``p2p_perf`` lines (sends and receives) and ``dump_stats``
lines are left out and counted. The plugin keeps operations in a ring buffer per communicator and skips those
below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8192 by default): a file covers what it kept, said in the notes.
(microbench.importers.inspector reads the same files into records, with their times.)
"""

from __future__ import annotations

import json

from microbench.workload.traces.names import NCCL_OPS, letters
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

MARK = b'"coll_perf"'


def looks_like(head: bytes) -> bool:
    first = head.lstrip()[:4096]
    return first.startswith(b'{"header"') and (MARK in first or b'"p2p_perf"' in first or b'"dump_stats"' in first)


def read_inspector(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    """Tally every collective operation of the file (``group`` unused: each line says its group)."""
    tally.unit = "lines"
    for block in source.blocks(tally.skipped):
        for line in block.splitlines():
            if not line.strip():
                continue
            tally.entries += 1
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                tally.unreadable += 1
                continue
            _count(item, tally)
    tally.note("NCCL Inspector files hold the operations the plugin kept (a ring buffer per communicator, none "
               "below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, 8192 by default)")


def _count(item, tally: TraceTally) -> None:
    header = item.get("header") if isinstance(item, dict) else None
    perf = item.get("coll_perf") if isinstance(item, dict) else None
    if not isinstance(header, dict):
        tally.unreadable += 1
        return
    if not isinstance(perf, dict):
        tally.skipped["point-to-point or dump_stats line"] += 1
        return
    meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    name, size, n = perf.get("coll"), perf.get("coll_msg_size_bytes"), header.get("n_ranks")
    if not isinstance(name, str) or not isinstance(size, int) or not isinstance(n, int) or n < 1 or size < 0:
        tally.unreadable += 1
        return
    collective = NCCL_OPS.get(letters(name))
    if collective is None:
        tally.uncurved[name] += 1
        return
    rank = f"{meta.get('hostname')}:{meta.get('pid')}"
    tally.add(rank, collective, size * (n if collective == "reduce_scatter" else 1), n)

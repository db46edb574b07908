"""NCCL profiler-plugin traces: the example plugin of NCCL 2.23+ (ext-profiler/example, plugins/profiler/example).

The plugin writes a Chrome trace, ``[`` then one event per line ending ``},`` then ``{}]``, to
``$NCCL_PROFILE_DUMP_FILE-host-tid.txt`` (2.23 to 2.26) or ``$NCCL_PROFILE_DUMP_FILE_<commHash>_<rank>.json``
(2.27+). Each collective is a ``"cat": "COLL"`` begin event (``"ph": "b"``)::

    {"name": "AllReduce", "cat": "COLL", "ph": "b", "id": 0, "pid": 4242, "tid": 1, "ts": 1.5,
     "args": {"SeqNum": 0, "CommHash": 8513, "Rank": 0, "Count": 1024, "Datatype": "ncclFloat32", ...}}

and each send or receive a ``"cat": "P2P"`` one with "Peer". 2.23 prints the name as ``ncclAllReduce`` and
the datatype as its ncclDataType_t code; 2.24+ as ``AllReduce`` and ``ncclFloat32``. Count means what it
means in the API call (see nccl_log.py). The API events that 2.28 adds (``COLL_API``, ``P2P_API``) print
their datatype and stream unquoted, which is not JSON, so the file is read line by line: each COLL or P2P
begin event is cut out by a regular expression (it holds no nested object but its args) and parsed alone.
The plugin keeps its events in fixed pools and dumps what is in them at the end, so a file covers the last
groups of a run unless the pools are sized for all of it. No group size is recorded: ReduceScatter (count
is each rank's result) needs ``--trace-group-size``. A rank is a (pid, communicator, rank in it) triple,
merged to the pid when the pid holds one rank per communicator (one GPU per process).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from microbench.workload.traces.jsonread import freeze
from microbench.workload.traces.names import NCCL_OPS, NCCL_TYPE_CODES, NCCL_TYPE_NAMES, letters
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

EVENT = re.compile(rb'\{"name": "[^"\n]*", "cat": "(?:COLL|P2P)", "ph": "b", [^{}\n]*"args": \{[^{}\n]*\}\}')
_FIELDS = ("pid", "name", "CommHash", "Rank", "Count", "Datatype")


def _element_bytes(datatype) -> int | None:
    if isinstance(datatype, int) and not isinstance(datatype, bool):
        return NCCL_TYPE_CODES.get(datatype)
    return NCCL_TYPE_NAMES.get(datatype.lower()) if isinstance(datatype, str) else None


def _tally_block(block: bytes, counts: Counter, tally: TraceTally) -> int:
    """Tally the block's begin events; returns how many lines hold one."""
    lines, last_end = 0, -1
    for match in EVENT.finditer(block):
        lines += last_end < 0 or block.find(b"\n", last_end, match.start()) >= 0
        last_end = match.end()
        try:
            event = json.loads(match[0])
        except (ValueError, RecursionError):
            tally.unreadable += 1
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        counts[tuple(freeze(args.get(k) if k[0].isupper() else event.get(k)) for k in _FIELDS)] += 1
    return lines


def _labels(counts: Counter) -> dict:
    """(pid, comm, rank) -> rank label: the pid alone when it holds one rank in each of its communicators."""
    ranks_of = defaultdict(set)
    for pid, _, comm, rank, *_ in counts:
        ranks_of[(pid, comm)].add(rank)
    several = {pid for (pid, _), ranks in ranks_of.items() if len(ranks) > 1}
    return {(pid, comm, rank): f"pid {pid}" if pid not in several else f"pid {pid} rank {rank} of comm {comm}"
            for pid, _, comm, rank, *_ in counts}


def read_nccl_profiler(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    counts: Counter = Counter()  # (pid, name, comm, rank, count, datatype) -> begin events
    found = 0
    for block in source.blocks(tally.skipped):
        tally.entries += block.count(b"\n") + (not block.endswith(b"\n"))
        found += _tally_block(block, counts, tally)
    labels = _labels(counts)
    for (pid, name, comm, rank, count, datatype), n in counts.items():
        size = _element_bytes(datatype)
        if not isinstance(name, str) or not isinstance(count, int) or size is None:
            tally.unreadable += n
            continue
        op = name[4:] if name.startswith("nccl") else name  # 2.23's example prints ncclAllReduce
        collective = NCCL_OPS.get(letters(op))
        if collective is None:
            tally.uncurved[op] += n
        elif collective == "reduce_scatter" and not group:
            tally.skipped["ReduceScatter without --trace-group-size (count is each rank's result)"] += n
        else:
            nbytes = count * size * (group if collective == "reduce_scatter" else 1)
            tally.add(labels[(pid, comm, rank)], collective, nbytes, group, n)
    tally.skipped["line without a collective or point-to-point begin event"] += tally.entries - found
    tally.note("the example profiler dumps the events still in its pools (NCCL_PROFILE_GROUP_POOL_SIZE and the "
                "like; by default the last few groups): counts cover that window, not necessarily the whole run")
    tally.note("NCCL profiler events record no group size" + (f": --trace-group-size {group} is used" if group
                                                                  else "; pass --trace-group-size to state it"))

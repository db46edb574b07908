"""NCCL Inspector plugin output: what a job's collectives achieved, operation by operation.

The plugin (NCCL's ext-profiler/inspector, 2.27; plugins/profiler/inspector, 2.28 and later) writes one JSON
object a line to ``<dump dir>/<host>-pid<pid>.log``: per completed operation on a communicator, ``header``
(``id``, the communicator's hash; ``rank`` in it; ``n_ranks``; ``nnodes``; ``comm_name`` from v4.2),
``metadata`` (format version, hostname, pid) and ``coll_perf``: ``coll`` (AllReduce ...), ``coll_sn``,
``coll_msg_size_bytes``, ``coll_exec_time_us`` (whole microseconds: the longest kernel channel's time, from GPU
clocks where ``coll_timing_source`` is kernel_gpu), ``coll_algobw_gbs``, ``coll_busbw_gbs`` and, from v4.2,
``coll_algo``/``coll_proto``. ``p2p_perf`` lines (sends and receives) and ``dump_stats`` lines (v4.1: ring-buffer
drops) have no microbench counterpart and are counted as skipped.

The message size is count x element size of the call: each rank's buffer for AllReduce, Broadcast and Reduce,
its contribution for AllGather, its result for ReduceScatter (whose input, microbench's size, is n times that).
The plugin's algbw divides (size x n for AllGather and ReduceScatter) by the time, and busbw multiplies by
nccl-tests' factor: microbench's definitions, so the imported records' bandwidths, made from the time again,
agree with the plugin's.

Operations are grouped per (collective, size, communicator size): one result each, whose latency statistics
are over the job's operations: per rank (host, pid, rank in its communicator) the mean, and avg/min/max
across ranks of those means (as microbench defines them); p10..p99, fastest and slowest of every operation.
The algorithm and protocol NCCL chose (v4.2) become the result's ``nccl_algo``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np

from microbench.errors import UsageError, printable
from microbench.importers.parsed import Row, ToolRun

COLLECTIVES = {"AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reduce_scatter",
               "Broadcast": "broadcast", "Reduce": "reduce"}
DEFINITIONS = {
    "avg/min/max": "across ranks (host, pid, rank in the communicator) of each rank's mean of the plugin's "
                   "coll_exec_time_us over the job's operations of that collective, size and group",
    "p10/p50/p90/p99, fastest/slowest": "over every operation of every rank (nearest rank)",
    "coll_exec_time_us": "the plugin's time: the longest kernel channel of the operation, whole microseconds",
}
SOURCE = "NCCL Inspector plugin (coll_algo, coll_proto)"


def looks_like(head: str) -> bool:
    """Whether a file's first line is an Inspector record."""
    first = head.lstrip()[:2000]
    return first.startswith("{") and '"header"' in first and any(
        k in first for k in ('"coll_perf"', '"p2p_perf"', '"dump_stats"'))


def _percentile(sorted_values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile."""
    index = max(int(np.ceil(q / 100 * len(sorted_values))) - 1, 0)
    return float(sorted_values[index])


def parse(texts: list[tuple[str, str]], ranks: int | None = None) -> ToolRun:
    """One job's Inspector files (``(path, text)`` each) as one tool run."""
    ops: dict = defaultdict(lambda: defaultdict(list))  # (coll, size, n) -> rank -> times (us)
    algos: dict = defaultdict(Counter)  # (coll, size, n) -> (algo, proto) -> operations
    first_line: dict = {}
    skipped: Counter = Counter()
    hosts: dict[str, None] = {}
    versions: set[str] = set()
    groups: dict[int, set] = defaultdict(set)
    for path, text in texts:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise UsageError(f"{printable(path)}:{number}: not an Inspector record (not JSON)") from None
            if not isinstance(item, dict) or not isinstance(item.get("header"), dict):
                raise UsageError(f"{printable(path)}:{number}: not an Inspector record (no header)")
            _op(item, f"{path}:{number}", ops, algos, first_line, skipped, hosts, versions, groups)
    run = ToolRun(tool="nccl-inspector", tool_version=", ".join(sorted(versions)) or None, file=texts[0][0],
                  first_line=1, backend="nccl", definitions=dict(DEFINITIONS))
    if not ops:
        raise UsageError(f"{printable(texts[0][0])}: no collective operation with a microbench counterpart "
                         f"({', '.join(f'{n} {why}' for why, n in sorted(skipped.items())) or 'no coll_perf line'})")
    run.ranks = ranks or max(n for _, _, n in ops)
    run.hosts_by_rank = list(hosts)
    run.device = {"kind": "cuda"}
    run.skipped = [f"{n} {why}" for why, n in sorted(skipped.items())]
    run.assumed.append("each (host, pid, rank in a communicator) is one rank; operations the plugin dropped from "
                       "its ring buffer, or below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8192 by default), are absent")
    run.extra_source = {"values": {"files": [p for p, _ in texts],
                                   "communicators_by_size": {str(n): len(ids) for n, ids in sorted(groups.items())}}}
    for key in sorted(ops):
        run.add(_row(key, ops[key], algos[key], first_line[key]))
    run.time_from = None
    return run


def _op(item: dict, where: str, ops, algos, first_line, skipped, hosts, versions, groups) -> None:
    header, meta = item["header"], item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    perf = item.get("coll_perf")
    if not isinstance(perf, dict):
        skipped["point-to-point or dump_stats lines (no microbench counterpart per operation)"] += 1
        return
    name, size, time_us, n = perf.get("coll"), perf.get("coll_msg_size_bytes"), perf.get("coll_exec_time_us"), \
        header.get("n_ranks")
    collective = COLLECTIVES.get(name) if isinstance(name, str) else None
    if collective is None:
        skipped[f"operations of {name} (no microbench counterpart)"] += 1
        return
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (size, time_us, n)) or n < 1:
        raise UsageError(f"{where}: coll_msg_size_bytes, coll_exec_time_us and n_ranks must be numbers")
    if size <= 0 or time_us <= 0:
        skipped["operations of 0 B or 0 us (the plugin's whole microseconds)"] += 1
        return
    size_bytes = int(size) * (int(n) if collective == "reduce_scatter" else 1)
    key = (collective, size_bytes, int(n))
    rank = (meta.get("hostname"), meta.get("pid"), header.get("id"), header.get("rank"))
    ops[key][rank].append(float(time_us))
    first_line.setdefault(key, int(where.rsplit(":", 1)[1]))
    hosts[str(meta.get("hostname"))] = None
    groups[int(n)].add(header.get("id"))
    if isinstance(meta.get("inspector_output_format_version"), str):
        versions.add(meta["inspector_output_format_version"])
    if isinstance(perf.get("coll_algo"), str) and perf["coll_algo"].lower() != "unknown":
        algos[key][(perf["coll_algo"].upper(), str(perf.get("coll_proto") or "").upper() or None)] += 1


def _row(key: tuple, by_rank: dict, algos: Counter, line: int) -> Row:
    collective, size_bytes, n = key
    means = np.array([np.mean(v) for v in by_rank.values()])
    every = np.sort(np.concatenate([np.asarray(v) for v in by_rank.values()]))
    latency = {"avg": float(means.mean()), "min": float(means.min()), "max": float(means.max()),
               "p10": _percentile(every, 10), "p50": _percentile(every, 50), "p90": _percentile(every, 90),
               "p99": _percentile(every, 99), "fastest": float(every[0]), "slowest": float(every[-1]),
               "samples": int(every.size), "timing_ranks": len(by_rank), "over": "the job's operations"}
    row = Row(benchmark=collective, size_bytes=size_bytes, latency_us=latency, line=line,
              values={"operations": int(every.size), "ranks_seen": len(by_rank)},
              derived={k: DEFINITIONS["avg/min/max"] if k in ("avg", "min", "max") else
                       DEFINITIONS["p10/p50/p90/p99, fastest/slowest"] for k in latency
                       if k not in ("samples", "timing_ranks", "over")},
              iterations=int(every.size // max(len(by_rank), 1)), ranks=n)
    if algos:
        (algo, proto), calls = algos.most_common(1)[0]
        others = {f"{a}/{p}": c for (a, p), c in algos.most_common()[1:]}
        row.fields["nccl_algo"] = {"algorithm": algo, "protocol": proto, "calls": calls,
                                   **({"others": others} if others else {}), "source": SOURCE}
    return row

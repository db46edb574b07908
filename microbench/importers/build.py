"""Records from another tool's run: the run, result and end records microbench writes, with their source.

Fields mirror ``microbench run``'s records (microbench/session.py); a field the tool's output does
not tell is null and listed under ``source.unknown`` (never a guessed value). Every record says where
it came from: the run record's ``source`` names the tool, its version, the file (path and SHA-256),
the line its run starts at, the assumptions made and how the tool defines its statistics; each
result's ``source`` gives its line, the tool's printed figures and the fields derived from them.

Bandwidths follow microbench's definitions (microbench.collectives): algbw = S / avg latency with S
= ``algbw_bytes``, busbw = algbw x ``busbw_factor`` (nccl-tests' factors); both need the rank count.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import microbench
from microbench.collectives import COLLECTIVES
from microbench.importers.model import Row, ToolRun
from microbench.records import SCHEMA_VERSION
from microbench.stats import bandwidth_gbps

#: run-record fields a tool's output may leave unknown
RUN_FIELDS = ("time_utc", "command", "ranks", "hosts", "ranks_per_host", "launcher", "slurm", "mpi", "conditions")
#: result fields microbench always knows and another tool's output may not
RESULT_FIELDS = ("send_bytes", "recv_bytes", "ranks", "dtype", "iterations", "warmup", "algbw_gbps", "busbw_gbps",
                 "algbw_bytes", "busbw_factor", "first_call_us", "loop", "call_path", "timer", "buffer", "cache",
                 "cache_bytes", "pool_bytes", "pool_slots", "cache_evicts", "flush", "sync", "huge_pages",
                 "huge_page_bytes", "wall_s")


def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_id_for(run: ToolRun, digest: str) -> str:
    """Stable id: the same file imported twice gives the same runs (readers count each run once)."""
    return hashlib.sha256(f"{run.tool}:{digest}:{run.first_line}".encode()).hexdigest()[:12]


def imported_records(run: ToolRun, digest: str) -> list[dict]:
    """The run record, one result record per row, and the end record."""
    run_id = run_id_for(run, digest)
    results = [result_record(run, row, run_id) for row in run.rows]
    return [run_record(run, run_id, digest), *results, end_record(run, run_id, len(results))]


def run_record(run: ToolRun, run_id: str, digest: str) -> dict:
    hosts = run.hosts_by_rank
    per_host = {h: hosts.count(h) for h in dict.fromkeys(hosts)} if hosts else None
    meta = {
        "type": "run", "schema": SCHEMA_VERSION, "run_id": run_id, "microbench_version": microbench.__version__,
        "time_utc": run.time_utc, "command": run.command, "backend": run.backend, "ranks": run.ranks,
        "hosts": list(per_host) if per_host else None, "ranks_per_host": per_host, "launcher": None, "slurm": None,
        "mpi": None, "torch": None,
        "device": {"kind": run.device.get("kind"), "buffer": None, "index": None, "name": run.device.get("name"),
                   "count": run.device.get("count"), "l2_bytes": None, "staged_through_host": None},
        "versions": {run.tool: run.tool_version, **run.versions}, "version_mismatch": [], "conditions": None,
        "options": dict(run.options),
    }
    meta["source"] = {
        "tool": run.tool, "version": run.tool_version, "file": str(Path(run.file).resolve()), "sha256": digest,
        "line": run.first_line, "time_from": run.time_from, "start_time_local": run.start_time_local,
        "assumed": list(run.assumed), "definitions": dict(run.definitions), "skipped": list(run.skipped),
        "unknown": [k for k in RUN_FIELDS if meta[k] is None], **run.extra_source,
    }
    return meta


def result_record(run: ToolRun, row: Row, run_id: str) -> dict:
    coll = COLLECTIVES[row.benchmark]
    n = run.ranks
    send, recv = row.send_bytes, row.recv_bytes
    if n and send is None:
        send, recv = (coll.io_counts or coll.buffer_counts)(row.size_bytes, n)
    s_bytes = coll.algbw_bytes(row.size_bytes, n) if n else None
    factor = coll.busbw_factor(n) if n else None
    avg = row.latency_us.get("avg")
    algbw = bandwidth_gbps(s_bytes, avg) if s_bytes is not None and avg else None
    result = {
        "type": "result", "run_id": run_id, "benchmark": row.benchmark, "backend": run.backend,
        "size_bytes": row.size_bytes, "send_bytes": send, "recv_bytes": recv, "ranks": n, "dtype": row.dtype,
        "op": row.op if coll.reduces else None, "in_place": row.in_place if coll.in_place_ok else None,
        "iterations": row.iterations, "warmup": row.warmup, "latency_us": dict(row.latency_us),
        "algbw_gbps": algbw, "busbw_gbps": algbw * factor if algbw is not None else None,
        "algbw_bytes": s_bytes, "busbw_factor": factor, "check": row.check, "first_call_us": None,
        "loop": None, "call_path": None, "timer": None, "device": run.device.get("kind"), "buffer": None,
        "cache": None, "cache_bytes": None, "pool_bytes": None, "pool_slots": None, "cache_evicts": None,
        "flush": None, "sync": None, "huge_pages": None, "huge_page_bytes": None, "time_utc": run.time_utc,
        "wall_s": None,
    }
    if coll.rooted:
        result["root"] = row.root
    if coll.point_to_point:
        result["pairs"] = n // 2 if n else None
        result["window"] = row.window if coll.name != "latency" else None
    unknown = [k for k in RESULT_FIELDS if result[k] is None]
    if coll.rooted and row.root is None:
        unknown.append("root")
    if coll.reduces and row.op is None:
        unknown.append("op")
    if coll.in_place_ok and row.in_place is None:
        unknown.append("in_place")
    result["source"] = {"tool": run.tool, "line": row.line, "values": dict(row.values),
                        "derived": dict(row.derived), "unknown": unknown}
    return result


def end_record(run: ToolRun, run_id: str, count: int) -> dict:
    return {"type": "end", "run_id": run_id, "status": "complete" if run.complete else "incomplete",
            "reason": run.end_reason, "time_utc": None, "results": count}

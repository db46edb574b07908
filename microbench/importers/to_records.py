"""Records from another tool's run: the run, result and end records microbench writes, with their source.

The records are the record model's types (``records.model``), filled through ``relations.make`` as
``microbench run``'s builders fill them, so an imported record is checked as every record is (types, ranges, the
relations between its figures) before anything is written. Fields mirror ``microbench run``'s records where
the tool's output tells them.
What it does not tell is never guessed: a measurement field (dtype, op, iterations ...) is null, a
field that has no null form (the run's time, hosts) is left out, and either way it is named in
``source.unknown``. The fields of microbench's own timed loop (loop, call_path, timer, cache, pool,
huge pages, first call, wall time) do not apply to another tool and are left out. Every record says
where it came from: the run record's ``source`` names the tool, its version, the file (path and
SHA-256), the line its run starts at, the assumptions made, rows skipped and how the tool defines
its statistics; each result's ``source`` gives its line, the tool's printed figures and the fields
derived from them.

Bandwidths follow microbench's definitions (microbench.benchmarks.table): algbw = S / avg latency with S
= ``algbw_bytes``, busbw = algbw x ``busbw_factor`` (nccl-tests' factors); null where the tool gives
no mean latency.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import microbench
from microbench.benchmarks.table import COLLECTIVES
from microbench.importers.parsed import Row, ToolRun
from microbench.measure.stats import bandwidth_gbps
from microbench.records import model, relations
from microbench.records.model import SCHEMA_VERSION

#: run-record fields a tool's output may not tell (left out when unknown)
RUN_OPTIONAL = ("time_utc", "command", "hosts", "ranks_per_host")
#: result fields that are null when the tool's output does not tell them
RESULT_NULLABLE = ("send_bytes", "recv_bytes", "dtype", "iterations", "warmup", "algbw_gbps", "busbw_gbps",
                   "algbw_bytes", "busbw_factor")


def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_id_for(run: ToolRun, digest: str) -> str:
    """Stable id: the same file imported twice gives the same runs (readers count each run once)."""
    return hashlib.sha256(f"{run.tool}:{digest}:{run.first_line}".encode()).hexdigest()[:12]


def imported_records(run: ToolRun, digest: str) -> list[dict]:
    """The run record, one result record per row, and the end record; ``model.ModelError`` names a record that
    breaks the model (the caller names the file and line)."""
    run_id = run_id_for(run, digest)
    results = [imported_result(run, row, run_id) for row in run.rows]
    return [imported_run(run, run_id, digest), *results, imported_end(run, run_id, len(results))]


def imported_run(run: ToolRun, run_id: str, digest: str) -> dict:
    hosts = run.hosts_by_rank
    per_host = {h: hosts.count(h) for h in dict.fromkeys(hosts)} if hosts else None
    known = {"time_utc": run.time_utc, "command": run.command, "hosts": list(per_host) if per_host else None,
             "ranks_per_host": per_host}
    device = {k: run.device.get(k) for k in ("kind", "name", "count") if run.device.get(k) is not None}
    meta = {
        "schema": SCHEMA_VERSION, "run_id": run_id, "microbench_version": microbench.__version__,
        **{k: v for k, v in known.items() if v is not None}, "backend": run.backend, "ranks": run.ranks,
        "launcher": None, "slurm": None, "mpi": None, "torch": None, "device": device,
        "versions": {k: v for k, v in {run.tool: run.tool_version, **run.versions}.items() if v},
        "version_mismatch": [], "options": dict(run.options),
    }
    meta["source"] = {
        "tool": run.tool, "version": run.tool_version, "file": str(Path(run.file).resolve()), "sha256": digest,
        "line": run.first_line, "time_from": run.time_from, "start_time_local": run.start_time_local,
        "assumed": list(run.assumed), "definitions": dict(run.definitions), "skipped": list(run.skipped),
        "unknown": [k for k, v in known.items() if v is None] + ["launcher", "slurm", "mpi", "conditions"],
        **run.extra_source,
    }
    return relations.make(model.RunRecord, **meta)


def imported_result(run: ToolRun, row: Row, run_id: str) -> dict:
    coll = COLLECTIVES[row.benchmark]
    n = row.ranks or run.ranks
    send, recv = row.send_bytes, row.recv_bytes
    if send is None:
        send, recv = (coll.io_counts or coll.buffer_counts)(row.size_bytes, n)
    s_bytes, factor = coll.algbw_bytes(row.size_bytes, n), coll.busbw_factor(n)
    avg = row.latency_us.get("avg")
    algbw = bandwidth_gbps(s_bytes, avg) if avg else None
    result = {
        "run_id": run_id, "benchmark": row.benchmark, "backend": run.backend,
        "size_bytes": row.size_bytes, "send_bytes": send, "recv_bytes": recv, "ranks": n, "dtype": row.dtype,
        "op": row.op if coll.reduces else None, "in_place": row.in_place if coll.in_place_ok else None,
        "iterations": row.iterations, "warmup": row.warmup, "latency_us": dict(row.latency_us),
        "algbw_gbps": algbw, "busbw_gbps": algbw * factor if algbw is not None else None,
        "algbw_bytes": s_bytes, "busbw_factor": factor, "check": row.check, "device": run.device.get("kind"),
    }
    if run.time_utc:
        result["time_utc"] = run.time_utc
    unknown = [k for k in RESULT_NULLABLE if result[k] is None]
    for name, applies, value in (("op", coll.reduces, row.op), ("in_place", coll.in_place_ok, row.in_place),
                                 ("root", coll.rooted, row.root),
                                 ("window", coll.point_to_point and coll.name != "latency", row.window)):
        if applies and value is None:
            unknown.append(name)
    if coll.rooted and row.root is not None:
        result["root"] = row.root
    if coll.point_to_point:
        result["pairs"] = n // 2
        result["window"] = row.window if coll.name != "latency" else None
    result["source"] = {"tool": run.tool, "line": row.line, "values": dict(row.values),
                        "derived": dict(row.derived), "unknown": unknown}
    result.update(row.fields)
    return relations.make(model.ResultRecord, **result)


def imported_end(run: ToolRun, run_id: str, count: int) -> dict:
    """The end record (no time: the import's clock is not the run's)."""
    return relations.make(model.EndRecord, run_id=run_id, status="complete" if run.complete else "incomplete",
                      reason=run.end_reason, results=count)

"""Every record a run writes is built here: run, result, pairs result, samples and end records, and the
diagnostics' cycle, soak and bisect records.

Field by field they are declared in ``records.model`` (the schema, ``schema.json``, is printed from it; docs/records.md
describes them); every builder's record passes ``relations.make`` (types, ranges, the relations between figures)
before anything writes it. Builders take what the run path computed and lay it out (the run record also collects the system facts of
``microbench.cluster.facts``); of the figures they compute only the bandwidths, so a figure in a record has one
place where its definition can be read.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

import microbench
from microbench.cluster import async_progress, facts, launch
from microbench.measure import stats
from microbench.records import model, relations
from microbench.records.model import SCHEMA_VERSION

if TYPE_CHECKING:  # pragma: no cover
    from microbench.benchmarks.dtypes import DType
    from microbench.benchmarks.table import Collective
    from microbench.cluster.world import Layout
    from microbench.measure.cache import PoolPlan
    from microbench.measure.loops import TimedLoop
    from microbench.measure.transport import Transport
    from microbench.options import RunOptions, SizePlan



@dataclass(frozen=True)
class LoopFacts:
    """What the records say about the loop that timed a size, read right after its timed iterations."""

    kind: str
    call_path: str
    timer: str
    graph: dict | None  #: CUDA graphs: iterations per replay, replays timed, graphs captured
    launch: dict | None  #: eager CUDA events: host launch and device time per call, and whether launch-bound

    @classmethod
    def of(cls, loop: TimedLoop) -> "LoopFacts":
        graph, launch = loop.graph, loop.launch
        return cls(loop.kind, loop.call_path, loop.last_timer,
                   {"iterations_per_replay": graph.iterations_per_replay, "replays": graph.replays,
                    "graphs": graph.graphs} if graph else None,
                   _launch_block(launch) if launch else None)


def _launch_block(launch) -> dict:
    """A result's ``launch``: host and device time per call, whether launch-bound, and the paired loop's gate."""
    block = {"host_us_per_call": launch.host_us_per_call, "device_us_per_call": launch.device_us_per_call,
             "bound": launch.bound}
    if launch.gate_us is not None:
        block.update(gate_us=launch.gate_us, ungated=launch.ungated)
    if launch.samples is not None:
        block["samples"] = launch.samples
    return block


@dataclass(frozen=True)
class Figures:
    """One cache pass of one size, summarised across ranks (on rank 0)."""

    latency_us: dict
    first_call_us: dict | None
    check: str | None  #: "pass", "fail", or None when unchecked
    iterations: int
    warmup: int
    huge_page_bytes: int
    wall_s: float
    budget_estimate_s: float | None = None  #: --time-budget: the per-iteration time the count came from
    stragglers: dict | None = None  #: microbench.run.diagnostics.stragglers: slowest/fastest rank, skew, node means
    check_failures: list | None = None  #: the nodes whose received data was wrong (checked runs)
    overlap: dict | None = None  #: non-blocking benchmarks: overlap_stats.summarize


def run_record(run_id: str, argv: list[str], opts: RunOptions, nranks: int, layout: Layout,
               transport: Transport, links: dict | None = None, path_peak: dict | None = None,
               machine: list[dict] | None = None) -> dict:
    """The first line of a run: what ran where, on which libraries, under which conditions and options; each
    host's links and the peak of the path its data crossed (``microbench.run.peaks``); ``machine``: each host's
    state at the start (``run.machine_state``)."""
    device = transport.device
    return _make(model.RunRecord, {
        **({"links": links, "path_peak": path_peak} if links is not None else {}),
        "schema": SCHEMA_VERSION,
        "run_id": run_id,
        "microbench_version": microbench.__version__,
        "time_utc": facts.utc_now(),
        "command": shlex.join(["microbench", *argv]),
        "backend": opts.backend,
        "ranks": nranks,
        "hosts": list(layout.ranks_per_host),
        "ranks_per_host": layout.ranks_per_host,
        "launcher": launch.discover().launcher,
        "slurm": facts.slurm_metadata(),
        "mpi": {**transport.lib.as_record(), "thread_level": transport.thread_level} if transport.lib else None,
        "torch": transport.torch_meta,
        "device": {"kind": device.runtime or device.kind, "buffer": opts.buffer, "index": device.index,
                   "name": device.name, "count": device.count, "l2_bytes": device.l2_bytes,
                   "staged_through_host": transport.staged, "uuid": device.uuid, "bus_id": device.bus_id,
                   "selected_before_mpi_init": device.selected_before_mpi_init,
                   **({"ranks": transport.gpus} if transport.gpus else {})},
        "versions": facts.versions(),
        "version_mismatch": layout.version_mismatch,
        "conditions": {
            "huge_pages": opts.huge_pages,
            "thp": facts.thp_mode(),
            "page_size": facts.page_size(),
            "timer": transport.loop.describe_timer(),
            "cpu": facts.cpu_model(),
            "cpus_per_rank": launch.cpu_count(),
            "percentile_rel_error": round(stats.PERCENTILE_REL_ERROR, 5),
            "cache_bytes": transport.cache_bytes,
            "cache_bytes_from": transport.cache_bytes_from(opts),
            "env": facts.relevant_env(),
            "progress": async_progress.describe(opts.backend, (transport.torch_meta or {}).get("backend"),
                                                transport.thread_level,
                                                mpi_abi=transport.lib.abi if transport.lib else None),
        },
        "options": asdict(opts),
        **({"machine": machine} if machine else {}),
        "per_launch": {"env": facts.per_launch_env()},
    })


def result_record(*, run_id: str, coll: Collective, plan: SizePlan, requested: int, dtype: DType, in_place: bool,
                  opts: RunOptions, nranks: int, transport: Transport, layout: Layout, cache: str,
                  pool: PoolPlan | None, loop: LoopFacts, figures: Figures, cycle: dict | None = None,
                  judged: Callable[[dict], dict] | None = None) -> dict:
    """One measured (benchmark, size, cache pass): latency statistics, bandwidths and the conditions;
    ``judged(record)`` adds the busbw's share of the path's peak and NCCL's algorithm (``run.peaks``)."""
    factor = coll.busbw_factor(nranks)
    s_bytes = coll.algbw_bytes(plan.size_bytes, nranks)
    algbw = stats.bandwidth_gbps(s_bytes, figures.latency_us["avg"])
    item = dtype.itemsize
    record: dict[str, Any] = {
        "type": "result", "run_id": run_id, "benchmark": coll.name, "backend": opts.backend,
        "size_bytes": plan.size_bytes, "send_bytes": plan.io_send_bytes, "recv_bytes": plan.io_recv_bytes,
        "ranks": nranks, "dtype": dtype.name, "op": opts.op if coll.reduces else None,
        "in_place": in_place if coll.in_place_ok else None,
        "iterations": figures.iterations, "warmup": figures.warmup, "latency_us": figures.latency_us,
        "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "algbw_bytes": s_bytes, "busbw_factor": factor,
        "check": figures.check, "first_call_us": figures.first_call_us,
        "loop": loop.kind, "call_path": loop.call_path, "timer": loop.timer,
        "device": transport.device.runtime or transport.device.kind, "buffer": opts.buffer, "cache": cache,
        "cache_bytes": transport.cache_bytes,
        "pool_bytes": pool.pool_bytes if pool else plan.send_count * item + plan.recv_count * item,
        "pool_slots": pool.slots if pool else 1,
        "cache_evicts": pool.evicts if pool else None,
        "flush": opts.flush, "sync": opts.sync, "huge_pages": opts.huge_pages,
        "huge_page_bytes": figures.huge_page_bytes,
        "time_utc": facts.utc_now(), "wall_s": figures.wall_s,
    }
    if plan.size_bytes != requested:
        record["requested_bytes"] = requested
    if opts.time_budget is not None:
        record["time_budget"] = {"seconds": opts.time_budget, "per_iteration_s": figures.budget_estimate_s}
    mpi_call = transport.call_name(coll.primitive)
    if mpi_call:
        record["mpi_call"] = mpi_call
    record.update(_diagnostic_fields(figures, cycle))
    if transport.torch_meta:
        record["torch_backend"] = transport.torch_meta["backend"]
    if transport.staged:
        record["staged"] = True
    if loop.graph:
        record["cuda_graph"] = loop.graph
    if loop.launch:
        record["launch"] = loop.launch
    if figures.overlap:
        record["overlap"] = figures.overlap
    if coll.rooted:
        record["root"] = opts.root
    if coll.point_to_point:
        record["pairs"] = nranks // 2
        record["window"] = opts.window if coll.windowed else None
        record["pairs_inter_node"] = layout.pairs_inter_node(nranks)
    if judged is not None:
        record.update(judged(record))
    return _make(model.ResultRecord, record)


def pairs_record(*, run_id: str, metric: str, plan: SizePlan, dtype: DType, opts: RunOptions, nranks: int,
                 iterations: int, warmup: int, loop: LoopFacts, check: str | None, latency_us: dict,
                 matrix_fields: dict, wall_s: float, cycle: dict | None = None) -> dict:
    """The pairwise link test's result for one metric: its matrix, outliers and their rules
    (``matrix_fields``, from microbench.run.diagnostics.pairs), with the same core fields as any result."""
    algbw = stats.bandwidth_gbps(plan.size_bytes, latency_us["avg"])
    return _make(model.ResultRecord, {
        "run_id": run_id, "benchmark": "pairs", "metric": metric,
        "backend": opts.backend, "size_bytes": plan.size_bytes, "send_bytes": plan.io_send_bytes,
        "recv_bytes": plan.io_recv_bytes, "ranks": nranks, "dtype": dtype.name, "op": None,
        "in_place": None, "iterations": iterations, "warmup": warmup, "latency_us": latency_us,
        "algbw_gbps": algbw, "busbw_gbps": algbw, "algbw_bytes": plan.size_bytes, "busbw_factor": 1.0,
        "check": check, "first_call_us": None, "loop": loop.kind, "call_path": loop.call_path,
        "cache": "warm", "sync": "none", "window": opts.window if metric == "bandwidth" else None,
        **matrix_fields,
        "time_utc": facts.utc_now(), "wall_s": wall_s, **cycle_fields(cycle),
    })


def samples_record(run_id: str, benchmark: str, size_bytes: int, cache: str, rank: int,
                   latency_us: list[float]) -> dict:
    """One rank's raw per-iteration latencies (us) at one size and cache pass (``--samples``)."""
    return _make(model.SamplesRecord, {"run_id": run_id, "benchmark": benchmark, "size_bytes": size_bytes,
                                       "cache": cache, "rank": rank, "latency_us": latency_us})


def end_record(run_id: str, status: str, reason: str, results: int, machine: list[dict] | None = None) -> dict:
    """The last line of a run: complete, incomplete (a signal) or failed (an error, a timeout); ``machine``: each
    host's state over the run (``run.machine_state``)."""
    return _make(model.EndRecord, {"run_id": run_id, "status": status, "reason": reason,
                                   "time_utc": facts.utc_now(), "results": results,
                                   **({"machine": machine} if machine else {})})


# ------------------------------------------------------------------------------ diagnostics (docs/diagnostics.md)
def cycle_fields(cycle: dict | None) -> dict:
    """What a record of a soak cycle carries: its number (from 1) and when the cycle started."""
    return {"cycle": cycle["number"], "cycle_started_utc": cycle["started_utc"]} if cycle else {}


def _diagnostic_fields(figures: Figures, cycle: dict | None) -> dict:
    out = cycle_fields(cycle)
    if figures.stragglers is not None:
        out["stragglers"] = figures.stragglers
    if figures.check_failures is not None:
        out["check_failures"] = figures.check_failures
    return out


def cycle_record(run_id: str, cycle: dict, ended_utc: str, wall_s: float, checked: bool, results: list[dict]) -> dict:
    """The end of one soak cycle: its span, how many results it wrote, and which of them failed their check."""
    return _make(model.CycleRecord, {"run_id": run_id, "cycle": cycle["number"], "started_utc": cycle["started_utc"],
            "ended_utc": ended_utc, "wall_s": wall_s, "checked": checked, "results": len(results),
            "check_failed": [{"benchmark": r["benchmark"], "metric": r.get("metric"), "size_bytes": r["size_bytes"],
                              "cache": r.get("cache"), "at": [f["label"] for f in r.get("check_failures") or ()]}
                             for r in results if r.get("check") == "fail"]})


def soak_record(run_id: str, cycles: list[int], configurations: list[dict]) -> dict:
    """A soak run's summary over its finished cycles (microbench.run.diagnostics.soak.summarize makes ``configurations``)."""
    return _make(model.SoakRecord, {"run_id": run_id, "time_utc": facts.utc_now(), "cycles": cycles,
                                    "configurations": configurations})


def bisect_record(*, run_id: str, benchmark: str, size_bytes: int, dtype: str, iterations: int, warmup: int,
                  loop: LoopFacts | None, search: dict, wall_s: float, cycle: dict | None = None) -> dict:
    """The bisection's path and suspects (``search``, from microbench.run.diagnostics.bisection), with what each round measured."""
    return _make(model.BisectRecord, {"run_id": run_id, "benchmark": benchmark, "size_bytes": size_bytes,
            "dtype": dtype, "iterations": iterations, "warmup": warmup,
            "loop": loop.kind if loop else None, "call_path": loop.call_path if loop else None,
            **search, "time_utc": facts.utc_now(), "wall_s": wall_s, **cycle_fields(cycle)})


# ------------------------------------------------------------------------------ replay (docs/replay.md)
def replay_record(*, run_id: str, argv: list[str], backend: str, layout: Layout, mpi: dict | None,
                  summary: dict) -> dict:
    """One replay (microbench replay --out): where it ran and under which conditions, then its summary (the
    workload, measured figures, prediction and comparison, as ``replay/summary.py`` and ``replay/driver.py``
    build them)."""
    return _make(model.ReplayRecord, {
        "schema": SCHEMA_VERSION, "run_id": run_id, "microbench_version": microbench.__version__,
        "time_utc": facts.utc_now(), "command": shlex.join(["microbench", *argv]), "backend": backend,
        "ranks": len(layout.hosts_by_rank), "hosts": list(layout.ranks_per_host),
        "ranks_per_host": layout.ranks_per_host, "launcher": launch.discover().launcher,
        "slurm": facts.slurm_metadata(), "mpi": mpi, "versions": facts.versions(),
        "version_mismatch": layout.version_mismatch,
        "conditions": {"thp": facts.thp_mode(), "page_size": facts.page_size(), "cpu": facts.cpu_model(),
                       "cpus_per_rank": launch.cpu_count(), "env": facts.relevant_env()},
        "per_launch": {"env": facts.per_launch_env()},
        **summary,
    })


def _make(kind: type[model.Record], fields: dict) -> dict:
    """``relations.make`` of a builder's dictionary (its ``type`` is the kind's)."""
    return relations.make(kind, **{k: v for k, v in fields.items() if k != "type"})

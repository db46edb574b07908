"""The size sweep of one benchmark: for each size and cache pass, buffers -> engine.measure -> summary -> record.

As nccl-tests' driver: plan the sizes (each rounded down to whole elements, and to n blocks for
reduce_scatter; sizes that round onto one already measured are measured once), then per size and cache
mode build the buffers and calls, run the engine, summarize across ranks, and hand rank 0's record to the
one writer before the next size starts.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from microbench.benchmarks.dtypes import DType
from microbench.benchmarks.table import POISON, Collective, Context, pair_of, participates
from microbench.cluster import agree
from microbench.measure import engine, overlap, overlap_stats, stats
from microbench.measure.cache import PoolPlan, plan_pool, touched_slots
from microbench.measure.loops import LaunchFacts
from microbench.options import SizePlan, cache_passes, counts_for, dtype_for, plan_size
from microbench.records import build
from microbench.run.context import RunContext
from microbench.run.diagnostics import stragglers
from microbench.run.measure_pool import measure_on_pool
from microbench.units import format_bytes, format_size


@dataclass(frozen=True)
class SizeJob:
    """One benchmark at one size on this rank."""

    coll: Collective
    ctx: Context
    dtype: DType
    plan: SizePlan
    requested: int  #: the size asked for, before rounding to whole elements
    timing: bool  #: this rank's samples enter the statistics


def context_for(rc: RunContext, coll: Collective) -> Context:
    """This rank's context for a benchmark: its pair partner, in place or not, the run's op and root."""
    o = rc.opts
    peer, initiator = pair_of(rc.rank, rc.nranks) if coll.point_to_point else (None, False)
    return Context(rank=rc.rank, nranks=rc.nranks, op=o.op, root=o.root,
                   in_place=rc.transport.in_place_for(coll, o), window=o.window, peer=peer, initiator=initiator,
                   result_at_rank=rc.transport.result_at_rank)


def run_benchmark(rc: RunContext, coll: Collective) -> list[str]:
    """Sweep every size of one benchmark (collective); returns the sizes whose check failed."""
    o = rc.opts
    dtype = dtype_for(o, coll)
    ctx = context_for(rc, coll)
    failed, skipped, rounded, measured = [], [], [], set()
    for size in o.sizes_for(coll.name):
        plan = plan_size(coll, size, rc.nranks, dtype, ctx.in_place)
        if plan is None:
            skipped.append(size)
            continue
        if plan.size_bytes != size:
            rounded.append(f"{size} -> {plan.size_bytes}")
        if plan.size_bytes in measured:  # rounded onto a size already measured: one record per size
            continue
        measured.add(plan.size_bytes)
        rc.begin(f"{coll.name} at {plan.size_bytes} B", f"{coll.name} {format_size(plan.size_bytes)}")
        job = SizeJob(coll, ctx, dtype, plan, size, participates(coll, ctx))
        for index, mode in enumerate(cache_passes(o)):
            result = measure_pass(rc, job, mode, first_call=(index == 0))
            if result is None:
                continue
            if result["check"] == "fail":
                failed.append(_failure_text(result, size, mode if o.cache == "both" else None))
            rc.out.result(result)
    unit = f"{rc.nranks} x {dtype.name}" if coll.count_multiple(rc.nranks) > 1 else dtype.name
    if skipped:
        rc.note(f"{coll.name}: sizes {', '.join(map(str, skipped))} B skipped (smaller than one {unit})")
    if rounded:
        rc.note(f"{coll.name}: sizes rounded down to whole elements of {unit} (B): {', '.join(rounded)}")
    return rc.reducer.bcast(failed, root=0)


def _failure_text(result: dict, size: int, mode: str | None) -> str:
    """A failed size as the end-of-run message names it, with the nodes whose data was wrong."""
    nodes = [f["label"] for f in result.get("check_failures") or ()]
    return format_size(size) + (f" ({mode})" if mode else "") + (f" at {', '.join(nodes)}" if nodes else "")


def measure_pass(rc: RunContext, job: SizeJob, mode: str, first_call: bool) -> dict | None:
    """Measure one size in one cache mode (collective); returns the result record on rank 0."""
    o = rc.opts
    started = time.perf_counter()
    iterations, warmup = counts_for(o, job.coll, job.plan.size_bytes)
    pool_plan = _cold_pool(rc, job, iterations, warmup, first_call) if mode == "cold" else None
    flush = rc.transport.flush() if (mode == "cold" or o.flush) else None
    settings = engine.LoopSettings(iterations=iterations, warmup=warmup, check=o.check,
                                   sync_barrier=(o.sync == "barrier"), time_budget_s=o.time_budget,
                                   first_call=first_call, flush_before=flush if mode == "cold" else None,
                                   flush_each=flush if o.flush else None,
                                   touch_slots_first=mode == "cold" and rc.transport.registers_buffers)
    pool = rc.transport.pool(job.plan, job.dtype, pool_plan.slots if pool_plan else 1, job.coll.point_to_point,
                             o.huge_pages)
    try:
        m, loop, first_extra, huge = _measure_on_pool(rc, job, pool, settings, mode, first_call)
    finally:
        if flush is not None:  # first: the pool's close gives the device memory back, the flush's too
            flush.close()
        pool.close()
    figures = _summarize(rc, job, m, first_extra, huge, first_call, started)
    if o.samples:
        _write_samples(rc, job, mode, m)
    if figures is None:
        return None
    return build.result_record(run_id=rc.run_id, coll=job.coll, plan=job.plan, requested=job.requested,
                               dtype=job.dtype, in_place=job.ctx.in_place, opts=o, nranks=rc.nranks,
                               transport=rc.transport, layout=rc.layout, cache=mode, pool=pool_plan, loop=loop,
                               figures=figures, cycle=rc.cycle,
                               judged=(lambda rec: rc.peaks.result_fields(job.coll, rc.layout, rc.nranks, rec))
                               if rc.peaks is not None else None)


def _cold_pool(rc: RunContext, job: SizeJob, iterations: int, warmup: int, first_call: bool) -> PoolPlan:
    """The cold-cache rotation pool of this size (noted when --max-memory keeps it from evicting)."""
    o, plan, item = rc.opts, job.plan, job.dtype.itemsize
    uses = (1 if first_call else 0) + warmup + (iterations if o.time_budget is None else 10**9)
    pool = plan_pool(plan.send_count * item, plan.recv_count * item, rc.transport.cache_bytes, uses, o.max_memory)
    if not pool.evicts:
        rc.note(f"{job.coll.name} at {format_size(plan.size_bytes)}: the cold pool ({pool.slots} "
                f"slot{'s' if pool.slots != 1 else ''}, {format_bytes(pool.pool_bytes)}, bounded by --max-memory) "
                f"touches less than twice the cache per trip, so this size is not fully cold")
    return pool


def _measure_on_pool(rc: RunContext, job: SizeJob, pool, settings: engine.LoopSettings, mode: str,
                     first_call: bool):
    """Build the calls on ``pool`` and time them: (measurement, loop facts, further first calls, huge-page bytes)."""
    coll, plan = job.coll, job.plan
    measured = measure_on_pool(rc, coll, job.ctx, pool, plan.size_bytes, settings,
                               agree_max=lambda v: agree.max_of(rc.reducer, v), timing=job.timing)
    m, backend, loop, calls, copies = (measured.measurement, measured.backend, measured.loop, measured.calls,
                                       measured.copies)
    if coll.nonblocking:
        m.overlap = _measure_overlap(rc, job, pool, calls, loop, settings, m, backend.barrier(), copies)
    loop.launch = agree_launch(rc, loop.launch)  # the launch-bound verdict of the slowest rank, not rank 0's
    facts = build.LoopFacts.of(loop)  # before time_fresh_calls runs the loop again
    first_extra = []
    if first_call and rc.opts.first_call_samples > 1:
        first_extra = engine.time_fresh_calls(rc.opts.first_call_samples - 1, lambda: _fresh_call(rc, job), loop,
                                              backend.barrier(), coll.per_iteration(job.ctx.window))
    if rc.hooks.slot_log:
        for k in range(len(pool.slots)):
            pool.pull(k)
        rc.hooks.log_slots({"rank": rc.rank, "benchmark": coll.name, "size_bytes": plan.size_bytes,
                               "cache": mode, "slots": len(pool.slots),
                               "uses": (1 if first_call else 0) + m.warmup + m.iterations,
                               "touched": touched_slots(pool.slots, POISON)})
    return m, facts, first_extra, pool.huge_page_bytes()


def agree_launch(rc: RunContext, launch: LaunchFacts | None) -> LaunchFacts | None:
    """Collective (every size, on every device): the launch facts of the rank whose launches weighed most on its
    samples (``LaunchFacts.share``); None where no rank has any (host loops)."""
    share = launch.share if launch else -1.0
    worst = agree.max_of(rc.reducer, share)
    if worst < 0:
        return None
    holder = agree.lowest_rank_where(rc.reducer, share == worst)
    facts = rc.reducer.bcast(dataclasses.astuple(launch) if launch else None, root=holder or 0)
    return LaunchFacts(*facts) if facts else None


def _measure_overlap(rc: RunContext, job: SizeJob, pool, calls, loop, settings: engine.LoopSettings,
                     m: engine.Measurement, barrier, copies: dict) -> overlap.OverlapMeasurement:
    """Non-blocking benchmarks: the overlapped iterations after t_pure (their check errors join the size's)."""
    result = overlap.measure(job.coll, job.ctx, pool.slots, calls, loop, settings, overlap.OverlapPlan.of(rc.opts),
                             m.samples_us if m.samples_us is not None else [], m.iterations, barrier,
                             lambda v: agree.mean_of(rc.reducer, v), rc.transport.cache_bytes, **copies)
    if result.check_errors is not None:
        m.check_errors = (m.check_errors or 0) + result.check_errors
    return result


def _fresh_call(rc: RunContext, job: SizeJob):
    """One call bound to a newly mapped, written, never-used buffer set; and its release function."""
    pool = rc.transport.pool(job.plan, job.dtype, 1, job.coll.point_to_point, rc.opts.huge_pages)
    job.coll.fill(pool.slots[0], job.ctx, 0)
    pool.push(0)
    calls, _, _ = rc.transport.calls(job.coll, job.ctx, pool)
    return calls, pool.close


def _summarize(rc: RunContext, job: SizeJob, m: engine.Measurement, first_extra: list[float], huge: int | None,
               first_call: bool, started: float) -> build.Figures | None:
    """Collective: the cross-rank statistics of one pass; the figures on rank 0, None elsewhere."""
    latency = stats.summarize(m.samples_us, rc.reducer)
    first = None
    if first_call:
        first = stats.first_call_summary([m.first_call_us, *first_extra] if job.timing else None, rc.reducer)
    check = None
    if m.check_errors is not None:
        check = "pass" if agree.sum_of(rc.reducer, m.check_errors) == 0 else "fail"
    huge_total = agree.sum_of(rc.reducer, huge or 0)
    ranks, failures = stragglers.summarize(rc.nodes, rc.layout.hosts_by_rank, m.samples_us, m.check_errors)
    overlap_figures = overlap_stats.summarize(m.overlap, rc.reducer, overlap.OverlapPlan.of(rc.opts)) \
        if job.coll.nonblocking else None
    if rc.rank != 0:
        return None
    return build.Figures(latency, first, check, m.iterations, m.warmup, huge_total,
                         round(time.perf_counter() - started, 4), m.budget_estimate_s, ranks, failures,
                         overlap=overlap_figures)


def _write_samples(rc: RunContext, job: SizeJob, mode: str, m: engine.Measurement) -> None:
    """Collective: every rank's raw samples to rank 0, one samples record per timing rank."""
    gathered = rc.reducer.gather(None if m.samples_us is None else m.samples_us.tolist())
    if rc.out is not None:
        rc.out.samples([build.samples_record(rc.run_id, job.coll.name, job.plan.size_bytes, mode, rank, samples)
                        for rank, samples in enumerate(gathered) if samples is not None])

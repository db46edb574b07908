"""Bisection: find the node that slows a collective in O(log N) rounds (``microbench run bisect``).

Participants are the nodes of ``microbench.cluster.nodes`` (one rank per host, the lowest, across hosts; every rank
on one host). Each round splits the candidate nodes into two halves, makes each half a communicator of its
own (``MPI_Comm_split`` of the benchmark communicator) and measures both halves at the same time with
``--bisect-benchmark`` at ``--bisect-size``. A half of one node is measured together with one node already
cleared in an earlier round, since a collective on one rank waits for nobody and so cannot show a node that
others wait for.

A group's time in iteration i is the slowest of its ranks in that iteration (MPI_MAX over the group, as
OMB's max). The slower group (by median) *stands out* when its median is an outlier among the faster
group's per-iteration times by the pairwise test's rule (``outliers.flag_outliers``: modified z-score
0.6745 (x - median) / MAD above ``outliers.OUTLIER_Z``, MAD floored at 5 % of the median, so the slower half
must be at least about 26 % slower). The search goes on in the half that stands out and clears the other.
It ends with one node (``found``), with the smallest group that still stood out when neither of its halves
did (``group``: the slowness needs nodes from both halves, a link between them say), or after the first
round when nothing stood out (``none``). N nodes take ceil(log2 N) rounds at most.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from microbench.benchmarks.table import COLLECTIVES, Context
from microbench.cluster import agree
from microbench.cluster.nodes import Nodes
from microbench.errors import UsageError
from microbench.measure import engine
from microbench.options import counts_for, dtype_for, plan_size
from microbench.records import build
from microbench.records.figures import LoopFacts
from microbench.measure.outliers import OUTLIER_Z, flag_outliers
from microbench.run.measure_pool import measure_on_pool

if TYPE_CHECKING:  # pragma: no cover
    from microbench.options import RunOptions
    from microbench.run.context import RunContext

BISECT = "bisect"
MIN_NODES = 4  #: fewer nodes leave no cleared node to pair a lone half with


@dataclass(frozen=True)
class Plan:
    """Who takes part: one rank per node."""

    leaders: list[int]
    labels: list[str]
    unit: str  #: "host" or "rank"


def check_node_count(n: int, unit: str) -> None:
    """A UsageError below ``MIN_NODES`` nodes (UNIT: "host", or "rank" where all ranks share one host)."""
    if n < MIN_NODES:
        raise UsageError(f"bisect needs at least {MIN_NODES} nodes ({unit}s); this job has {n}: "
                         f"use the pairwise test (microbench run pairs) instead")


def plan(nodes: Nodes, opts: RunOptions) -> Plan:
    """The participants of the search; a UsageError (on every rank alike) below ``MIN_NODES`` nodes or for a
    size that holds no whole element in some group."""
    n = len(nodes.leaders)
    check_node_count(n, nodes.unit)
    coll = COLLECTIVES[opts.bisect_benchmark]
    dtype = dtype_for(opts, coll)
    if any(plan_size(coll, opts.bisect_size, k, dtype, False) is None for k in range(2, n + 1)):
        raise UsageError(f"--bisect-size {opts.bisect_size} B is too small for {coll.name} of {dtype.name} "
                         f"on up to {n} ranks")
    return Plan(nodes.leaders, nodes.labels, nodes.unit)


def halves(candidates: list[int], cleared: list[int]) -> tuple[list[int], list[int], list[list[int]]]:
    """(first half, second half, the two groups to measure): a half of one node gets a cleared node."""
    mid = len(candidates) // 2
    a, b = candidates[:mid], candidates[mid:]
    groups = [half + ([cleared[k]] if len(half) < 2 else []) for k, half in enumerate((a, b))]
    return a, b, groups


def decide(times_us: list[list[float]]) -> tuple[int | None, dict]:
    """(index of the group that stands out, or None; the rule's numbers) from each group's per-iteration times."""
    medians = [float(statistics.median(t)) for t in times_us]
    slow = int(np.argmax(medians))
    fast_times = list(times_us[1 - slow])
    flagged, rule = flag_outliers(fast_times + [medians[slow]], higher_is_worse=True, z_limit=OUTLIER_Z)
    z = 0.6745 * (medians[slow] - rule["median"]) / rule["mad"] if rule["mad"] > 0 else 0.0
    stands = any(k == len(fast_times) for k, _ in flagged)
    return (slow if stands else None), {"p50_us": medians, "z": round(z, 2), "threshold_us": rule["threshold"]}


def run_bisection(rc: RunContext, test: Plan) -> list[str]:
    """Collective: the search, one record on rank 0; returns ["bisect"] when --check found wrong data."""
    if rc.transport.staged:
        raise UsageError("bisect cannot stage device buffers through the host (--stage-host)")
    o, started = rc.opts, time.perf_counter()
    coll = COLLECTIVES[o.bisect_benchmark]
    candidates, cleared, rounds, errors, loop = list(range(len(test.leaders))), [], [], 0, None
    verdict = "none"
    while len(candidates) > 1:
        a, b, groups = halves(candidates, cleared)
        number = len(rounds) + 1
        rc.begin(f"bisect round {number} ({coll.name} at {o.bisect_size} B)", f"bisect round {number}")
        times, facts, mismatches = _measure_groups(rc, test, groups)
        errors += mismatches
        loop = loop or facts  # rank 0's record names the loop of the first round
        stands, numbers = rc.reducer.bcast(decide(times) if rc.rank == 0 else None, root=0)
        rounds.append(_round_fields(number, test, groups, [a, b], stands, numbers))
        if stands is None:
            verdict = "none" if number == 1 else "group"
            break
        candidates, cleared = [a, b][stands], cleared + [a, b][1 - stands]
        verdict = "found"
    check = ("fail" if agree.sum_of(rc.reducer, errors) else "pass") if o.check else None
    if rc.out is not None:
        rc.out.record(_record(rc, test, rounds, [] if verdict == "none" else candidates, verdict, check, loop, started))
    return [BISECT] if check == "fail" else []


def _round_fields(number: int, test: Plan, groups: list[list[int]], halves_: list[list[int]], stands: int | None,
                  numbers: dict) -> dict:
    return {"round": number, "stands_out": stands, **numbers,
            "groups": [{"labels": [test.labels[i] for i in half], "ranks": [test.leaders[i] for i in half],
                        "padded_with": [test.labels[i] for i in group if i not in half]}
                       for half, group in zip(halves_, groups)]}


def _record(rc: RunContext, test: Plan, rounds: list[dict], suspects: list[int], verdict: str, check: str | None,
            loop: LoopFacts | None, started: float) -> dict:
    o = rc.opts
    coll = COLLECTIVES[o.bisect_benchmark]
    iterations, warmup = counts_for(o, coll, o.bisect_size)
    search = {"unit": test.unit, "nodes": len(test.leaders), "participant_ranks": test.leaders,
              "rounds": rounds, "verdict": verdict, "check": check,
              "suspects": [{"label": test.labels[i], "rank": test.leaders[i]} for i in suspects],
              "rule": {"statistic": "the slower group's median per-iteration time (the slowest rank of the group in "
                                    "each iteration) against the faster group's per-iteration times: modified "
                                    "z-score 0.6745 (x - median) / MAD, MAD floored at 5 % of the median",
                       "z_limit": OUTLIER_Z}}
    return build.bisect_record(run_id=rc.run_id, benchmark=coll.name, size_bytes=o.bisect_size,
                               dtype=dtype_for(o, coll).name, iterations=iterations, warmup=warmup, loop=loop,
                               search=search, wall_s=round(time.perf_counter() - started, 4), cycle=rc.cycle)


def _measure_groups(rc: RunContext, test: Plan, groups: list[list[int]]):
    """Collective: both groups measured at once, each on its own communicator.

    Returns, on rank 0, each group's per-iteration times (us, the slowest rank of the group per iteration) and
    the loop's facts; with this rank's check mismatches (0 unchecked) everywhere."""
    MPI = rc.world.MPI
    color = next((k for k, g in enumerate(groups) if rc.rank in [test.leaders[i] for i in g]), None)
    comm = rc.transport.split(color, rc.rank)
    mine, facts, mismatches = None, None, 0
    if comm is not None:
        try:
            m, facts = _measure_on(rc, comm)
            group_max = np.empty_like(m.samples_us)
            comm.Allreduce(m.samples_us, group_max, op=MPI.MAX)
            mismatches = m.check_errors or 0
            if comm.Get_rank() == 0:
                mine = (color, group_max.tolist(), facts)
        finally:
            comm.Free()
    gathered = rc.reducer.gather(mine)
    if gathered is None:
        return None, None, mismatches
    by_group = dict((c, (t, f)) for c, t, f in filter(None, gathered))
    return [by_group[k][0] for k in range(len(groups))], by_group[0][1], mismatches


def _measure_on(rc: RunContext, comm) -> tuple[engine.Measurement, LoopFacts]:
    """This rank's measurement of the bisection's benchmark on a group communicator."""
    o, MPI = rc.opts, rc.world.MPI
    coll = COLLECTIVES[o.bisect_benchmark]
    dtype = dtype_for(o, coll)
    rank, size = comm.Get_rank(), comm.Get_size()
    in_place = rc.transport.in_place_for(coll, o)
    size_plan = plan_size(coll, o.bisect_size, size, dtype, in_place)  # not None: plan() checked
    ctx = Context(rank=rank, nranks=size, op=o.op, root=0, in_place=in_place, window=o.window,
                  result_at_rank=rc.transport.result_at_rank)
    iterations, warmup = counts_for(o, coll, size_plan.size_bytes)
    settings = engine.LoopSettings(iterations=iterations, warmup=warmup, check=o.check,
                                   sync_barrier=(o.sync == "barrier"), first_call=False)
    pool = rc.transport.pool(size_plan, dtype, 1, False, o.huge_pages)
    try:
        measured = measure_on_pool(rc, coll, ctx, pool, size_plan.size_bytes, settings,
                                   agree_max=lambda v: comm.allreduce(v, op=MPI.MAX), timing=True, comm=comm)
        return measured.measurement, LoopFacts.of(measured.loop)
    finally:
        pool.close()

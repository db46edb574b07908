"""The replay's figures: the slowest rank's, medians over the timed iterations, beside the prediction.

Every function here that reduces across ranks is collective (every rank calls it, in the same order). The
summary is what ``--json`` prints and what the replay record carries (``records.build.replay_record``).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from microbench.replay import calibrate, predict
from microbench.replay.compare import comparison
from microbench.replay.execute import IssuedCalls, IterationTimes
from microbench.replay.layout import Layout
from microbench.replay.schedule import OVERLAP_RULE, Call
from microbench.workload.distribution import Workload
from microbench.workload.model import preset

MEASURE_RULES = [
    "wall: per timed iteration the slowest rank's wall time, median over timed iterations",
    "per collective, group and call: the slowest rank's seconds inside those calls (an overlapped call: its post "
    "and its share of the wait that completes it), median over timed iterations",
    "exposed communication: median wall of the timed iterations minus median wall of the compute-only "
    "iterations (the same compute slices, no calls), slowest rank",
    "issued: each call through the benchmark table's entry for its collective (its non-blocking twin when "
    "overlapped) on its group's communicator, buffers per rank as the entry sizes them; a pipeline send as one "
    "shift along the pipeline group, its recv twin issuing nothing",
]


@dataclass
class Timings:
    """One rank's timings of a launch: the cold iteration, the timed ones, the compute-only ones, and the same
    launch's per-call latencies (``calibrate.measure``)."""

    first: IterationTimes
    timed: list[IterationTimes]
    compute_only: list[IterationTimes]
    latencies: dict


def _median_slowest(issuer, values: list[float]) -> float:
    return statistics.median(issuer.world_max(v) for v in values)


def measured(issuer, workload: Workload | None, schedule: list[Call], t: Timings,
             issued: dict[tuple, IssuedCalls]) -> dict:
    """The slowest rank's figures, medians over the timed iterations (collective on every rank)."""
    kinds = sorted({c.collective for c in schedule})
    groups = sorted({c.group for c in schedule})
    wall = [issuer.world_max(x.wall_s) for x in t.timed]
    compute_wall = _median_slowest(issuer, [x.wall_s for x in t.compute_only]) if t.compute_only else 0.0
    median_wall = statistics.median(wall)
    return {
        "workload": _workload(workload), "iterations": len(t.timed),
        "calls_per_iteration": len(schedule), "bytes_per_iteration": sum(c.bytes for c in schedule),
        "first_iteration_s": issuer.world_max(t.first.wall_s),
        "wall_s": median_wall, "wall_min_s": min(wall), "wall_max_s": max(wall),
        "compute_only_s": compute_wall if t.compute_only else None,
        "exposed_communication_s": median_wall - compute_wall,
        "exposed_share": (median_wall - compute_wall) / median_wall if median_wall > 0 else 0.0,
        "per_collective_s": {k: _median_slowest(issuer, [x.per_collective_s.get(k, 0.0) for x in t.timed])
                             for k in kinds},
        "per_group_s": {g: _median_slowest(issuer, [x.per_group_s.get(g, 0.0) for x in t.timed]) for g in groups},
        "per_call": _per_call(issuer, schedule, t, issued),
        "rules": [OVERLAP_RULE, *MEASURE_RULES, calibrate.__doc__.split("\n\n")[1].replace("\n", " ")],
    }


def _per_call(issuer, schedule: list[Call], t: Timings, issued: dict[tuple, IssuedCalls]) -> list[dict]:
    """One row per (collective, group, bytes): its calls in the schedule, what was issued for them, its times."""
    keys = sorted({c.key for c in schedule})
    counts = {k: sum(1 for c in schedule if c.key == k) for k in keys}
    overlapped = {c.key for c in schedule if c.overlapped}
    rows = []
    for key in keys:
        lat, what = t.latencies.get(key), issued.get(key)
        rows.append({
            "collective": key[0], "group": key[1], "bytes": key[2], "calls": counts[key],
            **({"splits": key[3]} if key[3] else {}),
            "overlapped": key in overlapped,
            "issued": int(issuer.world_max(what.calls if what else 0)),
            "issued_as": sorted(what.entries) if what else [],
            "group_ranks": what.group_ranks if what else None,
            "send_bytes": what.send_bytes if what else None, "recv_bytes": what.recv_bytes if what else None,
            "in_place": what.in_place if what else None,
            "replayed_s": _median_slowest(issuer, [x.per_call_s.get(key, 0.0) for x in t.timed]),
            "isolated_s_per_call": issuer.world_max(lat.isolated_s) if lat else None,
            "concurrent_s_per_call": issuer.world_max(lat.concurrent_s) if lat else None,
            "nonblocking_s_per_call": (issuer.world_max(lat.nonblocking_s)
                                       if lat and lat.nonblocking_s is not None else None)})
    return rows


def _workload(workload: Workload | None) -> dict | None:
    if workload is None:
        return None
    m = workload.model
    return {"model": m.describe(), "scheme": workload.scheme, "layers_replayed": m.layers,
            "model_layers": preset(m.name).layers if m.name else m.layers,
            "dp": workload.dp, "tp": workload.tp, "pp": workload.pp, "dtype": workload.dtype,
            "micro_batch": workload.micro_batch, "microbatches": workload.microbatches,
            **({"cp": workload.cp, "ep": workload.ep} if workload.scheme in ("moe", "cp") else {}),
            **({"experts": m.experts, "top_k": m.top_k, "routing": workload.routing.text} if m.experts else {})}


def predicted(issuer, p: predict.Prediction) -> dict:
    """The slowest rank's predicted figures (collective on every rank; every rank has the same calls)."""
    return {"iteration_s": issuer.world_max(p.iteration_s), "communication_s": issuer.world_max(p.communication_s),
            "compute_s": p.compute_s, "exposed_s": issuer.world_max(p.exposed_s),
            "per_collective_s": {k: issuer.world_max(v) for k, v in sorted(p.per_collective_s.items())},
            "per_group_s": {k: issuer.world_max(v) for k, v in sorted(p.per_group_s.items())},
            "outside_s": {k: issuer.world_max(v) for k, v in sorted(p.outside_s.items())},
            "priced": dict(sorted(p.priced.items()))}


def prediction(figures: dict, curves, args) -> dict:
    """The prediction block: where its prices came from, its rule, its figures and its notes."""
    return {"source": (f"--results {' '.join(args.results)} ({args.stat})" if curves
                       else "the same launch's isolated per-call latencies"),
            "rule": predict.PREDICTION_RULE, **figures,
            "notes": [*(curves[1] if curves else []), *sorted(curves[2] if curves else [])]}


def context(schedule: list[Call], layout: Layout, hosts, compute: bool) -> dict:
    """What the comparison's attributions need to know about the launch (``compare.comparison``)."""
    return {"overlapped_groups": sorted({c.group for c in schedule if c.overlapped}),
            "group_counts": {k: len(layout.groups(k)) for k in layout.kinds},
            "groups": sorted({c.group for c in schedule}), "compute": compute,
            "ranks_per_host": max(hosts.ranks_per_host.values()),
            "cores": os.cpu_count() or 1}  # the host's, not this rank's binding


def compared(summary: dict, figures: dict, launch_context: dict, threshold: float) -> dict:
    """``summary`` with the comparison rows and their threshold added."""
    return {**summary, "comparison": comparison(figures, summary, launch_context, threshold),
            "comparison_threshold": threshold}

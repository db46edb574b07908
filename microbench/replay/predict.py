"""The prediction a replay is checked against: one rank's iteration priced call by call on latency curves.

Pricing a call (``Pricer``): by default the same launch's isolated latency of that exact call
(``replay/calibrate.py``: one group of the kind at a time, as a sweep measures a curve); with ``--results``
the curve of the mapped benchmark (``workload/weighting.py``: log-log interpolation between measured sizes,
flat below the smallest, bandwidth held above the largest, both flagged) at the group's size, or the nearest
group size measured; an all-to-all-v on the alltoallv curve of its split pattern (the uniform split's, noted,
when that split was not measured). A ``recv`` twin costs nothing (its send carries the transfer).

Predicted iteration (``PREDICTION_RULE``): per compute segment, its compute + its blocking calls + what its
overlapped calls take beyond its compute (max(0, overlapped - compute)); without compute every call is
serial. Predicted exposed communication = predicted iteration - compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from microbench.benchmarks.workload_sizes import BENCHMARK_FOR
from microbench.replay.calibrate import CallLatency
from microbench.replay.layout import Layout
from microbench.replay.schedule import Call, Compute, Step, segment_of
from microbench.workload.weighting import Curve, choose_curve, curve_name

PREDICTION_RULE = ("predicted: each call at its curve's latency (recv twins free); per compute segment, compute + "
                   "blocking calls + max(0, overlapped calls - compute); without compute every call serial; "
                   "exposed = iteration - compute")
OUTSIDE = ("below", "above")  #: how a call priced outside its curve's measured sizes was priced


@dataclass(frozen=True)
class Price:
    """Seconds of one call and how they were obtained."""

    seconds: float
    how: str  #: "same launch", "measured", "interpolated", "below", "above", or "no curve"


Pricer = Callable[[Call], Price]


def from_latencies(latencies: dict[tuple, CallLatency]) -> Pricer:
    """Each call at the same launch's isolated seconds per call of its (collective, group, bytes)."""
    def price(call: Call) -> Price:
        if call.is_twin:
            return Price(0.0, "same launch")
        found = latencies.get(call.key)
        return Price(found.isolated_s, "same launch") if found else Price(0.0, "no curve")
    return price


def from_curves(curves: dict[tuple[str, int], Curve], layout: Layout) -> tuple[Pricer, set[str]]:
    """Each call on the measured curve of its benchmark at its group's size (the nearest size measured when
    that one was not); the set fills, as calls are priced, with notes on curves that stood in for another
    group size or were missing."""
    notes: set[str] = set()

    def price(call: Call) -> Price:
        if call.is_twin:
            return Price(0.0, "measured")
        bench, ranks = BENCHMARK_FOR[call.collective], layout.size(call.group)
        if call.splits is not None:  # an all-to-all-v: the curve of its split, else the uniform split's (noted)
            bench = curve_name(bench, call.splits.text)
            if not [c for (b, _), c in curves.items() if b == bench]:
                notes.add(f"{bench}: no curve of that split; priced on the uniform split's")
                bench = curve_name(BENCHMARK_FOR[call.collective], "uniform")
        curve = choose_curve(curves, bench, ranks)
        if curve is None:
            notes.add(f"{call.collective}: no {bench} curve in the results: its calls are not priced")
            return Price(0.0, "no curve")
        if curve.ranks != ranks and bench != "latency":
            notes.add(f"{call.collective} on the {call.group} group of {ranks}: priced on the {curve.ranks}-rank curve")
        latency_us, how = curve.latency_at(call.bytes)
        return Price(latency_us * 1e-6, how)
    return price, notes  # type: ignore[return-value]


@dataclass
class Prediction:
    """One rank's predicted iteration (seconds) and how its calls were priced."""

    communication_s: float = 0.0
    compute_s: float = 0.0
    iteration_s: float = 0.0
    per_collective_s: dict = field(default_factory=dict)
    per_group_s: dict = field(default_factory=dict)
    per_call_s: dict = field(default_factory=dict)  #: (collective, group, bytes) -> seconds of all such calls
    priced: dict = field(default_factory=dict)  #: how -> calls
    outside_s: dict = field(default_factory=dict)  #: row name -> seconds priced outside the curve

    @property
    def exposed_s(self) -> float:
        return self.iteration_s - self.compute_s


def predict(steps: list[Step], price: Pricer) -> Prediction:
    """This rank's prediction for one iteration of ``steps`` (see ``PREDICTION_RULE``)."""
    out = Prediction()
    segments: dict[str, list[float]] = {}  # segment -> [compute, blocking, overlapped]
    for step in steps:
        if isinstance(step, Compute):
            segments.setdefault(step.segment, [0.0, 0.0, 0.0])[0] += step.seconds
            out.compute_s += step.seconds
            continue
        p = price(step)
        seg = segments.setdefault(segment_of(step.phase), [0.0, 0.0, 0.0])
        seg[2 if step.overlapped else 1] += p.seconds
        out.communication_s += p.seconds
        for table, key in ((out.per_collective_s, step.collective), (out.per_group_s, step.group),
                           (out.per_call_s, step.key)):
            table[key] = table.get(key, 0.0) + p.seconds
        if not step.is_twin:
            out.priced[p.how] = out.priced.get(p.how, 0) + 1
        if p.how in OUTSIDE:
            for key in ("total", step.collective, f"group {step.group}"):
                out.outside_s[key] = out.outside_s.get(key, 0.0) + p.seconds
    for compute, blocking, overlapped in segments.values():
        out.iteration_s += compute + blocking + max(0.0, overlapped - compute)
    return out


def ratio(replayed: float, predicted: float) -> float | None:
    """replayed / predicted (None when nothing was predicted)."""
    return replayed / predicted if predicted > 0 else None

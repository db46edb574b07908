"""What the run path hands the record builders about one size: the loop that timed it (``LoopFacts``, read on every
rank right after its timed iterations) and its figures across ranks (``Figures``, on rank 0). Plain data, so that a
rank that only measures never imports the builders and the record model behind them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from microbench.measure.loops import TimedLoop


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

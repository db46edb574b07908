"""GPU timing for torch.distributed on CUDA: CUDA events, and CUDA graphs of the timed iterations.

The device is synchronised and the ranks pass a barrier before the timed region. In the lean loop one
CUDA event is recorded on the current stream after every call, so iteration i lasts from event i to event
i+1 on the GPU's clock; the host only waits at the end, and its launch time per call is recorded beside the
device time (``LaunchFacts``: launch-bound small messages). With --sync barrier, --flush or --check, each
iteration has its own start and end events, the device is synchronised before the barrier, and the flush
(a write of twice the L2 size) runs before the start event.

With --cuda-graph the timed iterations replay graphs that ``begin_timed`` captured and replayed once
(untimed) before the engine's barrier, as nccl-tests instantiates its graph, passes a barrier and only then
starts its timer: ``graph_schedule`` says which. docs/torch-and-gpus.md has the rules.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from microbench.measure.loops import OVERLAP_PARTS, GraphDetails, LaunchFacts, LoopBase, OverlapWork

#: The host's launch time per call is read over the first calls only: once the launch queue (or NCCL's work FIFO)
#: is full the host waits for the device, and a long loop would read launch-bound when it is not.
LAUNCH_PROBE_CALLS = 16

GRAPH_ITERATIONS = 100  #: most iterations captured in one graph
MIN_REPLAYS = 10  #: fewest replays (samples) a graph-timed size gets, for its percentiles


class CudaEventLoop(LoopBase):
    """The Python loop timed with CUDA events on the current stream (torch, --device cuda)."""

    call_path = "torch"
    timer = last_timer = "cuda_events"

    def __init__(self):
        import torch

        self.torch = torch

    def prepare(self, calls):
        return list(calls)

    def run(self, calls, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        if iters <= 0:
            return np.empty(0, dtype=np.int64)
        n = len(calls)
        self.launch = None
        if barrier is not None or flush is not None:
            return self.paired(iters, lambda i: calls[(start + i) % n], barrier, flush)
        torch = self.torch
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        probe = min(iters, LAUNCH_PROBE_CALLS)
        host_start = time.perf_counter_ns()
        events[0].record()
        for i in range(probe):
            calls[(start + i) % n]()
            events[i + 1].record()
        host_ns = time.perf_counter_ns() - host_start
        for i in range(probe, iters):
            calls[(start + i) % n]()
            events[i + 1].record()
        events[-1].synchronize()
        durations = _ns([events[i].elapsed_time(events[i + 1]) for i in range(iters)])
        self.launch = LaunchFacts(host_ns / probe / 1e3, float(durations.mean()) / 1e3)
        return durations

    def time_compute(self, kernel, units: int, chunks: int, reps: int) -> np.ndarray:
        return kernel.time_events(units, chunks, reps)

    def run_overlap(self, calls, iters: int, work: OverlapWork, start: int = 0, barrier=None,
                    flush=None) -> np.ndarray:
        """Overlapped iterations on CUDA: the collective on its stream (async_op=True), the GEMMs on the
        current stream. overall (post to the end of the wait), compute (to the last GEMM) and wait are GPU
        times between events on the current stream; post and test are host times (ns, OVERLAP_PARTS)."""
        Event, clock = self.torch.cuda.Event, time.perf_counter_ns
        marks = []
        self.torch.cuda.synchronize()
        for i in range(iters):
            post, test, wait = calls[(start + i) % len(calls)].parts()
            if flush is not None:
                flush(i)
            if barrier is not None:
                barrier()
            events = [Event(enable_timing=True) for _ in range(3)]
            events[0].record()
            t0 = clock()
            handle = post()
            t1 = clock()
            tested = 0
            for _ in range(work.chunks):
                work.kernel.compute(work.units)
                if work.tests:
                    a = clock()
                    test(handle)
                    tested += clock() - a
            events[1].record()
            wait(handle)
            events[2].record()
            marks.append((events, t1 - t0, tested))
        self.torch.cuda.synchronize()
        out = np.zeros((iters, len(OVERLAP_PARTS)), dtype=np.int64)
        for i, (e, post_ns, test_ns) in enumerate(marks):
            out[i] = (round(e[0].elapsed_time(e[2]) * 1e6), post_ns, round(e[0].elapsed_time(e[1]) * 1e6), test_ns,
                      round(e[1].elapsed_time(e[2]) * 1e6))
        return out

    def paired(self, iters: int, call_for: Callable[[int], Callable[[], None]], barrier=None, flush=None,
               divide: int = 1) -> np.ndarray:
        """Each of ``iters`` launches of ``call_for(i)`` between its own start and end events (ns, divided by
        ``divide``); ``call_for(i)`` is asked before the flush and the barrier, outside the timing."""
        torch = self.torch
        Event = torch.cuda.Event
        pairs = [(Event(enable_timing=True), Event(enable_timing=True)) for _ in range(iters)]
        torch.cuda.synchronize()
        for i, (begin, end) in enumerate(pairs):
            call = call_for(i)
            if flush is not None:
                flush(i)
            if barrier is not None:
                barrier()  # synchronises the device first
            begin.record()
            call()
            end.record()
        torch.cuda.synchronize()
        return _ns([begin.elapsed_time(end) / divide for begin, end in pairs])


def _ns(milliseconds) -> np.ndarray:
    return np.round(np.asarray(milliseconds, dtype=np.float64) * 1e6).astype(np.int64)


@dataclass(frozen=True)
class GraphSchedule:
    """Which graphs the timed iterations replay, in order.

    Each graph is keyed (first slot, iterations it holds); replay r of the lean loop runs G consecutive
    iterations from slot start + r G, so a cold pool's slots keep rotating (a warm run has one slot, hence one
    graph). With ``each`` (--check, --sync barrier, --flush) every iteration replays a one-call graph of its
    own slot."""

    iterations_per_replay: int
    replays: list[tuple[int, int]]  #: the key of each replay, in order

    @property
    def graphs(self) -> list[tuple[int, int]]:
        """The distinct graphs to capture, in first-use order."""
        return list(dict.fromkeys(self.replays))


def graph_schedule(iterations: int, start: int, nslots: int, each: bool) -> GraphSchedule:
    """The replays of ``iterations`` timed iterations from slot ``start`` of ``nslots`` (see GraphSchedule)."""
    if each or iterations <= 1:
        return GraphSchedule(1, [((start + i) % nslots, 1) for i in range(iterations)])
    per = max(1, min(GRAPH_ITERATIONS, iterations // MIN_REPLAYS))
    replays = math.ceil(iterations / per)
    return GraphSchedule(per, [((start + r * per) % nslots, per) for r in range(replays)])


class _GraphCalls(list):
    """The calls of one size and the graphs captured from them for the timed iterations."""

    def __init__(self, calls):
        super().__init__(calls)
        self.schedule: GraphSchedule | None = None
        self.graphs: dict[tuple[int, int], object] = {}
        self.next_replay = 0


class CudaGraphLoop(CudaEventLoop):
    """The timed iterations replay CUDA graphs captured before them; the first call and warmup run eagerly.

    Every graph of the timed phase is captured and replayed once (untimed: the upload and first-use work; nccl-tests
    captures but does not replay) in ``begin_timed``; under cold cache the engine then flushes again (the replay
    touched the very slots the timed replays use), then its barrier aligns the ranks, then the timed replays
    start. Lean loop: ceil(iterations / G) replays, one sample each (its time / G).
    """

    timer = last_timer = "cuda_graph"
    separate_warmup = True
    runs_timed_slots_before = True  #: the untimed replay of every graph in begin_timed

    def prepare(self, calls):
        self.graph = None
        return _GraphCalls(calls)

    def begin_timed(self, prepared: _GraphCalls, iterations: int, start: int, each: bool) -> None:
        """Capture the graphs of the timed phase and replay each once, untimed; the engine's barrier follows."""
        schedule = graph_schedule(iterations, start, len(prepared), each)
        torch = self.torch
        for first, length in schedule.graphs:
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(length):
                    prepared[(first + i) % len(prepared)]()
            torch.cuda.synchronize()
            graph.replay()
            prepared.graphs[(first, length)] = graph
        torch.cuda.synchronize()
        prepared.schedule, prepared.next_replay = schedule, 0
        self.graph = GraphDetails(schedule.iterations_per_replay, 0, len(schedule.graphs))

    def run(self, calls, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        if iters <= 0 or not (isinstance(calls, _GraphCalls) and calls.schedule is not None):
            return super().run(calls, iters, start, barrier, flush)
        self.launch = None
        schedule = calls.schedule
        per = schedule.iterations_per_replay
        count = iters if per == 1 else len(schedule.replays)
        keys = schedule.replays[calls.next_replay:calls.next_replay + count]
        calls.next_replay += count
        durations = self.paired(count, lambda i: calls.graphs[keys[i]].replay, barrier, flush, divide=per)
        self.graph = GraphDetails(per, self.graph.replays + count, len(schedule.graphs))
        return durations

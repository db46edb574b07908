"""GPU timing for torch.distributed on CUDA: CUDA events, and CUDA graphs of the timed iterations.

The device is synchronised and the ranks pass a barrier before the timed region. In the lean loop one
CUDA event is recorded on the current stream after every call, so iteration i lasts from event i to event
i+1 on the GPU's clock; the host only waits at the end (docs/torch-and-gpus.md says why eager collectives
are timed correctly on the current stream). With --sync barrier, --flush or --check, each iteration has
its own start and end events, the device is synchronised before the barrier, and the flush (a write of
twice the L2 size) runs before the start event.

With --cuda-graph the timed iterations are captured into a CUDA graph of G iterations
(G = min(100, iterations / 10), at least 1); each replay is timed with an event pair and gives one sample,
its time divided by G. With --check, --sync barrier or --flush, each timed iteration replays a one-call
graph of its slot, so the data checked is what a replay made. Capture starts at ``begin_timed`` (the engine
calls it before the timed iterations), so NCCL's communicator setup and first-use work happen outside any
graph. A graph of a 1-rank in-place collective is empty (NCCL has nothing to do), and says so in a torch
warning.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from microbench.loops import OVERLAP_PARTS, GraphDetails, LoopBase, OverlapWork

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
        if barrier is not None or flush is not None:
            return self.paired(iters, lambda i: calls[(start + i) % n], barrier, flush)
        torch = self.torch
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        events[0].record()
        for i in range(iters):
            calls[(start + i) % n]()
            events[i + 1].record()
        events[-1].synchronize()
        return _ns([events[i].elapsed_time(events[i + 1]) for i in range(iters)])

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


class _GraphCalls(list):
    """The calls of one size, the graphs captured from them, and whether capture is allowed yet."""

    def __init__(self, calls):
        super().__init__(calls)
        self.capture = False
        self.graphs: dict[tuple[int, int], object] = {}


class CudaGraphLoop(CudaEventLoop):
    """The timed iterations replay captured CUDA graphs; the first call and warmup run eagerly.

    Lean loop: one graph of G consecutive iterations replayed ceil(iterations / G) times, one sample per
    replay. Graphs are captured once per (first slot, length) and reused; ``graph`` says how the latest
    size was replayed.
    """

    timer = last_timer = "cuda_graph"
    separate_warmup = True

    def prepare(self, calls):
        self.graph = None
        return _GraphCalls(calls)

    def begin_timed(self, prepared) -> None:
        prepared.capture = True

    def _graph(self, prepared: _GraphCalls, first: int, length: int):
        key = (first % len(prepared), length)
        graph = prepared.graphs.get(key)
        if graph is None:
            torch = self.torch
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(length):
                    prepared[(first + i) % len(prepared)]()
            torch.cuda.synchronize()
            prepared.graphs[key] = graph
        return graph

    def run(self, calls, iters: int, start: int = 0, barrier=None, flush=None) -> np.ndarray:
        if iters <= 0 or not (isinstance(calls, _GraphCalls) and calls.capture):
            return super().run(calls, iters, start, barrier, flush)
        if barrier is not None or flush is not None or iters == 1:
            durations = self.paired(iters, lambda i: self._graph(calls, start + i, 1).replay, barrier, flush)
            done = self.graph.replays if self.graph else 0
            self.graph = GraphDetails(1, done + iters)
            return durations
        g_iters = max(1, min(GRAPH_ITERATIONS, iters // MIN_REPLAYS))
        replays = math.ceil(iters / g_iters)
        graph = self._graph(calls, start, g_iters)
        self.graph = GraphDetails(g_iters, replays)
        # one sample per replay: the replay's time divided by the iterations it holds
        return self.paired(replays, lambda i: graph.replay, divide=g_iters)

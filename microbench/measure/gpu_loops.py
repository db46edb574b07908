"""GPU timing for torch.distributed on CUDA: CUDA events, and CUDA graphs of the timed iterations.

The device is synchronised and the ranks pass a barrier before the timed region. In the lean loop one
CUDA event is recorded on the current stream after every call, so iteration i lasts from event i to event
i+1 on the GPU's clock; the host only waits at the end, and its launch time per call is recorded beside the
device time (``LaunchFacts``: launch-bound small messages). With --sync barrier, --flush or --check, each
iteration has its own start and end events, the device is synchronised before the barrier, and the flush
(a write of twice the cache) runs before the start event.

An event recorded on an idle GPU fires at once, so a call launched after it would be timed with the host's
launch latency in it (20-45 us per eager torch.distributed call). Under NCCL a *gate* prevents that: a device
spin (``torch.cuda._sleep``) is enqueued before the start event, long enough for the host to launch the call
behind it (``LaunchGate``); each paired sample whose launch outlasted its gate is counted (``ungated``) and a
result with more than 1 % of them is marked launch-bound. The gate also starts the lean loop, so its first
samples do not wait for the host either. Backends whose calls wait on the host (gloo) are not gated: their
launch time is recorded beside the device time instead.

With --cuda-graph the timed iterations replay graphs that ``begin_timed`` captured and replayed once
(untimed) before the engine's barrier, as nccl-tests instantiates its graph, passes a barrier and only then
starts its timer: ``graph_schedule`` says which. The lean replays start with one untimed *lead* replay (behind
the gate), which absorbs the ranks' exit skew from the barrier: nccl-tests spreads it over all its timed
launches, a per-replay sample would hold it whole. docs/torch-and-gpus.md has the rules.
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
MIN_REPLAYS = 50  #: fewest replays (samples per rank) a graph-timed size gets where its iterations allow

GATE_START_US = 200.0  #: the first gate: several eager torch.distributed launches (20-45 us each on H100 hosts)
GATE_MARGIN = 2.0  #: the gate is kept at least this many times the longest launch seen behind it
GATE_MAX_US = 5000.0  #: the longest gate: a launch slower than this is counted, not waited for
SPIN_CALIBRATION_CYCLES = 1_000_000  #: GPU clock cycles of the spin timed once to convert us to cycles


class LaunchGate:
    """A device spin that keeps the GPU busy while the host launches the call timed after it.

    ``hold()`` enqueues ``torch.cuda._sleep`` for about ``gate_us`` (cycles from one timing of the spin with CUDA
    events, ``ready()``); ``saw(launch_us)`` lengthens the gate to ``GATE_MARGIN`` times a launch that took more
    than half of it (at most ``GATE_MAX_US``). Whether a launch was covered is judged afterwards from the events:
    the spin cannot start before the host enqueued it, so a call whose host time from that enqueue to the call's
    return is below the spin's measured length was launched before its start event fired."""

    def __init__(self, torch):
        self.torch = torch
        self.spin = getattr(torch.cuda, "_sleep", None)
        self.gate_us = GATE_START_US
        self.cycles_per_us: float | None = None

    @property
    def usable(self) -> bool:
        return self.spin is not None

    def ready(self) -> None:
        """Time the spin once (the device synchronised): cycles per microsecond."""
        if self.cycles_per_us is None:
            Event = self.torch.cuda.Event
            a, b = Event(enable_timing=True), Event(enable_timing=True)
            self.torch.cuda.synchronize()
            a.record()
            self.spin(SPIN_CALIBRATION_CYCLES)
            b.record()
            b.synchronize()
            self.cycles_per_us = SPIN_CALIBRATION_CYCLES / max(a.elapsed_time(b) * 1e3, 1e-3)

    def hold(self) -> None:
        """Enqueue the spin: the GPU stays busy for about ``gate_us``."""
        self.spin(max(1, int(self.gate_us * self.cycles_per_us)))

    def saw(self, launch_us: float) -> None:
        """A launch of ``launch_us`` happened behind the gate: lengthen the gate for the next ones if needed."""
        if launch_us * GATE_MARGIN > self.gate_us:
            self.gate_us = min(GATE_MAX_US, launch_us * GATE_MARGIN)


def ungated_samples(launch_us: np.ndarray, spins_us: np.ndarray) -> int:
    """Samples whose host launch (from the spin's enqueue to the call's return, us) lasted at least as long as the
    spin before their start event (us, from the events): their start event may have fired before the launch ended."""
    return int(np.count_nonzero(np.asarray(launch_us) >= np.asarray(spins_us)))


class CudaEventLoop(LoopBase):
    """The Python loop timed with CUDA events on the current stream (torch, --device cuda).

    ``gated``: the calls only enqueue work (NCCL), so a device spin may hold the start events while the host
    launches (``LaunchGate``); a backend whose calls wait on the host (gloo) is not gated."""

    call_path = "torch"
    timer = last_timer = "cuda_events"

    def __init__(self, gated: bool = False, torch=None):
        if torch is None:
            import torch
        self.torch = torch
        gate = LaunchGate(torch) if gated else None
        self.gate = gate if gate is not None and gate.usable else None

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
        self._hold_first(iters)
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

    def _hold_first(self, iters: int) -> None:
        """Before a lean loop of several calls: the gate, so that the first events do not fire on an idle GPU. A
        single call (a first call) is never gated: everything it costs the host belongs to it."""
        if self.gate is not None and iters > 1:
            self.gate.ready()
            self.gate.hold()

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
        ``divide``); ``call_for(i)`` is asked before the flush and the barrier, outside the timing.

        Gated (NCCL): the start event waits behind the gate while the host launches; ``launch`` then says the
        median gate, the median host launch per call and how many samples began before their launch ended. Not
        gated: the median host launch per call beside the device time."""
        torch, gate, clock = self.torch, self.gate, time.perf_counter_ns
        Event = torch.cuda.Event
        marks = [(Event(enable_timing=True), Event(enable_timing=True), Event(enable_timing=True))
                 for _ in range(iters)]
        covered_ns = np.zeros(iters, dtype=np.int64)  # from the gate's enqueue to the call's return
        call_ns = np.zeros(iters, dtype=np.int64)  # the call alone
        torch.cuda.synchronize()
        if gate is not None:
            gate.ready()
        for i, (held, begin, end) in enumerate(marks):
            call = call_for(i)
            if flush is not None:
                flush(i)
            if barrier is not None:
                barrier()  # synchronises the device first
            t0 = clock()
            if gate is not None:
                held.record()
                gate.hold()
            begin.record()
            t1 = clock()
            call()
            t2 = clock()
            end.record()
            covered_ns[i], call_ns[i] = t2 - t0, t2 - t1
            if gate is not None:
                gate.saw((t2 - t0) / 1e3)
        torch.cuda.synchronize()
        durations = _ns([begin.elapsed_time(end) / divide for _, begin, end in marks])
        host_us = float(np.median(call_ns)) / 1e3 / divide
        if gate is None:
            self.launch = LaunchFacts(host_us, float(durations.mean()) / 1e3, samples=iters)
        else:
            spins_us = np.array([held.elapsed_time(begin) * 1e3 for held, begin, _ in marks])
            self.launch = LaunchFacts(host_us, float(durations.mean()) / 1e3, float(np.median(spins_us)),
                                      ungated_samples(covered_ns / 1e3, spins_us), iters)
        return durations


def _ns(milliseconds) -> np.ndarray:
    return np.round(np.asarray(milliseconds, dtype=np.float64) * 1e6).astype(np.int64)


@dataclass(frozen=True)
class GraphSchedule:
    """Which graphs the timed iterations replay, in order.

    Each graph is keyed (first slot, iterations it holds); replay r of the lean loop runs G consecutive
    iterations from slot start + r G, so a cold pool's slots keep rotating (a warm run has one slot, hence one
    graph). G divides the iterations, so the replays time exactly the iterations recorded. The lean replays
    follow one untimed ``lead`` replay of the G slots before ``start`` (the warmup's last ones, which the timed
    replays reach last if at all), so a cold pool stays cold. With ``each`` (--check, --sync barrier, --flush)
    every iteration replays a one-call graph of its own slot, after its own barrier, and there is no lead."""

    iterations_per_replay: int
    replays: list[tuple[int, int]]  #: the key of each replay, in order
    lead: tuple[int, int] | None = None  #: the key of the untimed replay before the first timed one

    @property
    def graphs(self) -> list[tuple[int, int]]:
        """The distinct graphs to capture, in first-use order."""
        return list(dict.fromkeys(([self.lead] if self.lead else []) + self.replays))


def iterations_per_replay(iterations: int) -> int:
    """G: the largest divisor of ``iterations`` that is at most GRAPH_ITERATIONS and leaves MIN_REPLAYS replays
    (1 when the iterations are fewer)."""
    cap = max(1, min(GRAPH_ITERATIONS, iterations // MIN_REPLAYS))
    return next(g for g in range(cap, 0, -1) if iterations % g == 0)


def graph_schedule(iterations: int, start: int, nslots: int, each: bool) -> GraphSchedule:
    """The replays of ``iterations`` timed iterations from slot ``start`` of ``nslots`` (see GraphSchedule)."""
    if each:
        return GraphSchedule(1, [((start + i) % nslots, 1) for i in range(iterations)])
    per = iterations_per_replay(iterations)
    return GraphSchedule(per, [((start + r * per) % nslots, per) for r in range(iterations // per)],
                         ((start - per) % nslots, per))


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
    start. Lean loop: behind the gate, the untimed lead replay, then iterations / G replays, one sample each (its
    time / G); the host's launch time per replay (first LAUNCH_PROBE_CALLS) is recorded beside the device's.
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
        count = iters // per
        lead = schedule.lead if calls.next_replay == 0 else None
        keys = schedule.replays[calls.next_replay:calls.next_replay + count]
        calls.next_replay += count
        if barrier is None and flush is None:
            durations = self._lean_replays([calls.graphs[k].replay for k in keys],
                                           calls.graphs[lead].replay if lead else None, per)
        else:
            durations = self.paired(count, lambda i: calls.graphs[keys[i]].replay, barrier, flush, divide=per)
        self.graph = GraphDetails(per, self.graph.replays + count, len(schedule.graphs))
        return durations

    def _lean_replays(self, replays: list[Callable[[], None]], lead: Callable[[], None] | None,
                      per: int) -> np.ndarray:
        """The replays back to back, each between its own events (ns per iteration: replay time / ``per``), behind
        the gate and the untimed ``lead`` replay."""
        torch = self.torch
        Event = torch.cuda.Event
        pairs = [(Event(enable_timing=True), Event(enable_timing=True)) for _ in replays]
        torch.cuda.synchronize()
        self._hold_first(2)
        if lead is not None:
            lead()
        probe = min(len(replays), LAUNCH_PROBE_CALLS)
        host_start = time.perf_counter_ns()
        for i, (begin, end) in enumerate(pairs):
            begin.record()
            replays[i]()
            end.record()
            if i + 1 == probe:
                host_ns = time.perf_counter_ns() - host_start
        torch.cuda.synchronize()
        durations = _ns([begin.elapsed_time(end) / per for begin, end in pairs])
        self.launch = LaunchFacts(host_ns / probe / 1e3 / per, float(durations.mean()) / 1e3)
        return durations

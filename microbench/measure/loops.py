"""The timed loop: one interface for every implementation, and the loop in Python.

Implementations: ``PythonLoop`` (here: pre-bound mpi4py or torch.distributed calls), ``ShimPythonLoop``
and ``NativeLoop`` (microbench.measure.native: the Python loop over the C call shim, and the loop in C), and
``CudaEventLoop`` / ``CudaGraphLoop`` (microbench.measure.gpu_loops). The engine and the records see them only
through ``TimedLoop``.

Timing, on the host clock of ``clock.py``: in the lean loop one clock read separates consecutive iterations,
so iteration i's time is t[i+1] - t[i] and nothing else runs between calls. With a barrier or a cache flush
before each iteration (``--sync barrier``, ``--flush``) both ends of each call are read around it.

Non-blocking collectives: ``run`` times post + wait back to back (t_pure); ``run_overlap`` times each part of
the overlapped iteration apart (post, compute in chunks with a completion test after each, wait), as
``OVERLAP_PARTS`` in ns; ``time_compute`` times the compute alone through the same path, for its
calibration (microbench.measure.overlap).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from microbench.measure.clock import HOST_CLOCK, now_ns

_STAMP_PREFILL = 1 << 40  #: stand-in stamps of the same int size as perf_counter_ns values
#: the columns of ``run_overlap``: post to end of wait; post; compute (tests taken out); tests; wait
OVERLAP_PARTS = ("overall", "post", "compute", "test", "wait")


@dataclass(frozen=True)
class OverlapWork:
    """The compute of an overlapped iteration: ``chunks`` runs of ``units`` units of ``kernel``, each
    followed by a completion test when ``tests`` is set (--num-tests K: K chunks, K tests)."""

    kernel: Any  #: compute_kernels.HostKernel (or the CUDA GEMM), with compute(units)
    units: int
    chunks: int
    tests: bool


@dataclass(frozen=True)
class GraphDetails:
    """How a CUDA-graph-timed size was replayed: iterations captured per graph, replays timed, graphs captured."""

    iterations_per_replay: int
    replays: int
    graphs: int = 1


#: host launch time at or above this share of the device time per call: the GPU waited for the host
LAUNCH_BOUND_SHARE = 0.9
#: paired timing (--sync barrier, --flush, --check): more than this share of the samples began before the host
#: had launched their call (the launch outlasted the gate), so the tail from p99 on holds host launch time
UNGATED_BOUND_SHARE = 0.01
#: paired timing without a gate (calls that wait on the host): every sample holds its launch; launch-bound when the
#: launch is at least this share of the sample
PAIRED_BOUND_SHARE = 0.5


#: what a result marked launch-bound means, and what to do, wherever a person reads one (table, check, compare, report)
LAUNCH_BOUND_ADVICE = ("launch-bound: the host's launch rate (torch.distributed's per-call cost), not the collective, "
                       "set these samples; --cuda-graph times the device")


@dataclass(frozen=True)
class LaunchFacts:
    """CUDA-event timing: the host's time to launch each call beside the device time the events saw.

    Lean loop: when the host needs about as long to launch a call as the device needs to run it, the device
    waits for the host between calls and the samples measure the launch rate, not the collective. Paired loop
    (``samples`` set): with a gate (``gate_us``), each call's start event waits behind a device spin while the host
    launches the call; ``ungated`` samples began before their launch ended (so they hold host time), and more than
    ``UNGATED_BOUND_SHARE`` of them make the result launch-bound. Without one (calls that wait on the host), every
    sample holds its launch: launch-bound when that is at least ``PAIRED_BOUND_SHARE`` of it."""

    host_us_per_call: float
    device_us_per_call: float
    gate_us: float | None = None  #: paired, gated: the median gate the start events waited behind (us)
    ungated: int | None = None  #: paired, gated: samples whose launch outlasted their gate
    samples: int | None = None  #: paired: samples timed

    @property
    def bound(self) -> bool:
        if self.gate_us is not None:
            return (self.ungated or 0) > UNGATED_BOUND_SHARE * (self.samples or 0)
        share = PAIRED_BOUND_SHARE if self.samples is not None else LAUNCH_BOUND_SHARE
        return self.host_us_per_call >= share * self.device_us_per_call

    @property
    def share(self) -> float:
        """How much the host's launches weigh on the samples: the host's share of the device time, or the share of
        ungated samples (gated); the slowest rank's facts are the largest share's."""
        if self.gate_us is not None:
            return (self.ungated or 0) / max(self.samples or 0, 1)
        return self.host_us_per_call / self.device_us_per_call if self.device_us_per_call else 0.0


class TimedLoop(Protocol):
    """What the engine calls and what the records say about the loop that produced a result."""

    #: where the timed loop runs: "native" (C) or "python"
    kind: str
    #: how each iteration reaches the transport: native, shim (C call shim), mpi4py or torch
    call_path: str
    #: the clock of the lean loop: host (CLOCK_MONOTONIC), tsc, cuda_events or cuda_graph
    timer: str
    #: the clock behind the latest ``run``'s durations (a loop may fall back to the host clock)
    last_timer: str
    #: CUDA graph replay details of the latest timed run, None when no graph was replayed
    graph: GraphDetails | None
    #: CUDA-event timing of the latest run: host launch against device time (and the paired loop's gate); None
    #: elsewhere
    launch: LaunchFacts | None
    #: the loop must be told where the timed iterations begin (``begin_timed``), so warmup runs apart
    separate_warmup: bool
    #: ``begin_timed`` runs the timed iterations' own slots once (an untimed graph replay): under cold cache the
    #: engine flushes again after it
    runs_timed_slots_before: bool

    def prepare(self, calls: Sequence) -> Any:
        """Once per size: the loop's own form of the per-slot calls."""

    def begin_timed(self, prepared: Any, iterations: int, start: int, each: bool) -> None:
        """Called once before the barrier that starts ``iterations`` timed iterations from call ``start``
        (``each``: they will run one at a time); CUDA graphs capture them here."""

    def run(self, prepared: Any, iters: int, start: int = 0, barrier: Callable[[], None] | None = None,
            flush: Callable[[int], None] | None = None) -> np.ndarray:
        """``iters`` iterations, iteration i on call ``(start + i) % ncalls``; each one's duration in ns."""

    def run_overlap(self, prepared: Any, iters: int, work: OverlapWork, start: int = 0,
                    barrier: Callable[[], None] | None = None, flush: Callable[[int], None] | None = None
                    ) -> np.ndarray:
        """Non-blocking calls only: ``iters`` overlapped iterations, (iters, 5) durations in ns (OVERLAP_PARTS)."""

    def time_compute(self, kernel: Any, units: int, chunks: int, reps: int) -> np.ndarray:
        """``reps`` runs of the compute alone (``chunks`` x ``units`` units), as this loop calls it (ns each)."""

    def kernel_library(self) -> Any:
        """The ctypes library the host compute kernels run from in this loop."""

    def label(self) -> str:
        """The loop as the table header names it."""

    def describe_timer(self) -> str:
        """The run record's description of the clock behind the samples."""


class LoopBase:
    """Defaults every loop shares (no graphs, no timed-phase hook, host clock)."""

    kind = "python"
    call_path = "mpi4py"
    timer = "host"
    ns_per_tick = 0.0
    last_timer = "host"
    graph: GraphDetails | None = None
    launch: LaunchFacts | None = None
    separate_warmup = False
    runs_timed_slots_before = False

    def begin_timed(self, prepared: Any, iterations: int, start: int, each: bool) -> None:
        return None

    def kernel_library(self) -> Any:
        from microbench.measure.compute_kernels import standalone_library

        return standalone_library()

    def time_compute(self, kernel: Any, units: int, chunks: int, reps: int) -> np.ndarray:
        return kernel.time_from_python(units, chunks, reps)

    def label(self) -> str:
        names = {"shim": "python (calls through microbench's C shim)", "mpi4py": "python (calls through mpi4py)"}
        return names.get(self.call_path, self.kind)

    def describe_timer(self) -> str:
        if self.timer == "host":
            return HOST_CLOCK
        if self.timer == "tsc":
            return (f"TSC in the lean {self.call_path} loop ({self.ns_per_tick:.6f} ns/tick against "
                    f"CLOCK_MONOTONIC), CLOCK_MONOTONIC elsewhere")
        return f"CUDA events ({self.timer})"


def call_sequence(calls: Sequence, iters: int, start: int):
    """(the one call, None) when iterations ``start..start+iters-1`` all use the same call, else (None, an
    iterator over their calls) rotated here, before any clock read, so the timed loop skips nothing."""
    ncalls = len(calls)
    first = start % ncalls
    if ncalls == 1 or iters == 1:
        return calls[first], None
    return None, itertools.islice(itertools.cycle(calls[first:] + calls[:first]), iters)


def timed_each(calls: Sequence, iters: int, start: int, barrier, flush) -> np.ndarray:
    """Each iteration timed on its own, after an optional flush and barrier outside the timing (ns)."""
    clock = now_ns
    ncalls = len(calls)
    out = np.empty(iters, dtype=np.int64)
    out.fill(0)  # touch every page before timing
    for i in range(iters):
        call = calls[(start + i) % ncalls]
        if flush is not None:
            flush(i)
        if barrier is not None:
            barrier()
        t0 = clock()
        call()
        out[i] = clock() - t0
    return out


class PythonLoop(LoopBase):
    """The timed loop in Python over pre-bound callables (mpi4py or torch.distributed calls)."""

    def __init__(self, call_path: str = "mpi4py"):
        self.call_path = call_path

    def prepare(self, calls: Sequence[Callable[[], None]]) -> list:
        return list(calls)

    def run(self, calls: list, iters: int, start: int = 0, barrier: Callable[[], None] | None = None,
            flush=None) -> np.ndarray:
        if iters <= 0:
            return np.empty(0, dtype=np.int64)
        if barrier is not None or flush is not None:
            return timed_each(calls, iters, start, barrier, flush)
        clock = now_ns
        # One int object per stamp, allocated here: each stamp the loop stores then frees one of these
        # and the next clock read reuses its memory, so the timed loop touches no fresh page (a list of
        # zeros would grow the allocator's arenas inside the loop: about 80 page faults per 10000).
        stamps = list(range(_STAMP_PREFILL, _STAMP_PREFILL + iters + 1))
        single, sequence = call_sequence(calls, iters, start)
        stamps[0] = clock()
        if single is not None:
            for i in range(1, iters + 1):
                single()
                stamps[i] = clock()
        else:
            for i, call in enumerate(sequence, 1):
                call()
                stamps[i] = clock()
        return np.diff(np.asarray(stamps, dtype=np.int64))

    def parts(self, prepared: list) -> list:
        """(post, test, wait) of each non-blocking call (backends.nonblocking.NonBlocking)."""
        return [call.parts() for call in prepared]

    def run_overlap(self, prepared: list, iters: int, work: OverlapWork, start: int = 0, barrier=None,
                    flush=None) -> np.ndarray:
        return overlapped_parts(self.parts(prepared), iters, work, start, barrier, flush)


def overlapped_parts(parts: Sequence, iters: int, work: OverlapWork, start: int, barrier, flush) -> np.ndarray:
    """The Python loop's overlapped iterations over (post, test, wait) triples: (iters, 5) ns, OVERLAP_PARTS."""
    clock = now_ns
    out = np.zeros((max(iters, 0), len(OVERLAP_PARTS)), dtype=np.int64)
    compute, units, chunks, tests = work.kernel.compute, work.units, work.chunks, work.tests
    for i in range(iters):
        post, test, wait = parts[(start + i) % len(parts)]
        if flush is not None:
            flush(i)
        if barrier is not None:
            barrier()
        t0 = clock()
        handle = post()
        t1 = clock()
        tested = 0
        for _ in range(chunks):
            compute(units)
            if tests:
                a = clock()
                test(handle)
                tested += clock() - a
        t2 = clock()
        wait(handle)
        t3 = clock()
        out[i] = (t3 - t0, t1 - t0, t2 - t1 - tested, tested, t3 - t2)
    return out

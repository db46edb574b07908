"""Stand-ins for CUDA on a machine without a GPU, for the tests of the GPU paths' logic (tests/test_gpu_fakes.py).

``SimulatedCuda`` is a ``torch`` as far as microbench's GPU loops use it: one stream on a simulated GPU whose work
starts when both the GPU is free and the host has enqueued it, CUDA events that fire when the GPU reaches them,
``torch.cuda._sleep`` (a spin of a number of GPU cycles), CUDA graphs that record calls and replay them, and a
host clock the loops read through ``time.perf_counter_ns`` (patched by the tests). Calls made with ``call`` cost
host time to launch and device time to run, as an eager torch.distributed call on NCCL does. Nothing here touches
a transport: the collectives themselves are real in every other test.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

CYCLES_PER_NS = 2.0  #: the simulated GPU's clock (2 GHz)


class SimulatedCuda:
    """A torch module with a simulated CUDA device (see the module docstring); ``log`` lists what happened."""

    def __init__(self):
        self.host_ns = 0
        self.gpu_free_ns = 0
        self.log: list[tuple] = []
        self.capturing = None
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.at = None

            def record(self):
                self.at = max(sim.gpu_free_ns, sim.host_ns)
                sim.log.append(("event", self.at))

            def elapsed_time(self, other) -> float:
                return (other.at - self.at) / 1e6  # ms, as torch

            def synchronize(self):
                sim.host_ns = max(sim.host_ns, self.at)

        class CUDAGraph:
            def __init__(self):
                self.device_ns: list[int] = []

            def replay(self):
                sim.host_ns += 3_000  # a graph launch: about 3 us of host time
                sim.enqueue(sum(self.device_ns), ("replay", id(self)))

        @contextlib.contextmanager
        def graph(g, stream=None):
            sim.capturing = g
            try:
                yield
            finally:
                sim.capturing = None

        class Stream:
            def wait_stream(self, other):
                pass

            def synchronize(self):
                sim.log.append(("stream sync",))
                sim.host_ns = max(sim.host_ns, sim.gpu_free_ns)

        self.cuda = SimpleNamespace(Event=Event, CUDAGraph=CUDAGraph, graph=graph, Stream=Stream,
                                    current_stream=lambda: Stream(), synchronize=self.synchronize,
                                    _sleep=self.sleep, empty_cache=lambda: self.log.append(("empty_cache",)))
        self.time = SimpleNamespace(perf_counter_ns=lambda: self.host_ns)

    def synchronize(self):
        self.log.append(("device sync",))
        self.host_ns = max(self.host_ns, self.gpu_free_ns)

    def enqueue(self, device_ns: int, what: tuple) -> None:
        """Work the host has just launched: it starts when the GPU is free and the host has enqueued it."""
        start = max(self.gpu_free_ns, self.host_ns)
        self.gpu_free_ns = start + device_ns
        self.log.append((*what, start))

    def sleep(self, cycles: int) -> None:
        self.enqueue(round(cycles / CYCLES_PER_NS), ("spin", cycles))

    def call(self, launch_ns: int, device_ns: int, name: str = "call"):
        """A collective that costs ``launch_ns`` of host time to launch and ``device_ns`` on the GPU."""
        def run():
            if self.capturing is not None:
                self.capturing.device_ns.append(device_ns)
                return
            self.host_ns += launch_ns
            self.enqueue(device_ns, (name,))
        return run

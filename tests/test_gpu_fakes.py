"""The GPU paths' fixes held by tests on a machine without a GPU (issue 44), through fakes where CUDA would be.

Each test fails when its fix is reverted: the simulated CUDA device of ``fakes_cuda`` (the gate of paired timing,
the lead replay of graphs), fake torch and cupy modules behind the real device selection, a fake NCCL whose
``new_group`` fails as NCCL does on two ranks of one GPU (the refusal's order, on 2 real MPI ranks), a fake
``torch.distributed`` that records the warm-up exchanges, and the real sweep on real MPI ranks with the GPU
loop's launch facts standing in. The GPU runs themselves are test_torch.py's (skipped without a GPU) and
scripts/gpu_node_checks.py's.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import mpiexec_prefix, run_process
from fakes_cuda import CYCLES_PER_NS, SimulatedCuda
from microbench.errors import UsageError
from microbench.measure import device, gpu_loops


# ------------------------------------------------------------------------------ paired timing: the gate
@pytest.fixture
def sim(monkeypatch):
    s = SimulatedCuda()
    monkeypatch.setattr(gpu_loops, "time", s.time)
    return s


def _barrier(sim):
    return lambda: sim.synchronize()


def test_the_gate_keeps_the_hosts_launch_out_of_paired_samples(sim):
    # an eager NCCL call: 50 us to launch on the host, 10 us on the GPU; each sample after its own barrier
    loop = gpu_loops.CudaEventLoop(gated=True, torch=sim)
    call = sim.call(launch_ns=50_000, device_ns=10_000)
    samples = loop.paired(20, lambda i: call, barrier=_barrier(sim))
    assert samples.tolist() == [10_000] * 20  # the device's time alone: the start event waited behind the gate
    launch = loop.launch
    assert launch.gate_us == pytest.approx(gpu_loops.GATE_START_US, rel=1e-3) and launch.ungated == 0
    assert launch.samples == 20 and not launch.bound and launch.host_us_per_call == 50.0
    order = [e[0] for e in sim.log if e[0] in ("spin", "event", "call")]
    assert order[-5:] == ["event", "spin", "event", "call", "event"]  # gate mark, spin, start, the call, end


def test_without_the_gate_paired_samples_hold_the_launch_and_say_so(sim):
    loop = gpu_loops.CudaEventLoop(gated=False, torch=sim)  # gloo: calls that wait on the host are not gated
    samples = loop.paired(10, lambda i: sim.call(50_000, 10_000), barrier=_barrier(sim))
    assert samples.tolist() == [60_000] * 10  # launch on an idle GPU, then the call
    assert loop.launch.gate_us is None and loop.launch.bound  # the lean rule: host 50 us >= 0.9 x device 60 us


def test_a_launch_longer_than_the_gate_is_counted_and_the_gate_grows(sim):
    loop = gpu_loops.CudaEventLoop(gated=True, torch=sim)
    samples = loop.paired(20, lambda i: sim.call(300_000, 10_000), barrier=_barrier(sim))
    # the first launch (300 us) outlasted the first gate (200 us): its sample holds 100 us of it; the gate then
    # grew to twice the launch and covered every later one
    assert samples[0] == 110_000 and samples[1:].tolist() == [10_000] * 19
    assert loop.launch.ungated == 1 and loop.launch.bound  # 1 of 20 is more than 1 %
    assert loop.gate.gate_us == pytest.approx(600.0)


def test_the_spin_is_converted_with_the_gpus_measured_clock(sim):
    loop = gpu_loops.CudaEventLoop(gated=True, torch=sim)
    loop.paired(1, lambda i: sim.call(1_000, 1_000), barrier=_barrier(sim))
    assert loop.gate.cycles_per_us == pytest.approx(CYCLES_PER_NS * 1e3)
    spins = [e for e in sim.log if e[0] == "spin"]
    assert spins[-1][1] == int(gpu_loops.GATE_START_US * CYCLES_PER_NS * 1e3)


def test_ungated_samples_are_those_whose_launch_reached_the_spins_end():
    assert gpu_loops.ungated_samples(np.array([10.0, 250.0, 200.0]), np.array([200.0, 200.0, 200.0])) == 2


def test_a_lean_loop_of_several_calls_starts_behind_the_gate_and_a_first_call_does_not(sim):
    loop = gpu_loops.CudaEventLoop(gated=True, torch=sim)
    calls = [sim.call(20_000, 30_000)]
    first = loop.run(calls, 1)
    assert first.tolist() == [50_000]  # a first call keeps everything it costs the host
    samples = loop.run(calls, 8)
    assert samples.tolist() == [30_000] * 8  # device-bound: the host (20 us) keeps ahead of the GPU (30 us)
    assert not loop.launch.bound


# ------------------------------------------------------------------------------ graphs: lead replay, G
def test_graph_replays_time_exactly_the_iterations_recorded():
    for iterations in (37, 200, 1000, 999, 7):
        s = gpu_loops.graph_schedule(iterations, start=0, nslots=1, each=False)
        assert s.iterations_per_replay * len(s.replays) == iterations
        assert len(s.replays) >= min(iterations, gpu_loops.MIN_REPLAYS)


def test_the_lead_replay_uses_the_slots_before_the_timed_ones():
    s = gpu_loops.graph_schedule(100, start=2, nslots=7, each=False)
    per = s.iterations_per_replay
    assert s.lead == ((2 - per) % 7, per) and s.graphs[0] == s.lead
    assert gpu_loops.graph_schedule(5, start=4, nslots=3, each=True).lead is None  # per-iteration barriers


def _graph_loop(sim, iterations: int, nslots: int = 1, start: int = 0):
    loop = gpu_loops.CudaGraphLoop(gated=True, torch=sim)
    prepared = loop.prepare([sim.call(40_000, 2_000, f"slot {k}") for k in range(nslots)])
    loop.begin_timed(prepared, iterations, start, each=False)
    return loop, prepared


def test_lean_graph_replays_start_after_an_untimed_lead_replay(sim):
    loop, prepared = _graph_loop(sim, 100)
    loop.gate.ready()  # the spin timed once (its own events)
    sim.log.clear()
    samples = loop.run(prepared, 100)
    per = prepared.schedule.iterations_per_replay
    assert len(samples) == 100 // per and loop.graph.replays == 100 // per
    first_event = next(i for i, e in enumerate(sim.log) if e[0] == "event")
    assert [e[0] for e in sim.log[:first_event]] == ["device sync", "spin", "replay"]  # gate, then the lead
    assert samples.tolist() == [2_000] * len(samples)  # the first replay is no outlier
    assert not loop.launch.bound  # 3 us of host per replay of 2 x 2 us of device time


def test_paired_graph_replays_are_gated_too(sim):
    loop = gpu_loops.CudaGraphLoop(gated=True, torch=sim)
    prepared = loop.prepare([sim.call(40_000, 2_000)])
    loop.begin_timed(prepared, 5, 0, each=True)
    samples = loop.run(prepared, 5, barrier=_barrier(sim))
    assert samples.tolist() == [2_000] * 5 and loop.launch.gate_us is not None and loop.launch.ungated == 0


# ------------------------------------------------------------------------------ the device: memory, context, ROCm
class _FakeTorchTensors:
    """Enough of torch for DevicePool and DeviceFlush on "cuda": zeros/empty, and a count of empty_cache."""

    def __init__(self):
        self.emptied = 0
        import torch as real

        self.real = real
        self.uint8, self.float32 = real.uint8, real.float32
        self.cuda = SimpleNamespace(empty_cache=self._empty_cache, synchronize=lambda: None)

    def _empty_cache(self):
        self.emptied += 1

    def zeros(self, n, dtype=None, device=None):
        return self.real.zeros(n, dtype=dtype)

    def empty(self, n, dtype=None, device=None):
        return self.real.empty(n, dtype=dtype)


def test_device_memory_is_given_back_when_a_size_closes(monkeypatch):
    pytest.importorskip("torch")
    from microbench.measure.buffers import BufferPool

    fake = _FakeTorchTensors()
    monkeypatch.setitem(sys.modules, "torch", fake)
    pool = device.DevicePool(BufferPool(4, 4, np.dtype(np.float32), nslots=2), "cuda", "torch", fake.float32)
    flush = device.DeviceFlush(1 << 10, "torch")
    flush.close()
    assert fake.emptied == 1  # the flush buffer's memory too (it used to be closed after the pool's release)
    pool.close()
    assert fake.emptied == 2 and pool.device_slots == []


def test_the_sweep_closes_the_flush_before_the_pool():
    import inspect

    from microbench.run import sweep

    source = inspect.getsource(sweep.measure_pass)
    assert source.index("flush.close()") < source.index("pool.close()")


def test_nccl_gets_its_reserve_of_gpu_memory(monkeypatch):
    from microbench.run import preflight

    monkeypatch.setattr(device, "free_device_bytes", lambda kind, index: 80 << 30)
    choice = device.DeviceChoice("cuda", "torch", 0, "H100", 8, 50 << 20, "GPU-a", True, "0000:18:00.0", "cuda")
    gpus = [{"host": "n0", "uuid": "GPU-a", "bus_id": None, "index": 0}]
    nccl = SimpleNamespace(device=choice, gpus=gpus, torch_meta={"backend": "nccl"}, cache_bytes=50 << 20)
    gloo = SimpleNamespace(device=choice, gpus=gpus, torch_meta={"backend": "gloo"}, cache_bytes=50 << 20)
    monkeypatch.setattr(preflight.platform, "node", lambda: "n0")
    assert preflight.device_space(nccl).reserved_bytes == preflight.NCCL_RESERVE_BYTES == 1 << 30
    assert preflight.device_space(gloo).reserved_bytes == 0


class _FakeRuntime:
    """The torch (or cupy) module select_device asks for the chosen GPU; ``calls`` in order."""

    def __init__(self):
        self.calls: list = []
        self.cuda = SimpleNamespace(set_device=lambda i: self.calls.append(("set_device", i)),
                                    get_device_name=lambda i: "Fake GPU")

    def empty(self, *args, **kwargs):
        self.calls.append(("empty", kwargs.get("device")))


def _fake_gpu(monkeypatch, runtime="cuda", arch=None, l2=50 << 20, count=4):
    fake = _FakeRuntime()
    monkeypatch.setattr(device, "cuda_runtime", lambda kind: (fake, count))
    monkeypatch.setattr(device, "l2_cache_bytes", lambda kind, i: l2)
    monkeypatch.setattr(device, "device_uuid", lambda kind, i: f"GPU-{i}")
    monkeypatch.setattr(device, "device_bus_id", lambda kind, i: f"0000:{i:02x}:00.0")
    monkeypatch.setattr(device, "gpu_runtime", lambda kind: runtime)
    monkeypatch.setattr(device, "gpu_arch", lambda kind, i: arch)
    return fake


def _opts(*argv: str):
    from microbench.cli import build_parser
    from microbench.options import RunOptions

    return RunOptions.from_args(build_parser(["run", *argv]).parse_args(["run", *argv]))


def test_the_chosen_gpu_gets_a_context_before_mpi_starts(monkeypatch):
    from microbench.measure.transport import select_device

    from microbench.cluster import launch

    fake = _fake_gpu(monkeypatch)
    monkeypatch.setattr(launch, "discover", lambda: SimpleNamespace(local_rank=2))
    chosen, cache = select_device(_opts("--backend", "torch", "--device", "cuda"))
    # set_device alone makes no context; the allocation on that GPU does (CUDA-aware MPIs read it at MPI_Init)
    assert fake.calls == [("set_device", 2), ("empty", "cuda:2")]
    assert chosen.index == 2 and chosen.uuid == "GPU-2" and cache == 50 << 20


def test_rocm_cold_evicts_the_infinity_cache_too(monkeypatch):
    from microbench.measure.transport import select_device

    _fake_gpu(monkeypatch, runtime="rocm", arch="gfx942", l2=4 << 20)
    chosen, cache = select_device(_opts("--backend", "torch", "--device", "cuda"))
    assert cache == (4 << 20) + (256 << 20) and chosen.runtime == "rocm"
    assert "Infinity Cache (gfx942)" in chosen.cache_from
    _fake_gpu(monkeypatch, runtime="rocm", arch="gfx1100", l2=6 << 20)  # an AMD GPU whose cache is not known here
    chosen, cache = select_device(_opts("--backend", "torch", "--device", "cuda"))
    assert cache is None and "unknown" in chosen.cache_from
    _fake_gpu(monkeypatch, runtime="rocm", arch="gfx90a", l2=8 << 20)  # MI200: no Infinity Cache
    assert select_device(_opts("--backend", "torch", "--device", "cuda"))[1] == 8 << 20


class _OneRank:
    """The control plane of a one-rank world."""

    rank, size = 0, 1

    def allreduce(self, values, op):
        return values

    def bcast(self, obj, root=0):
        return obj

    def gather(self, obj, root=0):
        return [obj]

    def reduce_to_root(self, values, op):
        return values


def _transport(cache_bytes, runtime="cuda", name="Fake GPU", backend="nccl", cache_from=None):
    choice = device.DeviceChoice("cuda", "torch", 0, name, 1, 50 << 20, "GPU-a", True, None, runtime, cache_from)
    from microbench.measure.transport import Transport

    primitives = SimpleNamespace(call_name=lambda primitive: None, in_place_only=("allreduce",),
                                 in_place_result_at_rank=True, check_dtype=lambda dtype, reduces, op: None)
    return Transport(primitives, primitives, SimpleNamespace(), choice, False, cache_bytes,
                     torch_meta={"backend": backend})


@pytest.mark.parametrize("flags", [("--cache", "cold"), ("--cache", "both"), ("--flush",)])
def test_cold_on_a_gpu_whose_cache_size_is_unknown_is_refused(flags, monkeypatch):
    from microbench.run.preflight import check_run

    monkeypatch.setattr(device, "free_device_bytes", lambda kind, index: 80 << 30)
    world = SimpleNamespace(reducer=_OneRank(), nranks=1, rank=0)
    opts = _opts("--backend", "torch", "--device", "cuda", *flags, "allreduce", "-m", "8")
    check_run(_opts("--backend", "torch", "--device", "cuda", "allreduce", "-m", "8"), world,
              SimpleNamespace(local_ranks=1), _transport(None))  # warm needs no cache size
    with pytest.raises(UsageError, match=r"^--cache .*works against the GPU's caches, whose size is unknown on Fake"):
        check_run(opts, world, SimpleNamespace(local_ranks=1), _transport(None))


def test_the_host_memory_of_a_device_run_holds_its_host_copies_sized_by_the_gpus_cache(monkeypatch):
    from microbench.errors import RunError
    from microbench.run import preflight

    opts = _opts("--backend", "torch", "--device", "cuda", "--cache", "cold", "allreduce", "-m", "1M")
    transport = _transport(64 << 20)
    from microbench.benchmarks.dtypes import DTYPES
    from microbench.benchmarks.table import COLLECTIVES
    from microbench.options import plan_size

    coll = COLLECTIVES["allreduce"]
    plan = plan_size(coll, 1 << 20, 1, DTYPES["float32"], True)
    pool_only = preflight.buffer_bytes_per_rank(opts, coll, plan, 64 << 20, holds_flush=False)
    # room for the host copies of the pool (sized against the GPU's 64 MiB), not for a flush buffer on the host
    monkeypatch.setattr(preflight.facts, "mem_available_bytes", lambda: int(pool_only / preflight.MEMORY_HEADROOM) + 1)
    preflight.validate_for_ranks(opts, 1, 1, transport)
    monkeypatch.setattr(preflight.facts, "mem_available_bytes", lambda: int(pool_only / preflight.MEMORY_HEADROOM) - 4096)
    with pytest.raises(RunError, match="on host"):
        preflight.validate_for_ranks(opts, 1, 1, transport)
    preflight.validate_for_ranks(opts, 1, 1)  # the --np parent leaves a device run's host memory to the ranks


def test_rocm_is_named_in_the_run_record_and_every_result(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    assert device.gpu_runtime("torch") == "rocm"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert device.gpu_runtime("torch") == "cuda"
    from microbench.benchmarks.dtypes import DTYPES
    from microbench.benchmarks.table import COLLECTIVES
    from microbench.cluster.world import Layout
    from microbench.options import plan_size
    from microbench.records import build
    from microbench.measure.stats import summarize

    transport = _transport(54 << 20, runtime="rocm")
    transport.loop = SimpleNamespace(describe_timer=lambda: "CUDA events")
    transport.lib, transport.thread_level, transport.gpus = None, None, []
    opts = _opts("--backend", "torch", "--device", "cuda", "allreduce", "-m", "8")
    coll = COLLECTIVES["allreduce"]
    plan = plan_size(coll, 8, 2, DTYPES["float32"], True)
    latency = summarize(np.array([10.0, 11.0, 12.0]), _OneRank())
    figures = build.Figures(latency, None, None, 3, 0, 0, 0.1)
    facts = build.LoopFacts("python", "torch", "cuda_events", None, None)
    layout = Layout(["n0", "n0"], {"n0": 2}, [])
    result = build.result_record(run_id="r1", coll=coll, plan=plan, requested=8, dtype=DTYPES["float32"],
                                 in_place=True, opts=opts, nranks=2, transport=transport, layout=layout, cache="warm",
                                 pool=None, loop=facts, figures=figures)
    assert result["device"] == "rocm"  # as the run record's device.kind, never "cuda" on a ROCm build


def test_a_rocm_open_mpi_is_asked_whether_it_moves_rocm_memory(monkeypatch):
    class Lib:
        def __init__(self, **answers):
            for name, value in answers.items():
                setattr(self, name, _answer(value))

    def _answer(value):
        f = lambda: value  # noqa: E731
        f.restype = None
        return f

    monkeypatch.delenv("MICROBENCH_ASSUME_CUDA_AWARE", raising=False)
    for lib, expected in ((Lib(MPIX_Query_cuda_support=0, MPIX_Query_rocm_support=1), True),
                          (Lib(MPIX_Query_cuda_support=0, MPIX_Query_rocm_support=0), False),
                          (Lib(MPIX_Query_cuda_support=1), True), (Lib(), None)):
        monkeypatch.setattr(device.ctypes, "CDLL", lambda path, lib=lib: lib)
        assert device.cuda_aware_mpi("libmpi.so") is expected


# ------------------------------------------------------------------------------ the sharing refusal, NCCL_HOSTID
def test_ranks_on_one_gpu_under_different_nccl_host_ids_are_not_refused():
    gpus = [{"host": "n0", "uuid": "GPU-a", "bus_id": None, "nccl_hostid": "r0"},
            {"host": "n0", "uuid": "GPU-a", "bus_id": None, "nccl_hostid": "r1"}]
    device.refuse_shared_gpus(gpus)  # NCCL takes each for a host of its own: allowed
    gpus[1]["nccl_hostid"] = "r0"
    with pytest.raises(UsageError, match=r"^ranks 0, 1 share GPU GPU-a on r0: NCCL needs one GPU per rank"):
        device.refuse_shared_gpus(gpus)
    assert device.rank_gpu("n0", 1, device.DeviceChoice("cuda", "torch", 0, None, 1, None, "GPU-a"),
                           {"NCCL_HOSTID": "r7"})["nccl_hostid"] == "r7"


FAKE_GPU = r"""
import json, os, sys, types
import torch, torch.distributed as dist
from microbench.measure import device
from microbench.cluster import torch_runtime
local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("MPI_LOCALRANKID", "0")))
shared = os.environ["FAKE_SHARED"] == "1"
fake = types.SimpleNamespace(cuda=types.SimpleNamespace(set_device=lambda i: None, get_device_name=lambda i: "Fake GPU"),
                             empty=lambda *a, **k: None)
device.cuda_runtime = lambda kind: (fake, 1 if shared else 2)
device.l2_cache_bytes = lambda kind, i: 50 << 20
device.device_uuid = lambda kind, i: f"GPU-fake-{i}"
device.device_bus_id = lambda kind, i: f"0000:{0x18 + i:02x}:00.0"
device.gpu_runtime = lambda kind: "cuda"
made = []
real_new_group = dist.new_group
def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    made.append(str(backend))
    if device_id is not None:  # NCCL makes its communicator now, and refuses two ranks on one GPU
        raise dist.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp, invalid usage, NCCL version 2.27.3\n"
                                    "ncclInvalidUsage: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000")
    return real_new_group(ranks=ranks, timeout=timeout, backend=backend)
dist.new_group = new_group
"""

REFUSED = FAKE_GPU + r"""
torch_runtime.resolve_backend = lambda name, dev: "nccl"
from microbench import cli
import atexit
atexit.register(lambda: print("groups made:", made, flush=True))
sys.exit(cli.main(["run", "--backend", "torch", "--device", "cuda", "allreduce", "-m", "8"]))
"""


def _two_ranks(script: str, **env) -> object:
    pytest.importorskip("torch")
    cmd, extra = mpiexec_prefix(2)
    return run_process([*cmd, sys.executable, "-c", script], env={**extra, **env}, timeout=180)


def test_two_ranks_on_one_gpu_are_refused_in_one_line_before_any_communicator():
    proc = _two_ranks(REFUSED, FAKE_SHARED="1")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert proc.returncode == 2, proc.output
    assert errors == ["microbench: error: ranks 0, 1 share GPU GPU-fake-0 on " + errors[0].split(" on ")[-1]], proc.output
    assert "NCCL needs one GPU per rank" in errors[0] and "Duplicate GPU" not in proc.output
    assert "Traceback" not in proc.output
    assert all("nccl" not in line for line in proc.stdout.splitlines() if line.startswith("groups made:")), proc.stdout


REPLAY_REFUSED = FAKE_GPU + r"""
torch_runtime.resolve_backend = lambda name, dev: "nccl"
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.set_device = lambda i: None
from microbench import cli
import atexit
atexit.register(lambda: print("groups made:", made, flush=True))
sys.exit(cli.main(["replay", "--backend", "torch", "--device", "cuda", "--hidden", "64", "--layers", "1",
                   "--heads", "2", "--seq", "16", "--scheme", "ddp", "--dp", "2"]))
"""


def test_the_replay_refuses_two_ranks_on_one_gpu_before_any_communicator():
    proc = _two_ranks(REPLAY_REFUSED, FAKE_SHARED="1")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert proc.returncode == 2, proc.output
    assert len(errors) == 1 and "share GPU GPU-fake-0" in errors[0] and "NCCL needs one GPU per rank" in errors[0]
    assert "Duplicate GPU" not in proc.output and "Traceback" not in proc.output
    assert all("nccl" not in line for line in proc.stdout.splitlines() if line.startswith("groups made:")), proc.stdout


RECORDED = FAKE_GPU + r"""
from microbench.cli import build_parser
from microbench.cluster import facts
from microbench.cluster.world import gather_layout, init_world
from microbench.measure.transport import open_transport, select_device
from microbench.options import RunOptions
from microbench.records import build
argv = ["run", "--backend", "torch", "--device", "cuda", "--torch-backend", "gloo", "allreduce", "-m", "8"]
opts = RunOptions.from_args(build_parser(argv).parse_args(argv))
selected = select_device(opts)
world = init_world()
transport = open_transport(world, opts, selected)
layout = gather_layout(world.reducer, facts.versions(), "")
record = build.run_record("r1", argv, opts, world.nranks, layout, transport)
print(f"rank {world.rank} gated {transport.loop.gate is not None}", flush=True)
if world.rank == 0:
    print("DEVICE " + json.dumps(record["device"]), flush=True)
"""


def test_every_ranks_gpu_is_in_the_run_record():
    proc = _two_ranks(RECORDED, FAKE_SHARED="0", NCCL_HOSTID="")
    assert proc.returncode == 0, proc.output
    line = next(l for l in proc.stdout.splitlines() if l.startswith("DEVICE "))
    ranks = json.loads(line[len("DEVICE "):])["ranks"]
    assert [(g["local_rank"], g["index"], g["uuid"], g["bus_id"]) for g in ranks] == [
        (0, 0, "GPU-fake-0", "0000:18:00.0"), (1, 1, "GPU-fake-1", "0000:19:00.0")]
    assert "rank 0 gated False" in proc.stdout  # gloo waits on the host: never gated


# ------------------------------------------------------------------------------ the sweep
LAUNCH_IN_THE_SWEEP = r"""
import json, sys
from microbench.cli import build_parser
from microbench.cluster.world import init_world
from microbench.measure.loops import LaunchFacts, PythonLoop
from microbench.measure.testhooks import FaultHooks
from microbench.options import RunOptions
from microbench.records import Output
from microbench.run import driver, sweep, watchdog
from microbench.benchmarks.table import COLLECTIVES
argv = ["run", "allreduce", "-m", "8", "-i", "5", "--loop", "mpi4py"]
opts = RunOptions.from_args(build_parser(argv).parse_args(argv))
world = init_world()
rc = driver.set_up(world, opts, FaultHooks({}), watchdog.Watchdog(watchdog.RunState(world.rank), 0, abort=world.abort))

class GpuLikeLoop(PythonLoop):  # the torch loop's launch facts, rank 1 launch-bound, rank 0 not
    def run(self, *args, **kwargs):
        self.launch = LaunchFacts(1.0, 10.0) if world.rank == 0 else LaunchFacts(9.5, 10.0)
        return super().run(*args, **kwargs)

rc.transport.loop = GpuLikeLoop("mpi4py")
seen = []
rc.out = Output(None, table=lambda kind, rec: seen.append(rec) if kind == "result" else None) if world.rank == 0 else None
sweep.run_benchmark(rc, COLLECTIVES["allreduce"])
if world.rank == 0:
    print("LAUNCH " + json.dumps(seen[0]["launch"]), flush=True)
"""


def test_the_sweep_records_the_launch_facts_of_the_slowest_rank():
    cmd, extra = mpiexec_prefix(2)
    proc = run_process([*cmd, sys.executable, "-c", LAUNCH_IN_THE_SWEEP], env=extra, timeout=180)
    assert proc.returncode == 0, proc.output
    line = next(l for l in proc.stdout.splitlines() if l.startswith("LAUNCH "))
    assert json.loads(line[len("LAUNCH "):]) == {"host_us_per_call": 9.5, "device_us_per_call": 10.0, "bound": True}


def test_cuda_aware_mpi_uses_every_cold_slot_once_before_timing(monkeypatch):
    """In this process, on a one-rank MPI: the sweep of a cold size on a transport that registers its buffers
    runs every slot once between the first call and the timed iterations (the engine's order is
    test_the_slots_are_used_once_after_the_first_call_and_before_the_cold_flush)."""
    os.environ.setdefault("OMPI_MCA_btl", "^ofi")
    os.environ.setdefault("OMPI_MCA_mtl", "^ofi")
    from microbench.benchmarks.table import COLLECTIVES
    from microbench.cluster.world import init_world
    from microbench.measure.loops import PythonLoop
    from microbench.measure.testhooks import FaultHooks
    from microbench.measure.transport import Transport
    from microbench.records import Output
    from microbench.run import driver, sweep, watchdog

    world = init_world()
    opts = _opts("allreduce", "-m", "1K", "-i", "4", "-x", "1", "--cache", "cold", "--cache-size", "64K",
                 "--loop", "mpi4py")
    rc = driver.set_up(world, opts, FaultHooks({}), watchdog.Watchdog(watchdog.RunState(0), 0, abort=world.abort))
    runs: list[int] = []

    class Recording(PythonLoop):
        def run(self, calls, iters, start=0, barrier=None, flush=None):
            runs.append(iters)
            return super().run(calls, iters, start, barrier, flush)

    rc.transport.loop = Recording("mpi4py")
    rc.out = Output(None, table=lambda kind, rec: None)
    for registers, expected in ((True, True), (False, False)):
        monkeypatch.setattr(Transport, "registers_buffers", property(lambda self, r=registers: r))
        runs.clear()
        sweep.run_benchmark(rc, COLLECTIVES["allreduce"])
        slots = sweep.plan_pool(1024, 1024, 64 << 10, 1 + 1 + 4, 1 << 40).slots
        assert (runs[:2] == [1, slots]) is expected, runs  # the first call, then every slot once


def test_the_slots_are_used_once_after_the_first_call_and_before_the_cold_flush():
    from microbench.measure import engine
    from microbench.measure.loops import PythonLoop
    from microbench.benchmarks.table import ALLREDUCE, Context
    from microbench.measure.buffers import BufferPool

    log: list = []

    class Loop(PythonLoop):
        def run(self, calls, iters, start=0, barrier=None, flush=None):
            log.append(("run", iters, start))
            return np.ones(iters, dtype=np.int64)

    pool = BufferPool(2, 2, np.dtype(np.float32), nslots=5)
    calls = [lambda: None] * 5
    settings = engine.LoopSettings(iterations=3, warmup=1, flush_before=lambda: log.append(("flush",)),
                                   touch_slots_first=True)
    engine.measure(ALLREDUCE, Context(rank=0, nranks=1), pool.slots, calls, Loop(), settings,
                   lambda: log.append(("barrier",)), lambda v: v, timing=True)
    pool.close()
    assert log[:5] == [("barrier",), ("run", 1, 0), ("barrier",), ("run", 5, 1), ("flush",)]
    assert log[6] == ("run", 4, 1)  # warmup and timed iterations go on from slot 1: the rotation is unchanged


def test_only_mpi_moving_device_buffers_itself_registers_them():
    from microbench.measure.transport import Transport

    def transport(kind, torch_meta, staged):
        choice = device.DeviceChoice(kind, "cupy" if kind == "cuda" else "numpy", 0, None, 1, None)
        return Transport(None, None, None, choice, staged, 1 << 20, torch_meta=torch_meta)

    assert transport("cuda", None, False).registers_buffers
    assert not transport("cuda", None, True).registers_buffers  # staged: MPI moves host memory
    assert not transport("cuda", {"backend": "nccl"}, False).registers_buffers  # eager NCCL registers nothing
    assert not transport("cpu", None, False).registers_buffers


# ------------------------------------------------------------------------------ torch: bw/bibw connection warm-up
class _RecordingDist:
    """torch.distributed as the torch backend's point-to-point calls use it, recording each."""

    def __init__(self):
        self.log: list = []
        self.ReduceOp = SimpleNamespace(SUM="sum", MAX="max", MIN="min")
        self.all_gather_into_tensor = self.reduce_scatter_tensor = lambda *a, **k: None

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 2

    def get_global_rank(self, group, rank):
        return rank

    def send(self, tensor, peer, group=None, tag=0):
        self.log.append(("send", peer, tag))

    def recv(self, tensor, peer, group=None, tag=0):
        self.log.append(("recv", peer, tag))

    isend, irecv = "isend", "irecv"

    def P2POp(self, op, tensor, peer, group=None, tag=0):
        return (op, peer, tag)

    def batch_isend_irecv(self, ops):
        self.log.append(("batch", tuple(op for op, _, _ in ops)))
        return [SimpleNamespace(wait=lambda: None) for _ in ops]


@pytest.mark.parametrize("benchmark", ["bw", "bibw", "latency"])
def test_point_to_point_connects_untimed_once_per_peer(monkeypatch, benchmark):
    torch = pytest.importorskip("torch")
    from microbench.measure.backends import torch_dist

    dist = _RecordingDist()
    monkeypatch.setattr(torch_dist, "import_torch", lambda: (torch, dist))
    backend = torch_dist.TorchBackend()
    send, recv, ack = torch.zeros(4), torch.zeros(4), torch.zeros(1)
    make = (lambda: backend.pingpong(send, recv, 1, True)) if benchmark == "latency" else \
        (lambda: backend.stream(send, recv, ack, 1, True, 4, benchmark == "bibw"))
    call = make()
    # before the first timed call: a send/recv pair (NCCL's two-rank communicator) and one batched pair (the
    # group communicator's connection to the peer, which bw and bibw use)
    assert dist.log == [("send", 1, 2), ("recv", 1, 2), ("batch", ("isend", "irecv"))]
    make()
    assert len(dist.log) == 3  # once per peer
    call()
    assert len(dist.log) > 3


# ------------------------------------------------------------------------------ the replay on CUDA
def test_the_replay_waits_for_the_current_stream_not_the_device():
    from microbench.replay.issue_torch import TorchIssuer, stream_settle

    sim = SimulatedCuda()
    stream_settle(sim)()
    assert sim.log == [("stream sync",)]  # not ("device sync",): other groups' posted calls keep running
    settle = TorchIssuer._settle(SimpleNamespace(cuda=True, torch=sim))
    settle()
    assert sim.log[-1] == ("stream sync",)
    assert TorchIssuer._settle(SimpleNamespace(cuda=False, torch=sim)) is None


class _FakeGemm:
    """compute_kernels.CudaGemm's interface on the simulated GPU: a product costs n^3 / 1e6 us of device time."""

    GEMM_ORDERS = (128, 256, 512)

    def __init__(self, sim):
        self.torch, self.sim, self.n = sim, sim, 512
        self.ordered: list[float] = []

    def size_for(self, target_ns):
        self.ordered.append(target_ns)
        self.n = 256

    def compute(self, units):
        for _ in range(units):
            self.sim.enqueue(self.n ** 3 // 1000, ("gemm",))

    def time_events(self, units, chunks, reps):
        return np.full(reps, units * chunks * (self.n ** 3 // 1000), dtype=np.int64)


def test_replay_compute_on_cuda_is_a_gemm_on_the_device_that_the_host_waits_for():
    from microbench.replay.compute import SliceKernel
    from microbench.replay.schedule import Compute

    sim = SimulatedCuda()
    gemm = _FakeGemm(sim)
    kernel = SliceKernel([Compute(0.001, "forward"), Compute(0.002, "backward")], "cuda", gemm)
    assert gemm.ordered == [1e6]  # the matrix order from the shortest slice
    assert kernel.calibrations[0.002].units == pytest.approx(2 * kernel.calibrations[0.001].units, rel=0.01)
    sim.log.clear()
    kernel(0.001)
    assert [e[0] for e in sim.log][-1] == "stream sync" and {e[0] for e in sim.log[:-1]} == {"gemm"}
    assert kernel.describe()["kernel"] == "gemm" and kernel.describe()["matrix_order"] == 256


def test_the_replay_computes_on_the_gpu_where_its_calls_move_device_tensors(monkeypatch):
    from microbench.replay import compute, driver

    made = []
    monkeypatch.setattr(compute, "SliceKernel", lambda plan, device="cpu": made.append(device) or "kernel")
    monkeypatch.setattr(compute, "iteration_compute_s", lambda workload, tflops: 0.01)
    r = SimpleNamespace(args=SimpleNamespace(tflops=100.0), workload=None, schedule=[], compute_s=0.0)
    driver._plan(r, "cuda")
    assert made == ["cuda"]
    source = __import__("inspect").getsource(driver.replay)
    assert '_plan(r, "cuda" if getattr(issuer, "cuda", False) else "cpu")' in source

"""The GPU paths' decisions, checked without a GPU through the functions the GPU paths call.

Graph schedules and the barrier after capture, which slots cold graphs replay, which memory check applies
when ranks share a GPU, staged in-place copies, device selection before MPI_Init, the native loop with a
flush it cannot write, launch-bound samples. The GPU runs themselves are in test_torch.py (skipped without
a GPU) and scripts/gpu_node_checks.py (a GPU node; its judgements are tested in test_gpu_node_checks.py).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from conftest import microbench
from microbench.benchmarks.table import ALLREDUCE, Buffers, Context
from microbench.measure import engine
from microbench.measure.backends.torch_dist import barrier_takes_device_ids
from microbench.measure.device import ranks_sharing, staged_copies
from microbench.measure.gpu_loops import GRAPH_ITERATIONS, MIN_REPLAYS, graph_schedule
from microbench.measure.loops import LaunchFacts, PythonLoop
from microbench.measure.native import loops as native_loops
from microbench.measure.native import toolchain

from conftest import run_process


# ------------------------------------------------------------------------------ CUDA graph schedules
def test_warm_graphs_replay_one_graph():
    s = graph_schedule(iterations=1000, start=3, nslots=1, each=False)
    assert s.iterations_per_replay == 1000 // MIN_REPLAYS and len(s.replays) == MIN_REPLAYS
    assert s.graphs == [(0, 1000 // MIN_REPLAYS)]  # the lead replays the same one graph
    s = graph_schedule(iterations=100_000, start=0, nslots=1, each=False)
    assert s.iterations_per_replay == GRAPH_ITERATIONS and len(s.replays) == 1000


def test_cold_graphs_keep_rotating_through_the_pool():
    nslots, per = 7, 10
    s = graph_schedule(iterations=500, start=2, nslots=nslots, each=False)
    assert s.iterations_per_replay == per and len(s.replays) == 50
    # replay r covers slots start + r*G .. + G-1: consecutive replays never reuse the previous replay's slots
    used = [[(first + i) % nslots for i in range(length)] for first, length in s.replays]
    assert [u[0] for u in used] == [(2 + r * per) % nslots for r in range(50)]
    flat = [slot for u in used for slot in u]
    assert flat == [(2 + i) % nslots for i in range(500)]  # exactly the eager loop's slot order
    assert len(s.graphs) == nslots  # gcd(10, 7) = 1: every start slot once


def test_checked_graphs_are_one_call_per_slot_in_order():
    s = graph_schedule(iterations=5, start=4, nslots=3, each=True)
    assert s.iterations_per_replay == 1
    assert s.replays == [(1, 1), (2, 1), (0, 1), (1, 1), (2, 1)] and s.graphs == [(1, 1), (2, 1), (0, 1)]


class _RecordingLoop(PythonLoop):
    """The Python loop, with a timed phase of its own (as CUDA graphs), recording what the engine calls."""

    separate_warmup = True

    def __init__(self, log):
        super().__init__()
        self.log = log

    def begin_timed(self, prepared, iterations, start, each):
        self.log.append(("begin_timed", iterations, start, each))

    def run(self, calls, iters, start=0, barrier=None, flush=None):
        self.log.append(("run", iters, start))
        return super().run(calls, iters, start, barrier, flush)


@pytest.fixture(scope="module")
def comm_self():
    os.environ.setdefault("OMPI_MCA_btl", "^ofi")
    os.environ.setdefault("OMPI_MCA_mtl", "^ofi")
    from microbench.cluster.mpi_runtime import import_mpi
    from microbench.measure.backends.mpi import MPIBackend

    MPI = import_mpi()
    return MPI, MPIBackend(MPI.COMM_SELF, MPI)


def _pool(nslots: int):
    from microbench.measure.buffers import BufferPool

    return BufferPool(2, 2, np.dtype(np.float32), nslots=nslots)


def _record_measure(backend, runs_timed_slots_before: bool = False, cold: bool = False, **settings) -> list:
    """What the engine calls, in order, measuring allreduce 6 + 2 iterations on 3 slots with a recording loop
    (``cold``: with a flush before the warmup, logged too)."""
    log: list = []
    flush = (lambda: log.append(("flush",))) if cold else None
    settings = engine.LoopSettings(iterations=6, warmup=2, flush_before=flush, **settings)
    pool = _pool(3)
    ctx = Context(rank=0, nranks=1)
    calls = [ALLREDUCE.build(backend, slot, ctx) for slot in pool.slots]
    loop = _RecordingLoop(log)
    loop.runs_timed_slots_before = runs_timed_slots_before
    engine.measure(ALLREDUCE, ctx, pool.slots, calls, loop, settings, lambda: log.append(("barrier",)),
                   lambda v: v, timing=True)
    pool.close()
    return log


@pytest.mark.parametrize("check", [False, True])
def test_the_barrier_comes_after_capture(comm_self, check):
    log = _record_measure(comm_self[1], check=check)
    timed = [i for i, e in enumerate(log) if e[0] == "begin_timed"]
    assert len(timed) == 1
    # first call (slot 0) and warmup (slots 1, 2) run eagerly; the timed phase starts at slot 3 % 3 = 0
    assert log[timed[0]] == ("begin_timed", 6, 0, check)
    assert log[timed[0] + 1] == ("barrier",)  # ranks align after capture, before the first timed replay
    assert log[timed[0] + 2][0] == "run" and all(e[0] == "run" for e in log[timed[0] + 2:])


@pytest.mark.parametrize("replays_before", [False, True])
def test_cold_cache_flushes_again_after_a_timed_phase_that_ran_its_slots(comm_self, replays_before):
    # a CUDA graph loop replays every timed graph once in begin_timed: the slots the timed replays use are then
    # warm, so under cold cache the engine must flush again between begin_timed and the barrier
    log = _record_measure(comm_self[1], replays_before, cold=True)
    after = [e[0] for e in log[[e[0] for e in log].index("begin_timed") + 1:]]
    assert after[:2] == (["flush", "barrier"] if replays_before else ["barrier", "run"])
    assert [e[0] for e in log].count("flush") == (2 if replays_before else 1)


def test_the_graph_loop_says_it_runs_the_timed_slots_before():
    from microbench.measure.gpu_loops import CudaEventLoop, CudaGraphLoop

    assert CudaGraphLoop.runs_timed_slots_before and not CudaEventLoop.runs_timed_slots_before
    assert not PythonLoop.runs_timed_slots_before


# ------------------------------------------------------------------------------ memory and staging
def test_ranks_share_a_gpu_only_when_it_is_the_same_gpu():
    # srun --gpus-per-task=1: each process sees one GPU, a different one: nobody shares
    one_each = [("n0", "GPU-a"), ("n0", "GPU-b"), ("n1", "GPU-a"), ("n1", "GPU-b")]
    assert ranks_sharing(one_each, ("n0", "GPU-a")) == 1
    # two ranks on one GPU of node n0
    doubled = [("n0", "GPU-a"), ("n0", "GPU-a"), ("n0", "GPU-b")]
    assert ranks_sharing(doubled, ("n0", "GPU-a")) == 2 and ranks_sharing(doubled, ("n0", "GPU-b")) == 1


def test_nccls_communicator_is_made_when_the_group_is_and_gloos_at_first_use():
    # the preflight reads the GPU's free memory after open_transport: NCCL's own buffers must be taken by then
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from microbench.cluster.torch_runtime import group_options

    assert group_options("nccl", 3, dist.new_group) == {"device_id": torch.device("cuda", 3)}
    assert group_options("gloo", 3, dist.new_group) == {}
    assert group_options("nccl", None, dist.new_group) == {}

    def new_group_without_device_id(ranks=None, timeout=None, backend=None):  # torch before 2.5
        return None

    assert group_options("nccl", 0, new_group_without_device_id) == {}


def test_staged_in_place_copies_the_one_buffer_both_ways():
    host, dev = np.zeros(4), np.ones(4)
    hs, ds = np.zeros(4), np.ones(4)
    to_host, to_device = staged_copies(Buffers(None, host), Buffers(None, dev))
    assert [(h is host, d is dev) for h, d in to_host] == [(True, True)]  # in place: the input is in recv
    assert [(h is host, d is dev) for h, d in to_device] == [(True, True)]
    to_host, to_device = staged_copies(Buffers(hs, host), Buffers(ds, dev))
    assert [h is hs for h, _ in to_host] == [True] and [h is host for h, _ in to_device] == [True]
    to_host, to_device = staged_copies(Buffers(hs, None), Buffers(ds, None))  # broadcast: send both ways
    assert [h is hs for h, _ in to_host] == [True] and [h is hs for h, _ in to_device] == [True]


def test_only_nccl_barriers_take_device_ids():
    assert barrier_takes_device_ids("nccl")
    assert not any(barrier_takes_device_ids(b) for b in ("gloo", "mpi", "ucc"))


def test_launch_bound_when_the_host_is_as_slow_as_the_device():
    assert LaunchFacts(host_us_per_call=40.0, device_us_per_call=42.0).bound
    assert not LaunchFacts(host_us_per_call=5.0, device_us_per_call=40.0).bound


# ------------------------------------------------------------------------------ the native loop's flush
class _FlushOutsideC:
    """A flush the C loop cannot write (as a device buffer): called from Python before each iteration."""

    host_memory = False

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, iteration: int = 0) -> None:
        self.calls.append(iteration)


def test_native_loop_runs_a_device_flush_from_python(comm_self, mpi_lib):
    MPI, _ = comm_self
    _, lib = mpi_lib
    try:
        loop = native_loops.NativeLoop(native_loops.load(toolchain.build(lib.prefix, lib.path), MPI.Get_library_version()))
    except toolchain.NativeUnavailable as exc:
        pytest.skip(f"native loop unavailable here: {exc}")
    from microbench.measure.backends.mpi import NativeMPIBackend

    backend = NativeMPIBackend(MPI.COMM_SELF, MPI)
    pool = _pool(2)
    ctx = Context(rank=0, nranks=1)
    calls = loop.prepare([ALLREDUCE.build(backend, slot, ctx) for slot in pool.slots])
    flush = _FlushOutsideC()
    durations = loop.run(calls, 5, start=1, barrier=backend.barrier(), flush=flush)
    assert flush.calls == [0, 1, 2, 3, 4] and len(durations) == 5 and np.all(durations > 0)
    assert loop.last_timer == "host"
    pool.close()


# ------------------------------------------------------------------------------ device before MPI_Init
SELECTION_ORDER = r"""
import atexit, sys
from microbench import cli
from microbench.measure import device
from microbench.errors import RunError
seen = []
def cuda_runtime(kind):  # stands in for a CUDA runtime on this GPU-less machine: records when it is asked
    mpi = sys.modules.get("mpi4py.MPI")
    seen.append(bool(mpi is not None and mpi.Is_initialized()))
    raise RunError("no GPU here (selection order test)")
device.cuda_runtime = cuda_runtime
atexit.register(lambda: print("MPI initialised at device selection:", seen, flush=True))
sys.exit(cli.main(["run", "--device", "cuda", "--buffer", "torch", "allreduce", "-m", "8"]))
"""


def test_the_gpu_is_chosen_before_mpi_starts():
    proc = run_process([sys.executable, "-c", SELECTION_ORDER], timeout=120)
    assert proc.returncode == 1, proc.output
    assert "MPI initialised at device selection: [False]" in proc.stdout
    assert "microbench: error: no GPU here (selection order test)" in proc.stderr


# ------------------------------------------------------------------------------ the run record's GPUs
def test_rccl_is_named_behind_a_rocm_builds_nccl_backend():
    from microbench.cluster.torch_runtime import collective_library, torch_metadata

    assert collective_library("nccl", "6.2.41133") == "RCCL" and collective_library("nccl", None) == "NCCL"
    assert collective_library("gloo", "6.2.41133") is None
    pytest.importorskip("torch")
    meta = torch_metadata("gloo", "cpu", None)  # this torch: a CUDA (or CPU) build, not ROCm
    assert meta["hip"] is None and meta["library"] is None


def test_every_ranks_gpu_in_the_run_record_is_in_the_schema():
    from microbench.records.validate import problems

    gpus = [{"host": "n0", "local_rank": 0, "index": 0, "uuid": "GPU-a", "bus_id": "00000000:18:00.0"},
            {"host": "n0", "local_rank": 1, "index": 1, "uuid": None, "bus_id": None}]
    torch_meta = {"version": "2.13.0", "backend": "nccl", "hip": "6.2", "library": "RCCL"}
    record = {"type": "run", "device": {"kind": "rocm", "ranks": gpus}, "torch": torch_meta}
    assert not [p for p in problems(record) if "device" in p or "torch" in p]
    record["device"]["ranks"][1]["local_rank"] = "one"
    assert any("local_rank" in p or "ranks" in p for p in problems(record))
    record["device"]["ranks"][1]["local_rank"], torch_meta["library"] = 1, "rccl"
    assert any("rccl" in p for p in problems(record))


def test_ranks_on_a_gpu_whose_uuid_is_unknown_are_told_apart_by_bus_id_then_index():
    from microbench.measure.device import ranks_on_gpu

    def gpu(host, uuid, bus_id, index=0):
        return {"host": host, "uuid": uuid, "bus_id": bus_id, "index": index}

    # srun --gpus-per-task=1 with no UUID: every rank sees index 0, but each is another GPU (bus id)
    per_task = [gpu("n0", None, f"0000:{b}:00.0") for b in ("18", "2a", "3a", "5d")]
    assert ranks_on_gpu(per_task, per_task[2]) == 1
    # no UUID and no bus id: the index on the host is all there is (two ranks chose GPU 0 of n0)
    bare = [gpu("n0", None, None, 0), gpu("n0", None, None, 1), gpu("n0", None, None, 0), gpu("n1", None, None, 0)]
    assert ranks_on_gpu(bare, bare[0]) == 2 and ranks_on_gpu(bare, bare[3]) == 1
    # every UUID known: the UUID decides, whatever the indices
    known = [gpu("n0", "GPU-a", None, 0), gpu("n0", "GPU-a", None, 1), gpu("n0", "GPU-b", None, 0)]
    assert ranks_on_gpu(known, known[0]) == 2 and ranks_on_gpu(known, known[2]) == 1


def test_two_ranks_on_one_gpu_are_refused_under_nccl_in_one_line_also_without_a_uuid():
    from microbench.errors import UsageError
    from microbench.measure.device import refuse_shared_gpus

    gpus = [{"host": "n0", "uuid": None, "bus_id": "0000:18:00.0", "index": 0, "local_rank": 0},
            {"host": "n0", "uuid": None, "bus_id": "0000:18:00.0", "index": 0, "local_rank": 1},
            {"host": "n0", "uuid": None, "bus_id": None, "index": 0, "local_rank": 2},
            {"host": "n0", "uuid": None, "bus_id": None, "index": 0, "local_rank": 3}]
    with pytest.raises(UsageError, match=r"^ranks 0, 1 share GPU bus id 0000:18:00.0 on n0: NCCL needs one GPU"):
        refuse_shared_gpus(gpus)
    with pytest.raises(UsageError, match=r"RCCL needs one GPU"):
        refuse_shared_gpus(gpus, "RCCL")
    refuse_shared_gpus(gpus[1:])  # nothing known of ranks 2 and 3: not refused (gloo is never asked: it may share)


# ------------------------------------------------------------------------------ NCCL's runtime connection
def test_eager_nccl_connection_is_set_before_the_communicator_and_recorded():
    from microbench.cluster.torch_runtime import (NCCL_CONNECT_DEFAULT, NCCL_CONNECT_NO_CUMEM, NCCL_CONNECT_OLD,
                                                  connects_at_runtime, nccl_connect_env)

    env = {}
    assert nccl_connect_env("nccl", "eager", env) == "0" and env == {"NCCL_RUNTIME_CONNECT": "0"}
    env = {}
    assert nccl_connect_env("nccl", "runtime", env) == NCCL_CONNECT_DEFAULT and env == {}
    env = {"NCCL_RUNTIME_CONNECT": "0"}  # the site's own setting is what NCCL reads, and what is recorded
    assert nccl_connect_env("nccl", "runtime", env) == "0"
    env = {}
    assert nccl_connect_env("gloo", "eager", env) is None and env == {}
    # where NCCL connects with the communicator anyway, the record says so rather than "runtime"
    assert nccl_connect_env("nccl", "runtime", {}, (2, 21, 5)) == NCCL_CONNECT_OLD.format(version="2.21.5")
    assert nccl_connect_env("nccl", "runtime", {"NCCL_CUMEM_ENABLE": "0"}, (2, 27, 3)) == NCCL_CONNECT_NO_CUMEM
    assert nccl_connect_env("nccl", "runtime", {}, (2, 27, 3)) == NCCL_CONNECT_DEFAULT
    assert connects_at_runtime(NCCL_CONNECT_DEFAULT) and connects_at_runtime("1")
    assert not any(map(connects_at_runtime, ("0", NCCL_CONNECT_NO_CUMEM, NCCL_CONNECT_OLD.format(version="2.18.1"))))


@pytest.mark.parametrize("backend", ["gloo", "mpi", "ucc"])
def test_cuda_graphs_outside_nccl_are_one_error_line(backend):
    result = microbench("run", "--backend", "torch", "--device", "cuda", "--torch-backend", backend, "--cuda-graph",
                        "allreduce", "-m", "8")
    assert result.returncode == 2 and result.stderr.count("microbench: error:") == 1, result.output
    assert f"torch's {backend} backend runs on the host and cannot be captured" in result.stderr
    assert "Traceback" not in result.stderr


def test_nccl_connect_outside_nccl_is_one_error_line():
    result = microbench("run", "--backend", "torch", "--torch-backend", "gloo", "--nccl-connect", "eager",
                        "allreduce", "-m", "8")
    assert result.returncode == 2
    assert "--nccl-connect applies to the NCCL backend" in result.stderr and "Traceback" not in result.stderr

"""The transport a run measures: the device, the backend and its primitives, and the timed loop.

``open_transport`` is collective: every rank picks its GPU (``--device cuda``), joins the backend (a
duplicate of MPI_COMM_WORLD for ``--backend mpi``, a new torch.distributed group for ``--backend torch``),
and all ranks agree on staging and on the timed loop, so an error or a missing piece on one rank ends or
changes the run on every rank alike. The ``Transport`` it returns is complete: it builds the buffers and the
per-slot calls of each size (on the run's communicator or a sub-communicator), and answers what callers ask
of the backend (the call a primitive makes, where in-place results land).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from microbench.benchmarks.dtypes import DType
from microbench.benchmarks.table import Collective, Context
from microbench.cluster import agree, launch
from microbench.cluster.world import World, require_mpi
from microbench.errors import RunError, UsageError
from microbench.measure import buffers
from microbench.measure.cache import CacheFlush, cache_bytes_for
from microbench.measure.device import DeviceChoice
from microbench.measure.loops import PythonLoop, TimedLoop
from microbench.measure.native.toolchain import NativeUnavailable
from microbench.options import RunOptions, SizePlan


@dataclass
class Transport:
    """What one rank measures with; built by ``open_transport``."""

    backend: Any  #: the primitives the timed loop's calls are built from
    python_backend: Any  #: mpi4py or torch primitives (staged calls; sizes the C loop cannot take)
    loop: TimedLoop
    device: DeviceChoice
    staged: bool  #: device buffers copied through the host around each call (--stage-host)
    cache_bytes: int | None  #: the cache cold mode and --flush work against (CPU LLC or GPU L2)
    lib: Any = None  #: the MPI library (backends.mpi.MPILibrary), None under torchrun
    thread_level: str | None = None  #: the thread support MPI granted
    torch_meta: dict | None = None
    notice: str | None = None  #: a one-time notice about the loop (a fallback), for the table
    gpus: list = field(default_factory=list)  #: every rank's GPU (host, local rank, index, UUID, bus id); CUDA runs

    @property
    def registers_buffers(self) -> bool:
        """MPI moves the device buffers itself (CUDA-aware, not staged): UCX and Open MPI register each buffer, or
        open its CUDA-IPC handle, at its first use and keep that; a cold pool's slots are then each used once,
        untimed, before timing, so that no timed iteration pays it."""
        return self.device.kind == "cuda" and self.torch_meta is None and not self.staged

    def in_place_for(self, coll: Collective, opts: RunOptions) -> bool:
        """In place when asked, or when the transport's API has no out-of-place form (torch all_reduce, reduce)."""
        return opts.in_place or coll.primitive in self.python_backend.in_place_only

    def cache_bytes_from(self, opts: RunOptions) -> str:
        if opts.cache_size:
            return "--cache-size"
        if self.device.kind == "cuda":
            return self.device.cache_from or "GPU L2 (device properties)"
        return "sysfs (last-level cache of cpu0)"

    def pool(self, plan: SizePlan, dtype: DType, nslots: int, ack: bool, huge_pages: str):
        """Host slots (filled, verified) and the buffers the transport moves (the same memory on the host)."""
        from microbench.measure.device import DevicePool

        host = buffers.BufferPool(plan.send_count, plan.recv_count, dtype.numpy, nslots=nslots, policy=huge_pages,
                                  ack_count=1 if ack else 0)
        torch_dtype = None
        if self.device.kind == "cuda" and self.device.buffer == "torch":
            from microbench.cluster.torch_runtime import import_torch
            from microbench.measure.backends.torch_dist import torch_dtype as to_torch

            torch_dtype = to_torch(import_torch()[0], dtype.name)
        return DevicePool(host, self.device.kind, self.device.buffer, torch_dtype, staged=self.staged)

    def flush(self):
        """The buffer cold mode and --flush write: twice the CPU cache, or twice the GPU L2 for device buffers."""
        if self.device.kind == "cuda":
            from microbench.measure.device import DeviceFlush

            return DeviceFlush(2 * self.cache_bytes, "cupy" if self.device.buffer == "cupy" else "torch")
        return CacheFlush(2 * self.cache_bytes)

    @property
    def result_at_rank(self) -> bool:
        """In-place reduce_scatter leaves each rank's block at its own offset (NCCL, torch), not the first (MPI)."""
        return self.python_backend.in_place_result_at_rank

    def call_name(self, primitive: str) -> str | None:
        """The library call a benchmark primitive makes here ("MPI_Allreduce", "all_reduce")."""
        return self.python_backend.call_name(primitive)

    def split(self, color: int | None, key: int):
        """MPI: the sub-communicator of the ranks with the same ``color`` (MPI_Comm_split; collective), None
        on a rank whose color is None."""
        if getattr(self.python_backend, "comm", None) is None:
            raise RunError("sub-communicators need --backend mpi")
        MPI = self.python_backend.MPI
        comm = self.python_backend.comm.Split(MPI.UNDEFINED if color is None else color, key)
        return None if comm == MPI.COMM_NULL else comm

    def calls(self, coll: Collective, ctx: Context, pool, comm=None) -> tuple[list[Callable], Any, TimedLoop]:
        """(one call per pool slot, the backend they use, the loop to time them with), on the run's
        communicator or on ``comm`` (a sub-communicator from ``split``).

        Staged through the host (--stage-host), MPI moves the host slots and each call copies the device
        data across before and after, inside the timing. Element counts the C loop cannot take (above
        2^31-1) fall back to the Python loop for that size."""
        backend, python_backend = self.backend, self.python_backend
        if comm is not None:
            backend, python_backend = backend.on(comm), python_backend.on(comm)
        if self.staged:
            calls = [pool.staged(k, coll.build(python_backend, slot, ctx)) for k, slot in enumerate(pool.slots)]
            return calls, python_backend, self.loop
        try:
            return [coll.build(backend, slot, ctx) for slot in pool.device_slots], backend, self.loop
        except NativeUnavailable:
            return [coll.build(python_backend, slot, ctx) for slot in pool.device_slots], python_backend, PythonLoop()

    def describe(self) -> str:
        """The transport as the table header names it: "Open MPI v5.0.11" or "gloo, torch 2.13.0"."""
        if self.torch_meta:
            return f"{self.torch_meta['backend']}, torch {self.torch_meta['version']}"
        return self.lib.short_name


def open_transport(world: World, opts: RunOptions, selected: tuple[DeviceChoice, int | None]) -> Transport:
    """Collective: the backend on the device ``select_device`` chose (before MPI_Init); errors end every rank."""
    from microbench.cluster.mpi_runtime import library

    lib = library(world.MPI) if world.MPI is not None else None
    error = transport = None
    device, cache_bytes = selected
    gpus = _gpus_of_every_rank(world, device)  # known before any communicator is made (the refusal below)
    try:
        if opts.backend == "mpi":
            transport = _open_mpi(world, opts, lib, device, cache_bytes)
        else:
            transport = _open_torch(world, opts, lib, device, cache_bytes, gpus)
    except (UsageError, RunError) as exc:
        error = exc
    agree.raise_if_any(world.reducer, error)
    # Staging is decided per rank (is this node's MPI CUDA-aware?); the timed loop must be the same on
    # every rank, so one rank that stages makes every rank stage.
    transport.staged = agree.any_rank(world.reducer, transport.staged)
    _choose_loop(world, opts, transport)
    transport.gpus = gpus
    return transport


def _gpus_of_every_rank(world: World, device: DeviceChoice) -> list[dict]:
    """Collective: every rank's (host, local rank, GPU index, UUID, bus id, NCCL host id where set), in rank
    order; empty on the CPU."""
    if device.kind != "cuda":
        return []
    import platform

    from microbench.measure.device import rank_gpu

    mine = rank_gpu(platform.node(), launch.discover().local_rank, device)
    return world.reducer.bcast(world.reducer.gather(mine), root=0)


def select_device(opts: RunOptions) -> tuple[DeviceChoice, int | None]:
    """This rank's GPU (local rank modulo the GPUs per node) made current, and its L2; or the CPU and its LLC.

    Runs before MPI_Init (no MPI needed: the local rank comes from the launcher's environment), because
    CUDA-aware MPIs (UCX, Open MPI) choose the network devices nearest the current GPU when they start."""
    if opts.device == "cpu":
        return DeviceChoice("cpu", opts.buffer, None, None, 0, None), cache_bytes_for(opts)
    from microbench.measure import device

    before_init = not _mpi_initialized()
    kind = opts.buffer if opts.backend == "mpi" else "torch"
    module, count = device.cuda_runtime(kind)
    index = device.index_for_rank(launch.discover().local_rank, count, opts.gpus_per_node)
    if kind == "cupy":
        module.cuda.Device(index).use()
        module.empty(1)  # a context on this GPU now: making a GPU current creates none
        name = module.cuda.runtime.getDeviceProperties(index)["name"].decode(errors="replace")
    else:
        module.cuda.set_device(index)  # returns early, creating no context, when the GPU is already current
        module.empty(1, device=f"cuda:{index}")
        name = module.cuda.get_device_name(index)
    l2 = device.l2_cache_bytes(kind, index)
    runtime = device.gpu_runtime(kind)
    cache, cache_from = device.device_cache_bytes(l2, runtime, device.gpu_arch(kind, index) if runtime == "rocm" else None)
    return (DeviceChoice("cuda", opts.buffer, index, name, count, l2, device.device_uuid(kind, index), before_init,
                         device.device_bus_id(kind, index), runtime, cache_from), opts.cache_size or cache)


def _mpi_initialized() -> bool:
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi is not None and mpi.Is_initialized())


def _thread_level(MPI) -> str:
    """The thread support MPI granted (MPI_Query_thread): single unless MPI was initialised elsewhere."""
    from microbench.cluster.mpi_runtime import thread_levels

    granted = MPI.Query_thread()
    return {value: name for name, value in thread_levels(MPI).items()}.get(granted, str(granted))


def _open_mpi(world: World, opts: RunOptions, lib, device: DeviceChoice, cache_bytes) -> Transport:
    from microbench.measure.backends.mpi import MPIBackend

    require_mpi(world, "--backend mpi")
    backend = MPIBackend(world.MPI.COMM_WORLD.Dup(), world.MPI, opts.reduce_scatter_call)
    staged = False
    if device.kind == "cuda":
        from microbench.measure.device import cuda_aware_mpi

        aware = cuda_aware_mpi(lib.path)
        if not aware:
            if not opts.stage_host:
                said = "says it is not" if aware is False else "cannot say whether it is"
                raise RunError(f"{lib.short_name} {said} CUDA-aware, so it cannot move {opts.buffer} device buffers: "
                               f"use a CUDA-aware MPI, add --stage-host to copy through the host (timed), or set "
                               f"MICROBENCH_ASSUME_CUDA_AWARE=1 if you know it is")
            staged = True
    return Transport(backend, backend, PythonLoop("mpi4py"), device, staged, cache_bytes, lib,
                     _thread_level(world.MPI))


def _open_torch(world: World, opts: RunOptions, lib, device: DeviceChoice, cache_bytes, gpus: list[dict]) -> Transport:
    from microbench.cluster import torch_runtime
    from microbench.measure.backends import torch_dist

    name = torch_runtime.resolve_backend(opts.torch_backend, opts.device)
    if name == "nccl":  # before the communicator: NCCL would fail its creation with "Duplicate GPU detected"
        from microbench.measure.device import refuse_shared_gpus

        refuse_shared_gpus(gpus, "RCCL" if device.runtime == "rocm" else "NCCL")
    torch, dist = torch_runtime.import_torch()
    if not dist.is_initialized():  # under mpiexec/srun: rank 0's TCPStore address travels over MPI
        torch_runtime.init_process_group("gloo", world.rank, world.nranks, world.launcher,
                                      bcast=lambda obj: world.reducer.bcast(obj, root=0), timeout_s=opts.timeout or 600)
    # NCCL reads NCCL_RUNTIME_CONNECT when it makes a communicator: set (for --nccl-connect eager) before it exists
    import os

    connect = torch_runtime.nccl_connect_env(name, opts.nccl_connect, os.environ,
                                             torch_runtime.nccl_version(torch) if name == "nccl" else None)
    # NCCL's communicator made here where torch can: before the preflight reads the GPU's free memory
    group = dist.new_group(backend=name, **torch_runtime.group_options(name, device.index, dist.new_group))
    if opts.device == "cuda":
        from microbench.measure.gpu_loops import CudaEventLoop, CudaGraphLoop

        gated = name == "nccl"  # NCCL's calls only enqueue: a device spin can hold the start events (LaunchGate)
        backend, loop = torch_dist.TorchCudaBackend(group), (CudaGraphLoop(gated) if opts.cuda_graph
                                                              else CudaEventLoop(gated))
    else:
        backend, loop = torch_dist.TorchBackend(group), PythonLoop("torch")
    return Transport(backend, backend, loop, device, False, cache_bytes, lib,
                     _thread_level(world.MPI) if world.MPI is not None else None,
                     {**torch_runtime.torch_metadata(name, opts.device, device.index),
                      **({"nccl_runtime_connect": connect} if connect is not None else {})})


def _choose_loop(world: World, opts: RunOptions, transport: Transport) -> None:
    """The timed loop, by ``--loop`` (collective: every rank makes the same choice).

    torch: CUDA events (or a CUDA graph) on CUDA, else the Python loop, both chosen with the backend. MPI:
    native is the C loop; python is the Python loop calling the C call shim; mpi4py is the Python loop
    calling mpi4py. auto is native, else mpi4py with one notice; python without a shim is mpi4py with one
    notice. Staged device buffers need the Python loop over mpi4py (the copies are Python calls)."""
    from microbench.measure.backends.mpi import NativeMPIBackend
    from microbench.measure.native import loops as native_loops
    from microbench.measure.native import toolchain

    if opts.backend != "mpi":
        return

    if transport.staged and opts.loop == "native":
        raise RunError("--loop native cannot stage device buffers through the host; use --loop python")
    want = "mpi4py" if transport.staged else opts.loop
    if transport.staged and opts.loop == "python":
        _notice(world, transport, "device buffers staged through the host: the Python loop calls mpi4py")
    if want == "mpi4py":
        return
    lib, version = transport.lib, world.MPI.Get_library_version()
    if want == "python":
        shim, reason, where = _everywhere(world, lambda: native_loops.load_shim(toolchain.build_shim(lib.prefix, lib.path),
                                                                           version))
        if shim is None:
            _notice(world, transport, f"C call shim unavailable{where}: {reason}; the Python loop calls mpi4py")
            return
        transport.loop = native_loops.ShimPythonLoop(shim)
    else:
        built, reason, where = _everywhere(world, lambda: native_loops.load(toolchain.build(lib.prefix, lib.path), version))
        if built is None:
            if want == "native":
                raise RunError(f"--loop native: the native loop is unavailable{where}: {reason}")
            _notice(world, transport, f"native loop unavailable{where}: {reason}; timing with the Python loop "
                                      f"(mpi4py calls)")
            return
        transport.loop = native_loops.NativeLoop(built)
    transport.backend = NativeMPIBackend(transport.python_backend.comm, world.MPI, opts.reduce_scatter_call)


def _everywhere(world: World, make):
    """Run ``make()`` on every rank (it raises NativeUnavailable where it cannot); collective.

    Returns (result, None, "") when every rank succeeded, else (None, the first failing rank's reason,
    " (on rank R)" or "" for rank 0): one rank without it means no rank uses it."""
    result, reason = None, None
    try:
        result = make()
    except NativeUnavailable as exc:
        reason = str(exc)
    first_missing = agree.lowest_rank_where(world.reducer, result is None)
    if first_missing is None:
        return result, None, ""
    reason = world.reducer.bcast(reason, root=first_missing)
    return None, reason, (f" (on rank {first_missing})" if first_missing else "")


def _notice(world: World, transport: Transport, text: str) -> None:
    """A one-time notice: on stderr (rank 0) now, and as a note in the table."""
    transport.notice = text
    if world.rank == 0:
        print(f"microbench: notice: {text}", file=sys.stderr, flush=True)

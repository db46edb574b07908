"""Checks made before anything is measured: rank counts, exact --check values, memory, dtypes, outputs.

``validate_for_ranks`` and ``preflight_local`` need no MPI, so the ``--np`` parent runs them before it
starts any rank; ``check_run`` runs on every rank once the transport is open (collective: an error on
any rank ends every rank with one message). Memory is checked once, the same way for host and device:
the largest buffers of the sweep (the cold-cache pool and flush buffer included), times the ranks that
share the memory, against 90 % of what is available.
"""

from __future__ import annotations

import errno
import platform
from dataclasses import dataclass
from typing import Callable

from microbench.benchmarks.table import COLLECTIVES, Collective, pair_metric_benchmark
from microbench.cluster import agree, facts
from microbench.errors import RunError, UsageError, printable
from microbench.measure.cache import cache_bytes_for, plan_pool
from microbench.options import RunOptions, SizePlan, collective_for, dtype_for, plan_size
from microbench.units import format_bytes, format_size

MEMORY_HEADROOM = 0.9  #: use at most this share of the available memory


@dataclass(frozen=True)
class MemorySpace:
    """Memory the buffers of a rank come from: how much is free and how many ranks share it."""

    free_bytes: int
    sharing_ranks: int
    cache_bytes: int  #: the cache the cold pool and flush are sized against in this memory
    where: str  #: "host vm" or "GPU 0 (H100)", for the message
    reserved_bytes: int = 0  #: kept free for the communication library's own buffers (per GPU)
    holds_flush: bool = True  #: the flush buffer of cold and --flush lives here (not: host copies of device slots)


def host_space(opts: RunOptions, local_ranks: int, transport=None) -> MemorySpace | None:
    """This host's available memory (MemAvailable), shared by its ranks; None where unknown.

    With device buffers the host holds each slot's host copy (a cold pool sized against the GPU's cache) but no
    flush buffer (the flush is a device write)."""
    avail = facts.mem_available_bytes()
    if avail is None:
        return None
    if transport is not None and transport.device.kind == "cuda":
        return MemorySpace(avail, local_ranks, transport.cache_bytes or 0, f"host {platform.node()}", holds_flush=False)
    return MemorySpace(avail, local_ranks, cache_bytes_for(opts) or 0, f"host {platform.node()}")


def device_space(transport) -> MemorySpace:
    """This rank's GPU's free memory, shared by the ranks that use the same physical GPU.

    Ranks are matched by host and GPU UUID, so processes that each see one different GPU (``srun
    --gpus-per-task=1``) share nothing; where a UUID is unknown, by PCI bus id, else by GPU index (never local
    ranks / GPUs). Read after the transport is open: NCCL's communicator (made there) holds its memory by then."""
    from microbench.measure.device import free_device_bytes, ranks_on_gpu

    device = transport.device
    kind = "torch" if device.buffer == "numpy" else device.buffer
    mine = {"host": platform.node(), "uuid": device.uuid, "bus_id": device.bus_id, "index": device.index}
    sharing = ranks_on_gpu(transport.gpus, mine)
    nccl = (transport.torch_meta or {}).get("backend") == "nccl"
    return MemorySpace(free_device_bytes(kind, device.index), sharing, transport.cache_bytes or 0,
                       f"GPU {device.index} ({device.name})", NCCL_RESERVE_BYTES if nccl else 0)


#: GPU memory left free for NCCL's own buffers (communicators, channels, NVLS; nccl-tests keeps 1 GiB too)
NCCL_RESERVE_BYTES = 1 << 30


def buffer_bytes_per_rank(opts: RunOptions, coll: Collective, plan: SizePlan, cache_bytes: int,
                          holds_flush: bool = True) -> int:
    """Bytes of buffers one rank maps for one size (the cold pool, and the flush buffer where ``holds_flush``)."""
    item = dtype_for(opts, coll).itemsize
    need = (plan.send_count + plan.recv_count) * item
    if opts.cache in ("cold", "both"):
        pool = plan_pool(plan.send_count * item, plan.recv_count * item, cache_bytes, 10**9, opts.max_memory)
        need = max(need, pool.pool_bytes)
    if holds_flush and (opts.cache in ("cold", "both") or opts.flush):
        need += 2 * cache_bytes
    return need


def check_memory(opts: RunOptions, nranks: int, space: MemorySpace | None,
                 in_place_for: Callable[[Collective], bool] | None = None) -> None:
    """Fail when the largest buffers of the sweep, times the ranks sharing ``space``, do not fit in it."""
    if space is None:
        return
    in_place_for = in_place_for or (lambda coll: opts.in_place)
    sweeps = [(collective_for(opts, name), name, opts.sizes_for(name)) for name in opts.benchmarks]
    if opts.pairs:
        sweeps.append((pair_metric_benchmark("bandwidth"), "pairs", [opts.pair_sizes[1]]))
    worst = None
    for coll, name, sizes in sweeps:
        for size in sizes:
            plan = plan_size(coll, size, nranks, dtype_for(opts, coll), in_place_for(coll))
            need = buffer_bytes_per_rank(opts, coll, plan, space.cache_bytes, space.holds_flush) if plan else 0
            if worst is None or need > worst[0]:
                worst = (need, name, size)
    if worst is None:
        return
    need, name, size = worst
    total = need * space.sharing_ranks
    usable = max(0, space.free_bytes - space.reserved_bytes)
    if total > usable * MEMORY_HEADROOM:
        kept = f" less {format_bytes(space.reserved_bytes)} kept for NCCL" if space.reserved_bytes else ""
        raise RunError(f"{name} at {format_size(size)} needs {format_bytes(total)} on {space.where} "
                       f"({space.sharing_ranks} ranks x {format_bytes(need)} of buffers) but "
                       f"{format_bytes(space.free_bytes)} is available{kept}; lower the largest size (-m)")


def validate_for_ranks(opts: RunOptions, nranks: int, local_ranks: int, transport=None) -> None:
    """Checks that need the rank count (no MPI needed): ranks, root, exact --check values, host memory.

    Device runs size their host copies against the GPU's cache, which only the ranks know (``transport``): the
    ``--np`` parent leaves their host memory to the ranks."""
    for name in opts.benchmarks:
        coll = collective_for(opts, name)
        if coll.splits is not None:
            coll.splits.check_ranks(nranks)
        if nranks < coll.min_ranks:
            raise UsageError(f"{name} needs at least {coll.min_ranks} ranks (this run has {nranks}); "
                             f"start it with --np {coll.min_ranks} or under mpiexec/srun")
        if coll.rooted and opts.root >= nranks:
            raise UsageError(f"--root {opts.root} is not a rank of this {nranks}-rank run")
        dtype = dtype_for(opts, coll)
        if opts.check and coll.check_max_value(opts.op, nranks) > dtype.exact_int_limit:
            raise UsageError(f"--check of {name} with {dtype.name} {opts.op} cannot be exact at {nranks} ranks; "
                             f"use a wider --dtype")
    if opts.pairs and nranks < 2:
        raise UsageError(f"pairs needs at least 2 ranks (this run has {nranks}); start it with --np 2 or more")
    if opts.device == "cuda" and transport is None:
        return
    if opts.device != "cuda" and (opts.cache != "warm" or opts.flush) and not cache_bytes_for(opts):
        raise UsageError("cannot detect the last-level cache size here; give it with --cache-size (e.g. 32M)")
    check_memory(opts, nranks, host_space(opts, local_ranks, transport))


#: element types with a datatype in every MPI library (MPI-1's C types): the --np parent asks the library only
#: about the others (float16, bfloat16), so an ordinary run's parent never loads libmpi and numpy
EVERY_MPI_HAS = frozenset({"float32", "float64", "int32", "int64", "int8", "uint8"})


def preflight_local(opts: RunOptions) -> None:
    """Checks the --np parent can make on this host before it starts any rank (the ranks check again).

    Same order as the ranks (device, then transport), so that a run refused here and one refused under a
    launcher give the same error.
    """
    if opts.device == "cuda":
        from microbench.measure.device import cuda_runtime

        cuda_runtime(opts.buffer if opts.backend == "mpi" else "torch")
    if opts.backend == "torch":
        from microbench.cluster.torch_runtime import resolve_backend

        resolve_backend(opts.torch_backend, opts.device)
    else:  # an element type this MPI library has no datatype for (the ranks also probe its reductions)
        dtypes = {name: dtype_for(opts, COLLECTIVES[name]) for name in opts.benchmarks}
        if any(d.name not in EVERY_MPI_HAS for d in dtypes.values()):  # else no MPI loaded here (docs/startup.md)
            from microbench.cluster.mpi_runtime import import_mpi
            from microbench.measure.backends.mpi import datatype_refusal

            MPI = import_mpi(initialize=False)
            for name, dtype in dtypes.items():
                why = datatype_refusal(MPI, dtype)
                if why:
                    raise UsageError(f"{name}: {why}")
    check_writable(opts)  # as rank 0 will: a folder it cannot write to is refused before any rank starts


def check_writable(opts: RunOptions) -> None:
    """Every output file can be opened for appending (rank 0, before anything is measured)."""
    from microbench.records import AppendFile

    for flag, path in (("--out", opts.out), ("--csv", opts.csv), ("--samples", opts.samples)):
        if not path:
            continue
        try:
            AppendFile(path).close()  # what the writer does: the folder made, the file created
        except OSError as exc:
            why = ("a symbolic link: name the file it points to (the writer never writes through a link)"
                   if exc.errno == errno.ELOOP else exc.strerror or exc)
            raise UsageError(f"{flag} {printable(str(path))}: cannot write there ({why})") from None


def check_nonblocking(coll: Collective, transport) -> None:
    """A non-blocking benchmark needs its primitive in the backend, and calls that are not staged through the
    host (the staged copies wrap blocking calls)."""
    if not coll.nonblocking:
        return
    backend = transport.python_backend
    if not hasattr(backend, coll.primitive):
        raise UsageError(f"{coll.name}: the {backend.name} backend has no non-blocking {coll.primitive[1:]}")
    if transport.staged:
        raise UsageError(f"{coll.name}: device buffers staged through the host (--stage-host) cannot overlap; "
                         f"use a CUDA-aware MPI")


def check_run(opts: RunOptions, world, layout, transport) -> None:
    """Collective: every check that needs the ranks, their hosts or the transport; raises on every rank."""
    error = None
    try:  # this rank's own checks: none is collective, so one rank's failure cannot leave the others waiting
        # (ranks sharing a GPU under NCCL were refused by open_transport, before NCCL's communicator existed)
        if transport.device.kind == "cuda" and (opts.cache != "warm" or opts.flush) and not transport.cache_bytes:
            raise UsageError(f"--cache {opts.cache}{' --flush' if opts.flush else ''} works against the GPU's caches, "
                             f"whose size is unknown on {transport.device.name} ({transport.cache_bytes_from(opts)}); "
                             f"give it with --cache-size")
        validate_for_ranks(opts, world.nranks, layout.local_ranks, transport)
        if world.rank == 0:
            check_writable(opts)
        for name in opts.benchmarks:
            check_nonblocking(COLLECTIVES[name], transport)
    except (UsageError, RunError) as exc:
        error = exc
    agree.raise_if_any(world.reducer, error)  # every rank knows of any failure before the collective checks
    try:  # torch's check reduces a probe on the benchmark's group: every rank takes part (and NCCL's
        # communicator, built at its first collective, exists afterwards)
        for name in opts.benchmarks:
            coll = COLLECTIVES[name]
            why = transport.backend.check_dtype(dtype_for(opts, coll), coll.reduces, opts.op)
            if why:
                raise UsageError(f"{name}: {why}")
    except (UsageError, RunError) as exc:
        error = exc
    agree.raise_if_any(world.reducer, error)
    try:  # free GPU memory read now, with the communication library's own buffers already taken
        if transport.device.kind == "cuda":
            space = device_space(transport)
            check_memory(opts, world.nranks, space, lambda coll: transport.in_place_for(coll, opts))
    except (UsageError, RunError) as exc:
        error = exc
    agree.raise_if_any(world.reducer, error)


"""One rank's view of a run: transports, loops, the sweep of sizes, the pairwise test, the records."""

from __future__ import annotations

import platform
import shlex
import sys
import time
import uuid
from dataclasses import asdict

import numpy as np

import microbench
from microbench import agree, buffers, engine, faults, launch, metadata, pairs, stats
from microbench.cache import CacheFlush, plan_pool, report_path, slot_report, touched_slots
from microbench.collectives import COLLECTIVES, POISON, Collective, Context, pair_of, participates
from microbench.dtypes import DType
from microbench.errors import RunError, UsageError
from microbench.native import NativeUnavailable
from microbench.options import RunOptions, SizePlan, buffer_bytes_per_rank, cache_bytes_for, dtype_for, plan_size, \
    validate_for_ranks
from microbench.records import SCHEMA_VERSION, AppendFile, Output
from microbench.report import Progress, Table
from microbench.sizes import format_bytes, format_size
from microbench.device import DeviceChoice
from microbench.world import World

class Session:
    """One rank's view of a run: communicators, backend, output (rank 0), metadata."""

    def __init__(self, world: World, opts: RunOptions, argv: list[str], state: faults.RunState,
                 watchdog: faults.Watchdog):
        from microbench.backends.mpi import library

        self.opts, self.world = opts, world
        self.MPI = world.MPI
        self.reducer = world.reducer
        self.rank, self.nranks = world.rank, world.nranks
        self.lib = library(self.MPI) if self.MPI is not None else None
        self.argv = argv
        self.backend = self.python_backend = None  # set by setup_transport
        self.device: DeviceChoice = DeviceChoice("cpu", opts.buffer, None, None, 0, None)
        self.staged = False
        self.torch_meta: dict | None = None
        self.cache_bytes = cache_bytes_for(opts)
        self.loop = engine.PythonLoop()
        self.loop_notice: str | None = None
        self.output: Output | None = None
        self.run_id = None
        self.state, self.watchdog = state, watchdog
        self.progress: Progress | None = None
        self._progress_started = False

    # -- transport ----------------------------------------------------------------------------
    def setup_transport(self) -> None:
        """Pick the device, join the transport, check what it supports (collective; errors end every rank)."""
        error = None
        try:
            self._select_device()
            if self.opts.backend == "mpi":
                self._setup_mpi()
            else:
                self._setup_torch()
        except (UsageError, RunError) as exc:
            error = exc
        agree.raise_if_any(self.reducer, error)
        # Staging is decided per rank (is this node's MPI CUDA-aware?); the timed loop must be the same on
        # every rank, so one rank that stages makes every rank stage.
        self.staged = bool(self.reducer.allreduce(np.array([int(self.staged)], dtype=np.int64), "max")[0])
        self.python_backend = self.backend

    def _select_device(self) -> None:
        o = self.opts
        if o.device == "cpu":
            return
        from microbench import device

        kind = o.buffer if o.backend == "mpi" else "torch"
        module, count = device.cuda_runtime(kind)
        index = device.select_device(launch.discover().local_rank, count, o.gpus_per_node)
        if kind == "cupy":
            module.cuda.Device(index).use()
            name = module.cuda.runtime.getDeviceProperties(index)["name"].decode(errors="replace")
        else:
            module.cuda.set_device(index)
            name = module.cuda.get_device_name(index)
        l2 = device.l2_cache_bytes(kind, index)
        self.device = DeviceChoice("cuda", o.buffer, index, name, count, l2)
        self.cache_bytes = o.cache_size or l2

    def _setup_mpi(self) -> None:
        from microbench.backends.mpi import MPIBackend
        from microbench.world import require_mpi

        require_mpi(self.world, "--backend mpi")
        self.bench_comm = self.MPI.COMM_WORLD.Dup()
        self.backend = MPIBackend(self.bench_comm, self.MPI)
        if self.device.kind == "cuda":
            from microbench.device import cuda_aware_mpi

            aware = cuda_aware_mpi(self.lib.path)
            if not aware:
                if not self.opts.stage_host:
                    said = "says it is not" if aware is False else "cannot say whether it is"
                    raise RunError(f"{self.lib.short_name} {said} CUDA-aware, so it cannot move {self.opts.buffer} "
                                   f"device buffers: use a CUDA-aware MPI, add --stage-host to copy through the host "
                                   f"(timed), or set MICROBENCH_ASSUME_CUDA_AWARE=1 if you know it is")
                self.staged = True

    def _setup_torch(self) -> None:
        from microbench.backends import torch_dist

        o = self.opts
        name = torch_dist.resolve_backend(o.torch_backend, o.device)
        torch, dist = torch_dist.import_torch()
        if not dist.is_initialized():  # under mpiexec/srun: rank 0's TCPStore address travels over MPI
            torch_dist.init_process_group("gloo", self.rank, self.nranks, self.world.launcher,
                                          bcast=lambda obj: self.reducer.bcast(obj, root=0), timeout_s=o.timeout or 600)
        group = dist.new_group(backend=name)
        cls = torch_dist.TorchCudaBackend if o.device == "cuda" else torch_dist.TorchBackend
        self.backend = cls(group)
        self.torch_meta = torch_dist.torch_metadata(name, o.device, self.device.index)

    def _thread_level(self) -> str | None:
        """The thread support MPI granted (MPI_Query_thread): single unless MPI was initialised elsewhere."""
        if self.MPI is None:
            return None
        from microbench.backends.mpi import thread_levels

        granted = self.MPI.Query_thread()
        return {value: name for name, value in thread_levels(self.MPI).items()}.get(granted, str(granted))

    def in_place_for(self, coll: Collective) -> bool:
        """In place when asked, or when the transport's API has no out-of-place form (torch all_reduce, reduce)."""
        return self.opts.in_place or coll.name in getattr(self.backend, "in_place_only", ())

    def make_pool(self, plan: SizePlan, dtype: DType, nslots: int, ack: bool):
        """Host slots (filled, verified) and the buffers the transport moves (the same memory on the host)."""
        from microbench.device import DevicePool

        host = buffers.BufferPool(plan.send_count, plan.recv_count, dtype.numpy, nslots=nslots,
                                  policy=self.opts.huge_pages, ack_count=1 if ack else 0)
        torch_dtype = None
        if self.device.kind == "cuda" and self.opts.buffer == "torch":
            from microbench.backends.torch_dist import import_torch, torch_dtype as to_torch

            torch_dtype = to_torch(import_torch()[0], dtype.name)
        return DevicePool(host, self.device.kind, self.opts.buffer, torch_dtype)

    def make_flush(self):
        """The buffer cold mode and --flush write: twice the CPU cache, or twice the GPU L2 for device buffers."""
        if self.device.kind == "cuda":
            from microbench.device import DeviceFlush

            return DeviceFlush(2 * self.cache_bytes, "cupy" if self.opts.buffer == "cupy" else "torch")
        return CacheFlush(2 * self.cache_bytes)

    def choose_loop(self) -> None:
        """The timed loop (collective: every rank makes the same choice).

        torch: CUDA events (or a CUDA graph) on CUDA, else the Python loop. MPI, by ``--loop``: native is
        the C loop; python is the Python loop calling the C call shim; mpi4py is the Python loop calling
        mpi4py. auto is native, else mpi4py with one notice; python without a shim is mpi4py with one notice.
        Staged device buffers need the Python loop over mpi4py (the copies are Python calls)."""
        from microbench import native
        from microbench.backends.mpi import NativeMPIBackend

        o = self.opts
        if o.backend == "torch":
            if o.device == "cuda":
                from microbench.device import CudaEventLoop, CudaGraphLoop

                self.loop = CudaGraphLoop() if o.cuda_graph else CudaEventLoop()
            return
        if self.staged and o.loop == "native":
            raise RunError("--loop native cannot stage device buffers through the host; use --loop python")
        want = "mpi4py" if self.staged else o.loop
        if self.staged and o.loop == "python":
            self._notice("device buffers staged through the host: the Python loop calls mpi4py")
        if want == "mpi4py":
            return
        version = self.MPI.Get_library_version()
        if want == "python":
            shim, reason, where = self._everywhere(lambda: native.load_shim(
                native.build_shim(self.lib.prefix, self.lib.path), version))
            if shim is None:
                self._notice(f"C call shim unavailable{where}: {reason}; the Python loop calls mpi4py")
                return
            self.loop = native.ShimPythonLoop(shim)
        else:
            lib, reason, where = self._everywhere(lambda: native.load(
                native.build(self.lib.prefix, self.lib.path), version))
            if lib is None:
                if want == "native":
                    raise RunError(f"--loop native: the native loop is unavailable{where}: {reason}")
                self._notice(f"native loop unavailable{where}: {reason}; timing with the Python loop (mpi4py calls)")
                return
            self.loop = native.NativeLoop(lib)
        self.backend = NativeMPIBackend(self.bench_comm, self.MPI)

    def _everywhere(self, make):
        """Run ``make()`` on every rank (it raises NativeUnavailable where it cannot); collective.

        Returns (result, None, "") when every rank succeeded, else (None, the first failing rank's reason,
        " (on rank R)" or "" for rank 0): one rank without it means no rank uses it."""
        from microbench import native

        result, reason = None, None
        try:
            result = make()
        except native.NativeUnavailable as exc:
            reason = str(exc)
        first_missing = int(self.reducer.allreduce(
            np.array([self.rank if result is None else self.nranks], dtype=np.int64), "min")[0])
        if first_missing == self.nranks:
            return result, None, ""
        reason = self.reducer.bcast(reason, root=first_missing)
        return None, reason, (f" (on rank {first_missing})" if first_missing else "")

    def _notice(self, text: str) -> None:
        """A one-time notice: on stderr (rank 0) now, and as a note in the table."""
        self.loop_notice = text
        if self.rank == 0:
            print(f"microbench: notice: {text}", file=sys.stderr, flush=True)

    # -- setup ------------------------------------------------------------------------------
    def gather_hosts(self) -> None:
        lib = self.lib.version_string.splitlines()[0] if self.lib and self.lib.version_string else ""
        info = (platform.node(), metadata.versions(), lib)
        gathered = self.reducer.gather(info)
        self.hosts_by_rank = None
        meta = None
        if self.rank == 0:
            self.hosts_by_rank = [g[0] for g in gathered]
            per_host: dict[str, int] = {}
            for h in self.hosts_by_rank:
                per_host[h] = per_host.get(h, 0) + 1
            mismatched = sorted({f"{k}={v}" for g in gathered for k, v in g[1].items() if g[1][k] != gathered[0][1].get(k)}
                                | {f"mpi={g[2]}" for g in gathered if g[2] != gathered[0][2]})
            meta = (per_host, self.hosts_by_rank, mismatched)
        per_host, hosts_by_rank, mismatched = self.reducer.bcast(meta, root=0)
        self.ranks_per_host, self.hosts_by_rank, self.version_mismatch = per_host, hosts_by_rank, mismatched
        self.local_ranks = per_host[platform.node()]

    def validate(self) -> None:
        """Checks that need the rank count or the backend; collective, raises on every rank."""
        error = None
        try:
            validate_for_ranks(self.opts, self.nranks, self.local_ranks)
            if self.rank == 0:
                check_writable(self.opts)
            self.check_device_memory()
            for name in self.opts.benchmarks:
                coll = COLLECTIVES[name]
                why = self.backend.check_dtype(dtype_for(self.opts, coll), coll.reduces, self.opts.op)
                if why:
                    raise UsageError(f"{name}: {why}")
        except (UsageError, RunError) as exc:
            error = exc
        agree.raise_if_any(self.reducer, error)

    def check_device_memory(self) -> None:
        """Fail when the largest device buffers of the sweep do not fit in this rank's free GPU memory."""
        if self.device.kind != "cuda":
            return
        from microbench.device import free_device_bytes

        kind = self.opts.buffer if self.opts.backend == "mpi" else "torch"
        free = free_device_bytes(kind, self.device.index)
        sharing = max(1, -(-self.local_ranks // max(self.device.count, 1)))  # ranks per GPU
        for name in self.opts.benchmarks:
            coll = COLLECTIVES[name]
            for size in self.opts.sizes_for(name):
                plan = plan_size(coll, size, self.nranks, dtype_for(self.opts, coll), self.in_place_for(coll))
                need = buffer_bytes_per_rank(self.opts, coll, plan) * sharing if plan else 0
                if need > 0.9 * free:
                    raise RunError(f"{name} at {format_size(size)} needs {format_bytes(need)} on GPU "
                                   f"{self.device.index} ({self.device.name}) but {format_bytes(free)} is free; "
                                   f"lower the largest size (-m)")

    def write_run_record(self) -> None:
        o = self.opts
        self.run_id = self.reducer.bcast(uuid.uuid4().hex[:12] if self.rank == 0 else None)
        if self.rank != 0:
            return
        total = sum(len(o.sizes_for(b)) for b in o.benchmarks) + (2 * len(self.pair_schedule()[3]) if o.pairs else 0)
        self.progress = Progress(total)
        self.output = Output(o.out, o.csv, Table(progress=self.progress))
        self.state.close_records = self._write_end
        from microbench.backends.mpi import shadow_warning

        meta = {
            "type": "run",
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "microbench_version": microbench.__version__,
            "time_utc": metadata.utc_now(),
            "command": shlex.join(["microbench", *self.argv]),
            "backend": o.backend,
            "ranks": self.nranks,
            "hosts": list(self.ranks_per_host),
            "ranks_per_host": self.ranks_per_host,
            "launcher": launch.discover().launcher,
            "slurm": metadata.slurm_metadata(),
            "mpi": {**self.lib.as_record(), "thread_level": self._thread_level()} if self.lib else None,
            "torch": self.torch_meta,
            "device": {"kind": self.device.kind, "buffer": o.buffer, "index": self.device.index,
                       "name": self.device.name, "count": self.device.count, "l2_bytes": self.device.l2_bytes,
                       "staged_through_host": self.staged},
            "versions": metadata.versions(),
            "version_mismatch": self.version_mismatch,
            "conditions": {
                "huge_pages": o.huge_pages,
                "thp": buffers.thp_mode(),
                "page_size": buffers.page_size(),
                "timer": _timer_text(self.loop),
                "cpu": metadata.cpu_model(),
                "cpus_per_rank": launch.cpu_count(),
                "percentile_rel_error": round(stats.PERCENTILE_REL_ERROR, 5),
                "cache_bytes": self.cache_bytes,
                "cache_bytes_from": "--cache-size" if o.cache_size else (
                    "GPU L2 (device properties)" if self.device.kind == "cuda" else "sysfs (last-level cache of cpu0)"),
                "env": metadata.relevant_env(),
            },
            "options": asdict(o),
        }
        self.output.run(meta)
        if self.loop_notice:
            self.output.note(self.loop_notice)
        warning = shadow_warning(self.lib) if self.lib else None
        if warning:
            print(f"microbench: warning: {warning}", file=sys.stderr, flush=True)
            self.output.note(warning)
        if self.version_mismatch:
            text = f"library versions differ between ranks: {', '.join(self.version_mismatch)}"
            print(f"microbench: warning: {text}", file=sys.stderr, flush=True)
            self.output.note(text)

    # -- measuring --------------------------------------------------------------------------
    def context(self, coll: Collective) -> Context:
        o = self.opts
        peer, initiator = pair_of(self.rank, self.nranks) if coll.point_to_point else (None, False)
        return Context(rank=self.rank, nranks=self.nranks, op=o.op, root=o.root, in_place=self.in_place_for(coll),
                       window=o.window, peer=peer, initiator=initiator,
                       result_at_rank=getattr(self.backend, "in_place_result_at_rank", False))

    def counts(self, coll: Collective, size: int) -> tuple[int, int]:
        iters, warmup = engine.default_counts(coll, size)
        if self.opts.iterations is not None:
            iters = self.opts.iterations
        if self.opts.warmup is not None:
            warmup = self.opts.warmup
        return iters, warmup

    def section_lines(self, coll: Collective, dtype: DType) -> list[str]:
        o = self.opts
        hosts = len(self.ranks_per_host)
        transport = self.lib.short_name if o.backend == "mpi" else \
            f"{self.torch_meta['backend']}, torch {self.torch_meta['version']}"
        what = [f"backend {o.backend} ({transport})", f"{self.nranks} ranks on {hosts} host(s)",
                f"dtype {dtype.name}"]
        if self.device.kind == "cuda":
            what.append(f"{o.buffer} buffers on {self.device.name}" + (" staged through the host" if self.staged else ""))
        if coll.reduces:
            what.append(f"op {o.op}")
        if coll.in_place_ok:
            forced = self.in_place_for(coll) and not o.in_place
            what.append("in-place" + (" (the torch API has no out-of-place form)" if forced else "")
                        if self.in_place_for(coll) else "out-of-place")
        if coll.rooted:
            what.append(f"root {o.root}")
        if coll.point_to_point:
            pairs = self.nranks // 2
            what.append(f"{pairs} pair(s): rank i with i+{pairs}")
            if coll.name != "latency":
                what.append(f"window {o.window}")
        small, large = self.counts(coll, 1), self.counts(coll, engine.LARGE_MESSAGE_BYTES + 1)
        if o.time_budget:
            counts = f"iterations chosen for {o.time_budget:g} s per size, warmup {small[1]} / {large[1]}"
        elif o.iterations is not None:
            counts = f"iterations {o.iterations}, warmup {small[1]} / {large[1]} (sizes above 8K)"
        else:
            counts = (f"iterations {small[0]} / {large[0]} and warmup {small[1]} / {large[1]} "
                      f"(up to 8K / above)")
        cache = f"cache {o.cache}"
        if o.cache != "warm" or o.flush:
            cache += f" (against {format_bytes(self.cache_bytes)}{', flush before each iteration' if o.flush else ''})"
        lines = [", ".join(what),
                 f"loop {self._loop_text()}, {cache}, sync {o.sync}, check {'on' if o.check else 'off'}, {counts}",
                 "latency: avg/min/max across ranks of per-rank means; P50/P99 of all samples; "
                 "algbw = S / avg, busbw = algbw x %s" % _factor_text(coll)]
        return lines

    def call_path(self, loop) -> str:
        """How the loop reaches the transport: native (the C loop), shim (Python loop, C call shim), mpi4py,
        or torch."""
        return getattr(loop, "call_path", None) or ("torch" if self.opts.backend == "torch" else "mpi4py")

    def _loop_text(self) -> str:
        path = self.call_path(self.loop)
        if path == "shim":
            return "python (calls through microbench's C shim)"
        if path == "mpi4py":
            return "python (calls through mpi4py)"
        return self.loop.kind

    def run_benchmark(self, coll: Collective) -> list[str]:
        """Sweep every size of one benchmark; returns the sizes whose check failed."""
        o = self.opts
        dtype = dtype_for(self.opts, coll)
        ctx = self.context(coll)
        timing = participates(coll, ctx)
        failed = []
        if self.output:
            extra = (["cache"] if o.cache != "warm" else []) + (["first"] if o.first_call_samples > 1 else [])
            self.output.section({"benchmark": coll.name, "summary": coll.summary,
                                 "lines": self.section_lines(coll, dtype), "extra_columns": extra})
        skipped, rounded, measured = [], [], set()
        for size in o.sizes_for(coll.name):
            plan = plan_size(coll, size, self.nranks, dtype, ctx.in_place)
            if plan is None:
                skipped.append(size)
                continue
            if plan.size_bytes != size:
                rounded.append(f"{size} -> {plan.size_bytes}")
            if plan.size_bytes in measured:  # rounded onto a size already measured: one record per size
                continue
            measured.add(plan.size_bytes)
            self.watchdog.arm(f"{coll.name} at {plan.size_bytes} B")
            self._progress(f"{coll.name} {format_size(plan.size_bytes)}")
            for result in self.measure_size(coll, ctx, dtype, plan, size, timing):
                if result.get("check") == "fail":
                    failed.append(f"{format_size(size)} ({result['cache']})" if o.cache == "both" else format_size(size))
                self.output.result(result)
        unit = f"{self.nranks} x {dtype.name}" if coll.count_multiple(self.nranks) > 1 else dtype.name
        if skipped and self.output:
            self.output.note(f"{coll.name}: sizes {', '.join(map(str, skipped))} B skipped (smaller than one {unit})")
        if rounded and self.output:
            self.output.note(f"{coll.name}: sizes rounded down to whole elements of {unit} (B): {', '.join(rounded)}")
        return self.reducer.bcast(failed, root=0)

    def pair_schedule(self):
        """(participant ranks, labels, 'host' or 'rank', rounds of pairs) of the pairwise test."""
        members, labels, unit = pairs.choose_participants(self.hosts_by_rank)
        return members, labels, unit, pairs.serial(members) if self.opts.serial else pairs.round_robin(members)

    def run_pairs(self) -> list[str]:
        """The pairwise link test: a latency and a bandwidth matrix over every pair of participants.

        Returns the metrics whose --check failed."""
        o = self.opts
        failed: list[str] = []
        members, labels, unit, schedule = self.pair_schedule()
        index = {rank: i for i, rank in enumerate(members)}
        for metric, coll, size in (("latency", COLLECTIVES["latency"], o.pair_sizes[0]),
                                   ("bandwidth", COLLECTIVES["bw"], o.pair_sizes[1])):
            dtype = dtype_for(o, coll)
            plan = plan_size(coll, size, self.nranks, dtype, False)
            iters, warmup = self.counts(coll, plan.size_bytes)
            settings = engine.LoopSettings(iterations=iters, warmup=warmup, check=o.check, first_call=False)
            matrix: list[list[float | None]] = [[None] * len(members) for _ in members]
            check_errors = 0
            started = time.perf_counter()
            for number, round_pairs in enumerate(schedule, 1):
                partner = {a: (b, True) for a, b in round_pairs} | {b: (a, False) for a, b in round_pairs}
                peer, initiator = partner.get(self.rank, (None, False))
                ctx = Context(rank=self.rank, nranks=self.nranks, window=o.window, peer=peer, initiator=initiator)
                self.watchdog.arm(f"pairs {metric} round {number}/{len(schedule)} at {plan.size_bytes} B")
                self._progress(f"pairs {metric} round {number}/{len(schedule)}")
                pool = self.make_pool(plan, dtype, 1, ack=True)
                try:
                    calls, backend, loop = self._build(coll, ctx, pool)
                    m = engine.measure(coll, ctx, pool.slots, calls, loop, settings, backend.barrier(),
                                       lambda v: v, plan.size_bytes, timing=initiator, **self._copies(pool))
                finally:
                    pool.close()
                check_errors += m.check_errors or 0
                value = float(np.median(m.samples_us)) if initiator else None
                cells = self.reducer.gather((peer, value) if initiator else None)
                if self.rank == 0:
                    for rank, cell in enumerate(cells):
                        if cell is not None:
                            i, j = index[rank], index[cell[0]]
                            v = cell[1] if metric == "latency" else stats.bandwidth_gbps(plan.size_bytes, cell[1])
                            matrix[i][j] = matrix[j][i] = v
            check = self._check_verdict(check_errors) if o.check else None
            if check == "fail":
                failed.append(f"pairs {metric}")
            if self.rank == 0:
                self.output.result(self._pairs_record(metric, coll, plan, dtype, matrix, members, labels, unit,
                                                      schedule, iters, warmup, loop, check, started))
        return failed

    def _pairs_record(self, metric, coll, plan, dtype, matrix, members, labels, unit, schedule, iters, warmup,
                      loop, check, started) -> dict:
        found, rule = pairs.outliers(matrix, higher_is_worse=(metric == "latency"))
        bad_nodes, node_rule = pairs.node_outliers(matrix, higher_is_worse=(metric == "latency"))
        values = [v for i, row in enumerate(matrix) for j, v in enumerate(row) if j > i and v is not None]
        lat_values = values if metric == "latency" else [plan.size_bytes / (v * 1e9) * 1e6 for v in values]
        lat = {"avg": float(np.mean(lat_values)), "min": min(lat_values), "max": max(lat_values),
               "p50": float(np.median(lat_values)), "p10": float(np.percentile(lat_values, 10)),
               "p90": float(np.percentile(lat_values, 90)), "p99": float(np.percentile(lat_values, 99)),
               "samples": len(lat_values), "over": "pairs (each the p50 of its iterations)"}
        algbw = stats.bandwidth_gbps(plan.size_bytes, lat["avg"])
        return {
            "type": "result", "run_id": self.run_id, "benchmark": pairs.PAIRS, "metric": metric,
            "backend": self.opts.backend, "size_bytes": plan.size_bytes, "send_bytes": plan.io_send_bytes,
            "recv_bytes": plan.io_recv_bytes, "ranks": self.nranks, "dtype": dtype.name, "op": None,
            "in_place": None, "iterations": iters, "warmup": warmup, "latency_us": lat,
            "algbw_gbps": algbw, "busbw_gbps": algbw, "algbw_bytes": plan.size_bytes, "busbw_factor": 1.0,
            "check": check, "first_call_us": None, "loop": loop.kind, "call_path": self.call_path(loop),
            "cache": "warm", "sync": "none",
            "window": self.opts.window if metric == "bandwidth" else None,
            "unit": unit, "labels": labels, "participant_ranks": members,
            "matrix_unit": "us" if metric == "latency" else "GB/s", "matrix": matrix,
            "schedule": "serial" if self.opts.serial else "round-robin", "rounds": len(schedule),
            "outliers": [{"pair": [o.i, o.j], "labels": [labels[o.i], labels[o.j]], "value": o.value,
                          "z": round(o.z, 2)} for o in found],
            "outlier_rule": {"statistic": "modified z-score 0.6745 (x - median) / MAD over all pairs",
                             "direction": "above" if metric == "latency" else "below", **rule},
            "node_outliers": [{"index": i, "label": labels[i], "row_median": m, "z": round(z, 2)}
                              for i, m, z in bad_nodes],
            "node_outlier_rule": {"statistic": "the same rule over each participant's row median",
                                  "direction": "above" if metric == "latency" else "below", **node_rule},
            "time_utc": metadata.utc_now(), "wall_s": round(time.perf_counter() - started, 4),
        }

    def _progress(self, what: str) -> None:
        """Rank 0: advance the progress bar (one step per size or pairs round, announced before it runs)."""
        if self.rank == 0 and self.progress is not None:
            if self._progress_started:
                self.progress.done()
            self._progress_started = True
            self.progress.step(what)

    def cache_passes(self) -> list[str]:
        return ["warm", "cold"] if self.opts.cache == "both" else [self.opts.cache]

    def _build(self, coll: Collective, ctx: Context, pool):
        """Calls for the pool's slots on the session's loop; the Python loop where the C loop cannot take a size.

        Staged through the host (--stage-host), MPI moves the host slots and each call copies the device
        data across before and after, inside the timing."""
        if self.staged:
            calls = [pool.staged(k, coll.build(self.python_backend, slot, ctx)) for k, slot in enumerate(pool.slots)]
            return calls, self.python_backend, self.loop
        try:
            return [coll.build(self.backend, slot, ctx) for slot in pool.device_slots], self.backend, self.loop
        except NativeUnavailable:  # element counts above the C loop's int: Python loop for this size
            return [coll.build(self.python_backend, slot, ctx) for slot in pool.device_slots], self.python_backend, \
                engine.PythonLoop()

    @staticmethod
    def _copies(pool) -> dict:
        """push/pull for engine.measure when the transport's buffers are not the host slots."""
        return {"push": pool.push, "pull": pool.pull} if pool.copies else {}

    def measure_size(self, coll: Collective, ctx: Context, dtype: DType, plan: SizePlan, requested: int,
                     timing: bool) -> list[dict]:
        """Measure one size in each cache mode asked for; returns the result records (rank 0)."""
        records = []
        for index, mode in enumerate(self.cache_passes()):
            rec = self.measure_pass(coll, ctx, dtype, plan, requested, timing, mode, first_call=(index == 0))
            if rec is not None:
                records.append(rec)
        return records

    def measure_pass(self, coll: Collective, ctx: Context, dtype: DType, plan: SizePlan, requested: int,
                     timing: bool, mode: str, first_call: bool) -> dict | None:
        o = self.opts
        started = time.perf_counter()
        iters, warmup = self.counts(coll, plan.size_bytes)
        item = dtype.itemsize
        pool_plan = None
        if mode == "cold":
            uses = (1 if first_call else 0) + warmup + (iters if o.time_budget is None else 10**9)
            pool_plan = plan_pool(plan.send_count * item, plan.recv_count * item, self.cache_bytes, uses,
                                  o.max_memory)
        if pool_plan is not None and not pool_plan.evicts and self.output:
            self.output.note(f"{coll.name} at {format_size(plan.size_bytes)}: the cold pool ({pool_plan.slots} "
                             f"slot{'s' if pool_plan.slots != 1 else ''}, "
                             f"{format_bytes(pool_plan.pool_bytes)}, bounded by --max-memory) touches less than "
                             f"twice the cache per trip, so this size is not fully cold")
        flush = self.make_flush() if (mode == "cold" or o.flush) else None
        settings = engine.LoopSettings(iterations=iters, warmup=warmup, check=o.check,
                                       sync_barrier=(o.sync == "barrier"), time_budget_s=o.time_budget,
                                       first_call=first_call, flush_before=flush if mode == "cold" else None,
                                       flush_each=flush if o.flush else None)
        pool = self.make_pool(plan, dtype, pool_plan.slots if pool_plan else 1, ack=coll.point_to_point)
        try:
            calls, backend, loop = self._build(coll, ctx, pool)
            faults.test_hooks(coll.name, plan.size_bytes, self.rank)
            m = engine.measure(coll, ctx, pool.slots, calls, loop, settings, backend.barrier(),
                               lambda v: float(self.reducer.allreduce(np.array([v]), "max")[0]),
                               plan.size_bytes, timing, **self._copies(pool))
            # read before time_fresh_calls runs the loop again (a lean single call would overwrite them)
            timer = getattr(loop, "last_timer", None) or getattr(loop, "timer", "host")
            graph = ({"iterations_per_replay": loop.graph_iterations, "replays": loop.replays}
                     if getattr(loop, "graph_iterations", None) else None)
            extra_first = []
            if first_call and o.first_call_samples > 1:
                extra_first = engine.time_fresh_calls(
                    o.first_call_samples - 1, lambda: self._fresh_call(coll, ctx, dtype, plan), loop,
                    backend.barrier(), coll.per_iteration(ctx.window))
            huge = pool.huge_page_bytes()
            if report_path():
                for k in range(len(pool.slots)):
                    (pool.pull if pool.copies else (lambda k: None))(k)
                slot_report(report_path(), {"rank": self.rank, "benchmark": coll.name, "size_bytes": plan.size_bytes,
                                            "cache": mode, "slots": len(pool.slots),
                                            "uses": (1 if first_call else 0) + m.warmup + m.iterations,
                                            "touched": touched_slots(pool.slots, POISON)})
        finally:
            pool.close()
            if flush is not None:
                flush.close()
        latency = stats.summarize(m.samples_us, self.reducer)
        first = self._first_call([m.first_call_us, *extra_first] if (first_call and timing) else None) \
            if first_call else None
        check = self._check_verdict(m.check_errors) if m.check_errors is not None else None
        hp_total = int(self.reducer.allreduce(np.array([huge or 0], dtype=np.int64), "sum")[0])
        if o.samples:
            self._write_samples(coll, plan, mode, m.samples_us)
        if self.rank != 0:
            return None
        factor = coll.busbw_factor(self.nranks)
        s_bytes = coll.algbw_bytes(plan.size_bytes, self.nranks)
        algbw = stats.bandwidth_gbps(s_bytes, latency["avg"])
        result = {
            "type": "result",
            "run_id": self.run_id,
            "benchmark": coll.name,
            "backend": o.backend,
            "size_bytes": plan.size_bytes,
            "send_bytes": plan.io_send_bytes,
            "recv_bytes": plan.io_recv_bytes,
            "ranks": self.nranks,
            "dtype": dtype.name,
            "op": o.op if coll.reduces else None,
            "in_place": ctx.in_place if coll.in_place_ok else None,
            "iterations": m.iterations,
            "warmup": m.warmup,
            "latency_us": latency,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * factor,
            "algbw_bytes": s_bytes,
            "busbw_factor": factor,
            "check": check,
            "first_call_us": first,
            "loop": loop.kind,
            "call_path": self.call_path(loop),
            "timer": timer,
            "device": self.device.kind,
            "buffer": o.buffer,
            "cache": mode,
            "cache_bytes": self.cache_bytes,
            "pool_bytes": pool_plan.pool_bytes if pool_plan else plan.send_count * item + plan.recv_count * item,
            "pool_slots": pool_plan.slots if pool_plan else 1,
            "cache_evicts": pool_plan.evicts if pool_plan else None,
            "flush": o.flush,
            "sync": o.sync,
            "huge_pages": o.huge_pages,
            "huge_page_bytes": hp_total,
            "time_utc": metadata.utc_now(),
            "wall_s": round(time.perf_counter() - started, 4),
        }
        if plan.size_bytes != requested:
            result["requested_bytes"] = requested
        if o.backend == "torch":
            result["torch_backend"] = self.torch_meta["backend"]
        if self.staged:
            result["staged"] = True
        if graph:
            result["cuda_graph"] = graph
        if coll.rooted:
            result["root"] = o.root
        if coll.point_to_point:
            result["pairs"] = self.nranks // 2
            result["window"] = o.window if coll.name != "latency" else None
            result["pairs_inter_node"] = sum(
                1 for i in range(self.nranks // 2)
                if self.hosts_by_rank[i] != self.hosts_by_rank[i + self.nranks // 2])
        return result

    def _check_verdict(self, errors: int) -> str:
        """Collective: "pass" when no rank saw a mismatched element, else "fail"."""
        total = int(self.reducer.allreduce(np.array([errors], dtype=np.int64), "sum")[0])
        return "pass" if total == 0 else "fail"

    def _fresh_call(self, coll: Collective, ctx: Context, dtype: DType, plan: SizePlan):
        """One call bound to a newly mapped, written, never-used buffer set; and its release function."""
        pool = self.make_pool(plan, dtype, 1, ack=coll.point_to_point)
        coll.fill(pool.slots[0], ctx, 0)
        pool.push(0)
        calls, _, _ = self._build(coll, ctx, pool)
        return calls, pool.close

    def _first_call(self, values: list[float] | None) -> dict | None:
        """Cross-rank first-call figures: the very first call per rank, and the spread over fresh sets."""
        gathered = self.reducer.gather(values)
        if self.rank != 0:
            return None
        per_rank = {r: v for r, v in enumerate(gathered) if v is not None}
        if not per_rank:
            return None
        firsts = [v[0] for v in per_rank.values()]
        out = {"max": max(firsts), "min": min(firsts), "avg": sum(firsts) / len(firsts)}
        if len(gathered) <= 256:
            out["per_rank"] = {str(r): v[0] for r, v in per_rank.items()}
        k = len(next(iter(per_rank.values())))
        out["samples"] = k
        if k > 1:
            maxima = [max(v[j] for v in per_rank.values()) for j in range(k)]
            out["max_across_ranks"] = {"values": maxima, "min": min(maxima), "p50": float(np.median(maxima)),
                                       "max": max(maxima)}
        return out

    def _write_samples(self, coll: Collective, plan: SizePlan, cache: str, samples: np.ndarray | None) -> None:
        import json

        gathered = self.reducer.gather(None if samples is None else samples.tolist())
        if self.rank != 0:
            return
        with open(self.opts.samples, "a") as f:
            for rank, s in enumerate(gathered):
                if s is not None:
                    f.write(json.dumps({"type": "samples", "run_id": self.run_id, "benchmark": coll.name,
                                        "size_bytes": plan.size_bytes, "cache": cache, "rank": rank,
                                        "latency_us": s}) + "\n")

    def _write_end(self, status: str, reason: str) -> None:
        """Rank 0: the run's end record (called once, from whichever thread ends the run)."""
        if self.output:
            self.output.end({"type": "end", "run_id": self.run_id, "status": status, "reason": reason,
                             "time_utc": metadata.utc_now(), "results": len(self.output.results)})
            self.output.close()

    def finish(self, status: str, reason: str = "") -> None:
        self.watchdog.disarm()
        self.state.close(status, reason)


def _factor_text(coll: Collective) -> str:
    text = {2.0: "2(n-1)/n", 1.0: "1"}
    f4 = coll.busbw_factor(4)
    if abs(f4 - 1.5) < 1e-9:
        return "2(n-1)/n"
    if abs(f4 - 0.75) < 1e-9:
        return "(n-1)/n"
    return text.get(f4, f"{f4:g}")


def _timer_text(loop) -> str:
    """The run record's description of the clock behind the samples."""
    timer = getattr(loop, "timer", "host")
    if timer == "host":
        return "CLOCK_MONOTONIC (time.perf_counter_ns)"
    if timer == "tsc":
        return (f"TSC in the lean {loop.call_path} loop ({loop.ns_per_tick:.6f} ns/tick against CLOCK_MONOTONIC), "
                f"CLOCK_MONOTONIC elsewhere")
    return f"CUDA events ({timer})"


def check_writable(opts: RunOptions) -> None:
    """Rank 0, before anything is measured: every output file can be opened for appending."""
    for flag, path in (("--out", opts.out), ("--csv", opts.csv), ("--samples", opts.samples)):
        if not path:
            continue
        try:
            AppendFile(path).close()  # what the writer does: the folder made, the file created
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None

"""The leanest CPython loop over MPI that compiles nothing: what a Python loop costs without a C shim.

    mpiexec -n 2 python ctypes_loop.py latency|allreduce SIZES ITERATIONS WARMUP

It calls the libmpi that mpi4py loaded directly through ``ctypes.PyDLL`` (no mpi4py argument parsing,
no GIL release), with every argument converted once and bound (functools.partial) before the loop, and
times the loop as one interval like reference.c (no clock read per iteration). Whatever this costs above
reference.c is the price of CPython and its foreign-function call: the least a Python loop pays that
cannot compile a C shim (microbench's fallback when no mpicc works). Same buffers (page-aligned,
written), same benchmarks, sizes (comma-separated, in order, in one launch) and output lines as
reference.c: half the ping-pong round trip on rank 0, or the mean across ranks of the per-rank mean
MPI_Allreduce latency (float, sum), in microseconds, one JSON line per size.
"""

from __future__ import annotations

import ctypes
import functools
import json
import sys
import time

from mpi4py import MPI

from microbench.cluster.mpi_runtime import _loaded_libmpi


def handle(obj):
    """An mpi4py object's MPI handle as a ctypes value of the library's handle width (int or pointer)."""
    value = MPI._handleof(obj)
    return ctypes.c_int(value) if MPI._sizeof(obj) == 4 else ctypes.c_void_p(value)


def main() -> int:
    bench, sizes, iters, warmup = sys.argv[1], sys.argv[2], *(int(x) for x in sys.argv[3:5])
    lib = ctypes.PyDLL(_loaded_libmpi())
    for nbytes in (int(x) for x in sizes.split(",")):
        measure(lib, bench, nbytes, iters, warmup)
    return 0


def measure(lib, bench: str, nbytes: int, iters: int, warmup: int) -> None:
    """One size; rank 0 prints its JSON line."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    sbuf, rbuf = MPI.memory.allocate(max(nbytes, 1) + 4096), MPI.memory.allocate(max(nbytes, 1) + 4096)
    saddr = ctypes.c_void_p((MPI.memory(sbuf).address + 4095) // 4096 * 4096)
    raddr = ctypes.c_void_p((MPI.memory(rbuf).address + 4095) // 4096 * 4096)
    ctypes.memset(saddr, 1, nbytes)
    ctypes.memset(raddr, 0, nbytes)
    mpi_comm = handle(comm)
    clock = time.perf_counter
    if bench == "latency":
        send, recv = lib.MPI_Send, lib.MPI_Recv
        count, byte, peer, tag = ctypes.c_int(nbytes), handle(MPI.BYTE), ctypes.c_int(1 - rank), ctypes.c_int(1)
        status = ctypes.create_string_buffer(256)  # room for any library's MPI_Status
        status_ptr = ctypes.cast(status, ctypes.c_void_p)
        send_call = functools.partial(send, saddr, count, byte, peer, tag, mpi_comm)
        recv_call = functools.partial(recv, raddr, count, byte, peer, tag, mpi_comm, status_ptr)
        first, second = (send_call, recv_call) if rank == 0 else (recv_call, send_call)

        def pingpong(n: int) -> None:
            if rank > 1:
                return
            for _ in range(n):
                first()
                second()

        comm.Barrier()
        pingpong(warmup)
        t0 = clock()
        pingpong(iters)
        result = (clock() - t0) / (2 * iters) * 1e6
    else:
        count, flt, op = ctypes.c_int(nbytes // 4), handle(MPI.FLOAT), handle(MPI.SUM)
        allreduce = functools.partial(lib.MPI_Allreduce, saddr, raddr, count, flt, op, mpi_comm)
        comm.Barrier()
        for _ in range(warmup):
            allreduce()
        t0 = clock()
        for _ in range(iters):
            allreduce()
        mine = (clock() - t0) / iters * 1e6
        result = comm.reduce(mine, root=0)
        result = result / size if rank == 0 else None
    if rank == 0:
        print(json.dumps({"benchmark": bench, "size_bytes": nbytes, "avg_us": result}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())

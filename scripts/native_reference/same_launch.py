"""The C reference and microbench's loops in the same two processes, alternating: their cost without launch noise.

    mpiexec -n 2 python same_launch.py REFERENCE_SO SIZES [--again REFERENCE_SO_2] [--blocks N]

On a small VM the latency of a small message changes between launches (where the host places the two
vCPUs), so two launches differ by more than the loops do. Here one launch runs, per benchmark (latency,
allreduce, and iallreduce: MPI_Iallreduce + MPI_Wait back to back, a non-blocking benchmark's t_pure) and
size, N blocks; each block runs, in one of the orders of its loops (blocks take them in turn), the C
reference's own loop (``reference_measure`` from reference.c built as a shared object, called through ctypes:
one interval over all iterations), microbench's native loop and its Python loop through the C call shim
(``NativeLoop.run`` and ``ShimPythonLoop.run``, the timed loops microbench's engine calls, on buffers from
microbench's page-aligned ``HostRegion``) and, with ``--again``, ``c-again``: the same reference.c built a
second time into a library of its own. c-again runs the very code of the reference from another place in
memory, as the native loop does, so its ratio to C is the resolution of the measure: what neither loop's
code makes (ideally 1.000). Every block has its own barrier and warmup. A loop's figure is
the mean over blocks of its mean latency (half the round trip for latency; the mean across ranks for
allreduce and iallreduce, as reference.c), and its ratio to C the mean over blocks of the ratio within a block;
``ratio_to_c_median`` is the median over blocks of that ratio, which the few blocks a descheduled rank stalls
(tens of ms on a shared machine) cannot move.
Rank 0 prints one JSON line per (benchmark, size).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import random
import statistics

import numpy as np

from microbench.cluster.mpi_runtime import import_mpi, library
from microbench.measure.buffers import HostRegion
from microbench.measure.native import loops as native_loops
from microbench.measure.native import toolchain

WARMUP = 200
BENCHMARKS = ("latency", "allreduce", "iallreduce")


def iterations_for(nbytes: int) -> int:
    return 5000 if nbytes <= 4096 else 1000


def load_reference(path: str):
    """reference_measure of a shared build of reference.c."""
    measure = ctypes.CDLL(path).reference_measure
    measure.restype = ctypes.c_double
    measure.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return measure


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference_so", help="reference.c built with -shared -fPIC -Dmain=reference_main")
    ap.add_argument("sizes", help="bytes, comma-separated")
    ap.add_argument("--again", help="reference.c built a second time (its own file): adds the c-again loop")
    ap.add_argument("--blocks", type=int, default=24,
                    help="blocks per size (default 24: each order of 3 loops 4 times, of 4 loops once)")
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS), help=f"comma list (default {','.join(BENCHMARKS)})")
    args = ap.parse_args()

    MPI = import_mpi()
    lib = library(MPI)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    references = {"c": load_reference(args.reference_so)}
    if args.again:
        references["c-again"] = load_reference(args.again)
    names = (*references, "native", "python")
    # every order of the loops; blocks take them in turn, so that each loop runs at each place in a block
    # equally often (with a multiple of len(names)! blocks) and no loop gains from its place
    block_orders = tuple(itertools.permutations(names))
    version = MPI.Get_library_version()
    loops = {"native": native_loops.NativeLoop(native_loops.load(toolchain.build(lib.prefix, lib.path), version)),
             "python": native_loops.ShimPythonLoop(native_loops.load_shim(toolchain.build_shim(lib.prefix, lib.path), version))}
    rng = random.Random(7)  # the same orders on every rank

    for bench in args.benchmarks.split(","):
        for nbytes in (int(x) for x in args.sizes.split(",")):
            iters = iterations_for(nbytes)
            send, recv = HostRegion(nbytes), HostRegion(nbytes)
            send.bytes[:] = 1
            recv.bytes[:] = 0
            if bench == "latency":
                call = native_loops.NativeCall("pingpong", comm, MPI.BYTE, send=send.bytes, recv=recv.bytes, count=nbytes,
                                         peer=1 - rank, initiator=rank == 0, MPI=MPI)
            else:
                call = native_loops.NativeCall(bench, comm, MPI.FLOAT, MPI.SUM, send=send.view(0, nbytes // 4, np.dtype(np.float32)),
                                         recv=recv.view(0, nbytes // 4, np.dtype(np.float32)), count=nbytes // 4, MPI=MPI)
            prepared = {name: loop.prepare([call]) for name, loop in loops.items()}
            figures: dict[str, list[float]] = {name: [] for name in names}
            first = rng.randrange(len(block_orders))
            for block in range(args.blocks):
                for name in block_orders[(first + block) % len(block_orders)]:
                    if name in references:
                        figure = references[name](bench.encode(), nbytes, iters, WARMUP, rank, size)
                    else:
                        comm.Barrier()
                        durations = loops[name].run(prepared[name], WARMUP + iters)[WARMUP:]
                        mine = float(durations.mean()) / 1e3
                        if bench == "latency":
                            figure = mine / 2
                        else:
                            total = comm.reduce(mine, root=0)
                            figure = total / size if rank == 0 else 0.0
                    figures[name].append(figure)
            if rank == 0:
                per_block = {name: [v / c for v, c in zip(figures[name], figures["c"])] for name in names[1:]}
                ratios = {name: statistics.mean(r) for name, r in per_block.items()}
                medians = {name: statistics.median(r) for name, r in per_block.items()}
                print(json.dumps({"benchmark": bench, "size_bytes": nbytes, "blocks": args.blocks, "iterations": iters,
                                  "mean_us": {k: statistics.mean(v) for k, v in figures.items()},
                                  "ratio_to_c": ratios, "ratio_to_c_median": medians}), flush=True)
            del prepared, call
            comm.Barrier()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

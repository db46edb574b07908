#!/usr/bin/env python3
"""The harness's own cost: microbench against a plain C loop and plain mpi4py, side by side in one run.

For each launch round (interleaved, in a shuffled order each round) it starts, on the same MPI with the
same mpiexec and environment:

- ``c``: scripts/native_reference/reference.c compiled here with the MPI's mpicc (ping-pong, and a
  back-to-back MPI_Allreduce loop), timed as one interval over all iterations;
- ``native`` / ``python`` / ``python-mpi4py``: ``microbench run --loop native|python|mpi4py`` (avg latency
  from the record): the C loop; the Python loop through microbench's C call shim; the Python loop
  through mpi4py;
- ``mpi4py-bench``: ``python -m mpi4py.bench pingpong`` (latency only; half round trip, its own loop);
- ``mpi4py-loop``: the obvious mpi4py loop, ``comm.Allreduce(a, b)`` on numpy arrays (allreduce only);
- ``ctypes-loop``: scripts/native_reference/ctypes_loop.py, the leanest CPython loop that compiles nothing
  (libmpi called through ctypes with pre-bound arguments, one interval, no clock per iteration): the
  least a Python loop without a C shim pays.

Each variant's figure per launch is its average latency (us); the report gives, per benchmark and size,
the median over launches, and the ratio to the C reference as the median over rounds of the ratio within
a round (a variant against the C launch of the same round: the machine's speed can change between rounds,
and on a small VM small-message latency is bimodal between launches, so only launches close in time are
compared). It also times the default sweep of
the six core benchmarks at 2 ranks (``microbench run --np 2``), wall clock, median over launches.

    python scripts/bench_overhead.py --launches 7 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = (8, 1024, 65536)
ITERATIONS = {"latency": 10000, "allreduce": 10000}
WARMUP = 200

MPI4PY_LOOP = r"""
import sys, time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
size, iters, warmup = (int(x) for x in sys.argv[1:4])
a = np.ones(size // 4, np.float32); b = np.zeros_like(a)
comm.Barrier()
for i in range(warmup + iters):
    if i == warmup:
        t0 = time.perf_counter()
    comm.Allreduce(a, b)
mine = (time.perf_counter() - t0) / iters * 1e6
avg = comm.reduce(mine, root=0)
if comm.rank == 0:
    print(avg / comm.size)
"""


def mpiexec_prefix(nranks: int):
    from microbench import launch
    from microbench.backends.mpi import import_mpi, library

    lib = library(import_mpi(initialize=False))
    cmd, env = launch.mpiexec_command(lib.prefix, lib.abi, nranks)
    return cmd, env, lib


def run(cmd, env) -> str:
    import os

    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def build_reference(tmp: Path, lib) -> Path:
    from microbench.native import find_mpicc

    exe = tmp / "reference"
    subprocess.run([find_mpicc(lib.prefix), "-O2", "-o", str(exe), str(HERE / "native_reference" / "reference.c")],
                   check=True)
    return exe


def measure_c(exe, prefix, env, bench, size):
    line = run([*prefix, str(exe), bench, str(size), str(ITERATIONS[bench]), str(WARMUP)], env)
    return json.loads(line.strip().splitlines()[-1])["avg_us"]


#: microbench variant -> (--loop, the call_path its records must carry)
MICROBENCH_VARIANTS = {"native": ("native", "native"), "python": ("python", "shim"),
                       "python-mpi4py": ("mpi4py", "mpi4py")}


def measure_microbench(variant, prefix, env, tmp):
    loop, call_path = MICROBENCH_VARIANTS[variant]
    out = tmp / f"mb-{variant}.jsonl"
    out.unlink(missing_ok=True)
    figures = {}
    for bench in ("latency", "allreduce"):
        run([*prefix, sys.executable, "-m", "microbench", "run", bench, "-m", ",".join(map(str, SIZES)),
             "-i", str(ITERATIONS[bench]), "-x", str(WARMUP), "--loop", loop, "--out", str(out)], env)
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "result":
            if rec["call_path"] != call_path:
                raise SystemExit(f"{variant}: microbench --loop {loop} ran with call_path {rec['call_path']}, "
                                 f"not {call_path} (see its notice)")
            figures[(rec["benchmark"], rec["size_bytes"])] = rec["latency_us"]["avg"]
    return figures


def measure_mpi4py_bench(prefix, env, size):
    text = run([*prefix, sys.executable, "-m", "mpi4py.bench", "pingpong", "-m", str(size), "-n", str(size),
                "-l", str(ITERATIONS["latency"]), "-s", str(WARMUP), "--loop-large", str(ITERATIONS["latency"])], env)
    row = [l for l in text.splitlines() if l.strip() and not l.startswith("#")][0]
    return float(row.split("|")[1].split()[0]) * 1e6


def measure_ctypes_loop(prefix, env, bench, size):
    script = HERE / "native_reference" / "ctypes_loop.py"
    line = run([*prefix, sys.executable, str(script), bench, str(size), str(ITERATIONS[bench]), str(WARMUP)], env)
    return json.loads(line.strip().splitlines()[-1])["avg_us"]


def measure_mpi4py_loop(prefix, env, size):
    text = run([*prefix, sys.executable, "-c", MPI4PY_LOOP, str(size), str(ITERATIONS["allreduce"]), str(WARMUP)], env)
    return float(text.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=7, help="launch rounds (default 7)")
    ap.add_argument("--sweep-launches", type=int, default=3, help="timed default sweeps (default 3)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    prefix, env, lib = mpiexec_prefix(2)
    print(f"# MPI: {lib.short_name}; mpiexec {prefix[0]}; {args.launches} interleaved launch rounds")
    samples: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        exe = build_reference(tmp, lib)
        rng = random.Random(1)
        for round_ in range(args.launches):
            jobs = ["c", "native", "python", "python-mpi4py", "mpi4py-bench", "mpi4py-loop", "ctypes-loop"]
            rng.shuffle(jobs)
            for job in jobs:
                if job in ("c", "ctypes-loop"):
                    for bench in ("latency", "allreduce"):
                        for size in SIZES:
                            v = (measure_c(exe, prefix, env, bench, size) if job == "c"
                                 else measure_ctypes_loop(prefix, env, bench, size))
                            samples.setdefault((job, bench, size), []).append(v)
                elif job in MICROBENCH_VARIANTS:
                    for (bench, size), v in measure_microbench(job, prefix, env, tmp).items():
                        samples.setdefault((job, bench, size), []).append(v)
                elif job == "mpi4py-bench":
                    for size in SIZES:
                        samples.setdefault((job, "latency", size), []).append(measure_mpi4py_bench(prefix, env, size))
                else:
                    for size in SIZES:
                        samples.setdefault((job, "allreduce", size), []).append(measure_mpi4py_loop(prefix, env, size))
            print(f"# round {round_ + 1}/{args.launches} done", file=sys.stderr)

        sweep = []
        for _ in range(args.sweep_launches):
            t0 = time.perf_counter()
            run([sys.executable, "-m", "microbench", "run", "--np", "2", "--out", str(tmp / "sweep.jsonl")], {})
            sweep.append(time.perf_counter() - t0)

    report = {"mpi": lib.short_name, "launches": args.launches, "rows": [],
              "default_sweep_wall_s": {"median": statistics.median(sweep), "all": sweep}}
    print()
    print("| benchmark | size (B) | variant | median avg latency (us) | ratio to C (median of per-round) | "
          "per-launch (us) |")
    print("|---|---:|---|---:|---:|---|")
    for bench in ("latency", "allreduce"):
        for size in SIZES:
            ref_runs = samples[("c", bench, size)]
            for variant in ("c", "native", "python", "python-mpi4py", "ctypes-loop", "mpi4py-bench", "mpi4py-loop"):
                vals = samples.get((variant, bench, size))
                if not vals:
                    continue
                med = statistics.median(vals)
                ratio = statistics.median(v / c for v, c in zip(vals, ref_runs))
                report["rows"].append({"benchmark": bench, "size_bytes": size, "variant": variant,
                                       "median_us": med, "ratio_to_c": ratio, "launches_us": vals})
                print(f"| {bench} | {size} | {variant} | {med:.3f} | {ratio:.3f} | "
                      f"{', '.join(f'{v:.2f}' for v in vals)} |")
    print()
    print(f"default sweep (six benchmarks, 1 B..1 MiB, 2 ranks): median wall {statistics.median(sweep):.1f} s "
          f"over {len(sweep)} launches ({', '.join(f'{s:.1f}' for s in sweep)})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

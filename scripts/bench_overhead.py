#!/usr/bin/env python3
"""The harness's own cost: microbench against a plain C loop and plain mpi4py, side by side in one run.

Variants, all on the same MPI with the same mpiexec and environment, each launch measuring one benchmark
at all sizes in order (as microbench does):

- ``c``: scripts/native_reference/reference.c compiled here with the MPI's mpicc (ping-pong, and a
  back-to-back MPI_Allreduce loop), timed as one interval over all iterations;
- ``native`` / ``python`` / ``python-mpi4py``: ``microbench run --loop native|python|mpi4py`` (avg latency
  from the record): the C loop; the Python loop through microbench's C call shim; the Python loop
  through mpi4py;
- ``mpi4py-bench``: ``python -m mpi4py.bench pingpong`` (latency only; half round trip, its own loop; one
  launch per size, so its pair is three launches beside one C launch);
- ``mpi4py-loop``: the obvious mpi4py loop, ``comm.Allreduce(a, b)`` on numpy arrays (allreduce only);
- ``c-again``: the C reference once more, paired with C like every variant: its ratio is what launch noise
  alone makes of a pair ratio (ideally 1.000), the resolution of the paired figures;
- ``ctypes-loop``: scripts/native_reference/ctypes_loop.py, the leanest CPython loop that compiles nothing
  (libmpi called through ctypes with pre-bound arguments, one interval, no clock per iteration): the
  least a Python loop without a C shim pays.

Pairing: on a small VM, small-message latency changes between launches (the two vCPUs' placement on the
host: 0.16 to 0.8 us for the same 8-byte C ping-pong), in runs of a few seconds. So every launch of a
variant is paired with a C launch of the same benchmark right beside it (before or after, at random), and
each round runs every (variant, benchmark) pair once, in a shuffled order. A variant's ratio to C is the
median over rounds of the ratio within its pair; its latency is the median over its launches. It also
times the default sweep of the six core benchmarks at 2 ranks (``microbench run --np 2``), wall clock,
median over launches.

Then, to show the loops' own cost without the launch-to-launch noise, it runs
scripts/native_reference/same_launch.py ``--same-launch`` times: the C reference's loop (reference.c built
as a shared object), the same reference built a second time into its own library (``c-again``: its ratio
to C is what the measure resolves) and microbench's native and Python loops alternating in blocks inside one
launch (latency, allreduce, and iallreduce: MPI_Iallreduce + MPI_Wait, the t_pure of the non-blocking
benchmarks); the figure per launch is the mean over blocks of the ratio within a block, and the report gives
the median over launches.

    python scripts/bench_overhead.py --launches 21 [--same-launch 9] [--json out.json]
    python scripts/bench_overhead.py --launches 0 --sweep-launches 0 --same-launch 9   # the same-launch part only
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
import json, sys, time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
iters, warmup = (int(x) for x in sys.argv[2:4])
for size in (int(x) for x in sys.argv[1].split(",")):
    a = np.ones(size // 4, np.float32); b = np.zeros_like(a)
    comm.Barrier()
    for _ in range(warmup):
        comm.Allreduce(a, b)
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(a, b)
    mine = (time.perf_counter() - t0) / iters * 1e6
    avg = comm.reduce(mine, root=0)
    if comm.rank == 0:
        print(json.dumps({"size_bytes": size, "avg_us": avg / comm.size}), flush=True)
"""

#: variant -> the benchmarks it measures
VARIANTS = {"native": ("latency", "allreduce"), "python": ("latency", "allreduce"),
            "python-mpi4py": ("latency", "allreduce"), "ctypes-loop": ("latency", "allreduce"),
            "mpi4py-bench": ("latency",), "mpi4py-loop": ("allreduce",), "c-again": ("latency", "allreduce")}
#: microbench variant -> (--loop, the call_path its records must carry)
SAME_LAUNCH_BENCHMARKS = ("latency", "allreduce", "iallreduce")
MICROBENCH_VARIANTS = {"native": ("native", "native"), "python": ("python", "shim"),
                       "python-mpi4py": ("mpi4py", "mpi4py")}


def mpiexec_prefix(nranks: int):
    from microbench.cluster import launch
    from microbench.cluster.mpi_runtime import import_mpi, library

    lib = library(import_mpi(initialize=False))
    cmd, env = launch.mpiexec_command(lib.prefix, lib.abi, nranks)
    return cmd, env, lib


def run(cmd, env) -> str:
    import os

    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def build_reference(tmp: Path, lib, shared: bool = False, name: str = "reference") -> Path:
    """reference.c built with the MPI's mpicc into ``tmp/name``: the program, or (``shared``) a library
    exporting ``reference_measure`` for same_launch.py."""
    from microbench.measure.native.toolchain import find_mpicc

    target = tmp / (f"{name}.so" if shared else name)
    flags = ["-fPIC", "-shared", "-Dmain=reference_main"] if shared else []
    subprocess.run([find_mpicc(lib.prefix), "-O2", *flags, "-o", str(target),
                    str(HERE / "native_reference" / "reference.c")], check=True)
    return target


def measure_same_launch(so, again, prefix, env, blocks: int, benchmarks: str) -> dict[tuple[str, int], dict]:
    """One launch of same_launch.py with the c-again loop; (benchmark, size) -> its JSON line."""
    text = run([*prefix, sys.executable, str(HERE / "native_reference" / "same_launch.py"), str(so), sizes_arg(),
                "--again", str(again), "--blocks", str(blocks), "--benchmarks", benchmarks], env)
    return {(row["benchmark"], row["size_bytes"]): row for row in json_lines_rows(text)}


def json_lines_rows(text: str) -> list[dict]:
    """The JSON lines a reference program or same_launch.py printed (other output skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def json_lines(text: str) -> dict[int, float]:
    """size_bytes -> avg_us from the JSON lines a reference program printed."""
    return {row["size_bytes"]: row["avg_us"] for row in json_lines_rows(text)}


def sizes_arg() -> str:
    return ",".join(map(str, SIZES))


def measure_c(exe, prefix, env, bench) -> dict[int, float]:
    return json_lines(run([*prefix, str(exe), bench, sizes_arg(), str(ITERATIONS[bench]), str(WARMUP)], env))


def measure_microbench(variant, prefix, env, tmp, bench) -> dict[int, float]:
    loop, call_path = MICROBENCH_VARIANTS[variant]
    out = tmp / f"mb-{variant}.jsonl"
    out.unlink(missing_ok=True)
    run([*prefix, sys.executable, "-m", "microbench", "run", bench, "-m", sizes_arg(), "-i", str(ITERATIONS[bench]),
         "-x", str(WARMUP), "--loop", loop, "--out", str(out)], env)
    figures = {}
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "result":
            if rec["call_path"] != call_path:
                raise SystemExit(f"{variant}: microbench --loop {loop} ran with call_path {rec['call_path']}, "
                                 f"not {call_path} (see its notice)")
            figures[rec["size_bytes"]] = rec["latency_us"]["avg"]
    return figures


def measure_mpi4py_bench(prefix, env) -> dict[int, float]:
    figures = {}
    for size in SIZES:
        text = run([*prefix, sys.executable, "-m", "mpi4py.bench", "pingpong", "-m", str(size), "-n", str(size),
                    "-l", str(ITERATIONS["latency"]), "-s", str(WARMUP), "--loop-large", str(ITERATIONS["latency"])],
                   env)
        row = [l for l in text.splitlines() if l.strip() and not l.startswith("#")][0]
        figures[size] = float(row.split("|")[1].split()[0]) * 1e6
    return figures


def measure_variant(variant, bench, exe, prefix, env, tmp) -> dict[int, float]:
    """One launch (mpi4py-bench: one per size) of a variant at every size; size -> avg latency (us)."""
    if variant in MICROBENCH_VARIANTS:
        return measure_microbench(variant, prefix, env, tmp, bench)
    if variant == "c-again":
        return measure_c(exe, prefix, env, bench)
    if variant == "ctypes-loop":
        script = HERE / "native_reference" / "ctypes_loop.py"
        return json_lines(run([*prefix, sys.executable, str(script), bench, sizes_arg(), str(ITERATIONS[bench]),
                               str(WARMUP)], env))
    if variant == "mpi4py-bench":
        return measure_mpi4py_bench(prefix, env)
    return json_lines(run([*prefix, sys.executable, "-c", MPI4PY_LOOP, sizes_arg(), str(ITERATIONS["allreduce"]),
                           str(WARMUP)], env))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=7,
                    help="rounds; each launches every variant once per benchmark beside a C launch (default 7)")
    ap.add_argument("--sweep-launches", type=int, default=3, help="timed default sweeps (default 3)")
    ap.add_argument("--same-launch", type=int, default=5,
                    help="launches of same_launch.py, the loops alternating inside one launch (default 5; 0: none)")
    ap.add_argument("--blocks", type=int, default=24,
                    help="blocks per size in each same-launch run (default 24: each of the 24 orders of its four loops once)")
    ap.add_argument("--same-launch-benchmarks", default=",".join(SAME_LAUNCH_BENCHMARKS),
                    help="benchmarks of the same-launch part (default latency,allreduce,iallreduce)")
    ap.add_argument("--json", help="also write the figures here (rewritten as each part finishes)")
    args = ap.parse_args()

    prefix, env, lib = mpiexec_prefix(2)
    print(f"# MPI: {lib.short_name}; mpiexec {prefix[0]}; {args.launches} rounds of launches, each variant "
          f"beside a C launch")
    report = {"mpi": lib.short_name, "launches": args.launches, "pairing": "each variant launch beside a C launch"}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if args.launches > 0:
            report["rows"] = paired_rounds(args.launches, build_reference(tmp, lib), prefix, env, tmp)
            save()
        if args.same_launch > 0:
            try:
                so = build_reference(tmp, lib, shared=True)
                again = build_reference(tmp, lib, shared=True, name="reference-again")
                launches = [measure_same_launch(so, again, prefix, env, args.blocks, args.same_launch_benchmarks)
                            for _ in range(args.same_launch)]
            except (SystemExit, subprocess.CalledProcessError) as exc:  # keep the paired figures
                print(f"\nsame launch: failed ({exc}); the paired figures above stand", file=sys.stderr)
            else:
                report["same_launch"] = print_same_launch(launches, args.blocks, args.same_launch_benchmarks.split(","))
                save()
        sweep = []
        for _ in range(args.sweep_launches):
            t0 = time.perf_counter()
            run([sys.executable, "-m", "microbench", "run", "--np", "2", "--out", str(tmp / "sweep.jsonl")], {})
            sweep.append(time.perf_counter() - t0)
    if sweep:
        report["default_sweep_wall_s"] = {"median": statistics.median(sweep), "all": sweep}
        save()
        print()
        print(f"default sweep (six benchmarks, 1 B..1 MiB, 2 ranks): median wall {statistics.median(sweep):.1f} s "
              f"over {len(sweep)} launches ({', '.join(f'{s:.1f}' for s in sweep)})")
    return 0


def paired_rounds(launches: int, exe, prefix, env, tmp) -> list[dict]:
    """The rounds of paired launches; prints their table and returns its rows."""
    #: (variant, benchmark, size) -> per-round latency (us); ("c", ...) holds every C launch
    samples: dict[tuple[str, str, int], list[float]] = {}
    #: (variant, benchmark, size) -> per-round ratio to the C launch beside it
    ratios: dict[tuple[str, str, int], list[float]] = {}
    rng = random.Random(1)
    pairs = [(variant, bench) for variant, benches in VARIANTS.items() for bench in benches]
    for round_ in range(launches):
        rng.shuffle(pairs)
        for variant, bench in pairs:
            c_first = rng.random() < 0.5
            if c_first:
                ref = measure_c(exe, prefix, env, bench)
            got = measure_variant(variant, bench, exe, prefix, env, tmp)
            if not c_first:
                ref = measure_c(exe, prefix, env, bench)
            for size in SIZES:
                samples.setdefault(("c", bench, size), []).append(ref[size])
                samples.setdefault((variant, bench, size), []).append(got[size])
                ratios.setdefault((variant, bench, size), []).append(got[size] / ref[size])
        print(f"# round {round_ + 1}/{launches} done", file=sys.stderr)

    rows = []
    print()
    print("| benchmark | size (B) | variant | median avg latency (us) | ratio to C (median of pairs) | "
          "pair ratios p25..p75 | per-launch (us) |")
    print("|---|---:|---|---:|---:|---:|---|")
    for bench in ("latency", "allreduce"):
        for size in SIZES:
            for variant in ("c", "c-again", "native", "python", "python-mpi4py", "ctypes-loop", "mpi4py-bench",
                            "mpi4py-loop"):
                vals = samples.get((variant, bench, size))
                if not vals:
                    continue
                med = statistics.median(vals)
                pair = ratios.get((variant, bench, size))
                ratio = statistics.median(pair) if pair else 1.0
                spread = "" if not pair or len(pair) < 2 else "{:.2f}..{:.2f}".format(
                    *statistics.quantiles(pair, n=4, method="inclusive")[::2])
                rows.append({"benchmark": bench, "size_bytes": size, "variant": variant, "median_us": med,
                             "ratio_to_c": ratio, "launches_us": vals, "pair_ratios": pair})
                shown = (', '.join(f'{v:.2f}' for v in vals) if variant != "c"
                         else f"{len(vals)} launches, {min(vals):.2f}..{max(vals):.2f}")
                print(f"| {bench} | {size} | {variant} | {med:.3f} | {ratio:.3f} | {spread} | {shown} |")
    sys.stdout.flush()
    return rows


def print_same_launch(launches: list[dict], blocks: int, benchmarks: list[str]) -> list[dict]:
    """Prints the same-launch table (medians over launches) and returns its rows."""
    print()
    print(f"Same launch ({len(launches)} launches of same_launch.py, {blocks} blocks per size): "
          f"median over launches of the mean ratio within a block")
    print()
    print("| benchmark | size (B) | C (us) | native (us) | python (us) | native / C | python / C | "
          "native / C, median of blocks | native / C per launch | c-again / C | c-again / C per launch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    out = []
    for bench in benchmarks:
        for size in SIZES:
            rows = [launch[(bench, size)] for launch in launches]
            med = {v: statistics.median(r["mean_us"][v] for r in rows) for v in ("c", "native", "python")}
            ratio = {v: statistics.median(r["ratio_to_c"][v] for r in rows) for v in ("native", "python")}
            robust = statistics.median(r["ratio_to_c_median"]["native"] for r in rows)
            per_launch = [r["ratio_to_c"]["native"] for r in rows]
            again = [r["ratio_to_c"]["c-again"] for r in rows]
            ratio["c-again"] = statistics.median(again)
            out.append({"benchmark": bench, "size_bytes": size, "median_us": med, "ratio_to_c": ratio,
                        "launches": rows})
            print(f"| {bench} | {size} | {med['c']:.3f} | {med['native']:.3f} | {med['python']:.3f} | "
                  f"{ratio['native']:.3f} | {ratio['python']:.3f} | {robust:.3f} | "
                  f"{', '.join(f'{x:.3f}' for x in per_launch)} | {ratio['c-again']:.3f} | "
                  f"{', '.join(f'{x:.3f}' for x in again)} |")
    sys.stdout.flush()
    return out


if __name__ == "__main__":
    raise SystemExit(main())

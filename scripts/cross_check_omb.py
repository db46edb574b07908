#!/usr/bin/env python3
"""microbench beside the OSU Micro-Benchmarks (OMB) with matched options: the ratio per benchmark and size.

OMB is your own build (sites have it as a module; it is never downloaded here): point ``--omb-dir`` at the
folder that holds its programs (``.../libexec/osu-micro-benchmarks/mpi``, searched recursively). Every OMB
program with a microbench counterpart runs beside it on the same MPI, with the same mpiexec and environment:

| microbench | OMB | matched |
|---|---|---|
| latency, bw, bibw | osu_latency, osu_bw, osu_bibw | window 64, iterations, warmup |
| allreduce, reduce | osu_allreduce, osu_reduce | float32 (`-T mpi_float`), barrier between iterations |
| reduce_scatter (block) | osu_reduce_scatter_block | MPI_Reduce_scatter_block, float32, barrier |
| reduce_scatter (vector) | osu_reduce_scatter | MPI_Reduce_scatter (`--reduce-scatter-call vector`) |
| allgather, broadcast, alltoall | osu_allgather, osu_bcast, osu_alltoall | bytes, barrier between iterations |

OMB's collectives put an MPI_Barrier after every iteration, outside the timing: microbench runs them with
``--sync barrier``. Both get the same ``-i``/``-x`` at every size and sweep the same power-of-two sizes in one
launch. The figure compared is the average latency (OMB's Avg Latency, or the time per message its bandwidth
implies; microbench's ``latency_us.avg``). Launches are interleaved: each round runs every pair once in a
shuffled order, the two tools of a pair one after the other in a random order; a pair's ratio is
microbench / OMB within the round, and the table gives the median over rounds (single launches on a small VM
move by 2 to 3x, so one round proves nothing). OMB's output is read with ``microbench import omb``'s parser.

    python scripts/cross_check_omb.py --omb-dir /opt/omb/libexec/osu-micro-benchmarks/mpi --rounds 9 \\
        [--sizes 8:16M] [--report 8,64K,1M,16M] [-i 200 -x 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from microbench.units import format_size, parse_size, parse_sizes

#: (label, microbench arguments, OMB program, OMB arguments)
PAIRS = [
    ("latency", ["latency"], "osu_latency", []),
    ("bw", ["bw"], "osu_bw", []),
    ("bibw", ["bibw"], "osu_bibw", []),
    ("allreduce", ["allreduce", "--sync", "barrier"], "osu_allreduce", ["-T", "mpi_float"]),
    ("allgather", ["allgather", "--sync", "barrier"], "osu_allgather", []),
    ("reduce_scatter (block)", ["reduce_scatter", "--sync", "barrier", "--reduce-scatter-call", "block"],
     "osu_reduce_scatter_block", ["-T", "mpi_float"]),
    ("reduce_scatter (vector)", ["reduce_scatter", "--sync", "barrier", "--reduce-scatter-call", "vector"],
     "osu_reduce_scatter", ["-T", "mpi_float"]),
    ("broadcast", ["broadcast", "--sync", "barrier"], "osu_bcast", []),
    ("reduce", ["reduce", "--sync", "barrier"], "osu_reduce", ["-T", "mpi_float"]),
    ("alltoall", ["alltoall", "--sync", "barrier"], "osu_alltoall", []),
]


def find_programs(omb_dir: Path) -> dict[str, Path]:
    """OMB's programs under ``omb_dir`` by name (the first found of each)."""
    found: dict[str, Path] = {}
    for path in sorted(omb_dir.rglob("osu_*")):
        if path.is_file() and path.stat().st_mode & 0o111:
            found.setdefault(path.name, path)
    return found


def launcher(nranks: int) -> tuple[list[str], dict]:
    """The mpiexec of the MPI microbench uses, with microbench's own environment for local ranks."""
    from microbench.cluster import launch
    from microbench.cluster.mpi_runtime import import_mpi, library

    lib = library(import_mpi(initialize=False))
    return launch.mpiexec_command(lib.prefix, lib.abi, nranks)


def run(cmd: list[str], env: dict, timeout: int = 1800) -> str:
    import os

    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def measure_omb(program: Path, args: list[str], sizes: str, counts: list[str], prefix: list[str], env: dict,
                nranks: int) -> dict[int, float]:
    """OMB's average latency (us) per size, read with microbench's OMB parser."""
    from microbench.importers import omb

    omb_args = [*args, "-m", sizes, "-i", counts[0], "-x", counts[1]]
    text = run([*prefix, str(program), *omb_args], env)
    runs, _ = omb.parse(text, str(program), nranks, " ".join(omb_args))
    return {row.size_bytes: row.latency_us["avg"] for r in runs for row in r.rows}


def measure_microbench(args: list[str], sizes: str, counts: list[str], nranks: int, tmp: Path) -> dict[int, float]:
    """microbench's average latency (us) per size (the native loop, as by default)."""
    out = tmp / "mb.jsonl"
    out.unlink(missing_ok=True)
    run([sys.executable, "-m", "microbench", "run", "--np", str(nranks), *args, "-m", sizes, "-i", counts[0],
         "-x", counts[1], "--out", str(out)], {})
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["size_bytes"]: r["latency_us"]["avg"] for r in records if r["type"] == "result"}


def omb_size_range(sizes: str) -> str:
    """OMB's -m takes MIN:MAX in bytes."""
    lo, _, hi = sizes.partition(":")
    return f"{parse_size(lo)}:{parse_size(hi or lo)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--omb-dir", required=True, help="folder holding OMB's programs (searched recursively)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--sizes", default="8:16M", help="MIN:MAX swept by both tools in every launch (default 8:16M)")
    ap.add_argument("--report", default="8,64K,1M,16M", help="sizes shown in the table (default 8,64K,1M,16M)")
    ap.add_argument("-i", "--iterations", default="200", help="iterations at every size, both tools (default 200)")
    ap.add_argument("-x", "--warmup", default="20", help="warmup at every size, both tools (default 20)")
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--only", help="comma-separated labels of the pairs to run (default all)")
    ap.add_argument("--json", help="also write every launch's figures here")
    args = ap.parse_args()

    programs = find_programs(Path(args.omb_dir))
    pairs = [p for p in PAIRS if p[2] in programs and (not args.only or p[0] in args.only.split(","))]
    missing = [p[2] for p in PAIRS if p[2] not in programs]
    if not pairs:
        raise SystemExit(f"no OMB program with a microbench counterpart under {args.omb_dir}")
    prefix, env = launcher(args.np)
    counts = [args.iterations, args.warmup]
    report_sizes = parse_sizes(args.report)
    ratios: dict[tuple[str, int], list[float]] = {}
    launches: list[dict] = []
    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmpdir:
        for round_ in range(args.rounds):
            rng.shuffle(pairs)
            for label, mb_args, program, omb_args in pairs:
                order = ["omb", "microbench"] if rng.random() < 0.5 else ["microbench", "omb"]
                got = {}
                for tool in order:
                    if tool == "omb":
                        got[tool] = measure_omb(programs[program], omb_args, omb_size_range(args.sizes), counts,
                                                prefix, env, args.np)
                    else:
                        got[tool] = measure_microbench(mb_args, args.sizes, counts, args.np, Path(tmpdir))
                launches.append({"round": round_, "pair": label, "order": order, **got})
                for size in set(got["omb"]) & set(got["microbench"]):
                    ratios.setdefault((label, size), []).append(got["microbench"][size] / got["omb"][size])
            print(f"# round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print_table(ratios, [p[0] for p in PAIRS if p in pairs], report_sizes, args.rounds)
    if missing:
        print(f"\nnot found under --omb-dir (skipped): {', '.join(missing)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"launches": launches, "ratios": {f"{k[0]}@{k[1]}": v
                                                                                for k, v in ratios.items()}}, indent=1))
    return 0


def print_table(ratios: dict, labels: list[str], sizes: list[int], rounds: int) -> None:
    print(f"\nmicrobench / OMB average latency, median over {rounds} interleaved rounds (p25..p75 of the rounds)\n")
    print("| benchmark | " + " | ".join(format_size(s) for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for label in labels:
        cells = []
        for size in sizes:
            values = ratios.get((label, size))
            if not values:
                cells.append("-")
                continue
            q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
            cells.append(f"{statistics.median(values):.2f} ({q[0]:.2f}..{q[2]:.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())

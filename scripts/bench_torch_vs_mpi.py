#!/usr/bin/env python3
"""torch.distributed (gloo) against mpi4py at 2 ranks, side by side: allreduce latency at 8 B, busbw at 64 MiB.

Each launch round starts, in a shuffled order, ``microbench run --np 2 allreduce -m 8,64M`` with
``--backend torch`` (gloo, Python loop), ``--backend mpi --loop mpi4py`` (the same Python loop around
mpi4py) and ``--backend mpi --loop native`` (the native C loop). Figures per launch: the p50 latency at 8 B and the busbw at 64 MiB
(from the average latency, as nccl-tests); the report gives medians over launches and ratios to MPI.

    python scripts/bench_torch_vs_mpi.py --launches 5 [--json out.json]
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

VARIANTS = {
    "torch-gloo": ["--backend", "torch"],
    "mpi-mpi4py": ["--backend", "mpi", "--loop", "mpi4py"],
    "mpi-native": ["--backend", "mpi", "--loop", "native"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    lat: dict[str, list[float]] = {v: [] for v in VARIANTS}
    bw: dict[str, list[float]] = {v: [] for v in VARIANTS}
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        for launch in range(args.launches):
            order = list(VARIANTS)
            rng.shuffle(order)
            for variant in order:
                out = Path(tmp) / f"{variant}-{launch}.jsonl"
                cmd = [sys.executable, "-m", "microbench", "run", "--np", "2", "allreduce", "-m", "8,64M",
                       *VARIANTS[variant], "--out", str(out)]
                subprocess.run(cmd, check=True, capture_output=True)
                for line in out.read_text().splitlines():
                    rec = json.loads(line)
                    if rec.get("type") != "result":
                        continue
                    if rec["size_bytes"] == 8:
                        lat[variant].append(rec["latency_us"]["p50"])
                    else:
                        bw[variant].append(rec["busbw_gbps"])
            print(f"# launch {launch + 1}/{args.launches} done", file=sys.stderr)
    ref_lat, ref_bw = statistics.median(lat["mpi-native"]), statistics.median(bw["mpi-native"])
    print(f"# allreduce, 2 ranks, {args.launches} interleaved launches; medians over launches")
    print("| variant | p50 latency at 8 B (us) | vs mpi-native | busbw at 64 MiB (GB/s) | vs mpi-native |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for v in VARIANTS:
        ml, mb = statistics.median(lat[v]), statistics.median(bw[v])
        rows.append({"variant": v, "p50_latency_8B_us": ml, "busbw_64MiB_gbps": mb, "latency_launches": lat[v],
                     "busbw_launches": bw[v]})
        print(f"| {v} | {ml:.2f} | {ml / ref_lat:.1f}x | {mb:.3f} | {mb / ref_bw:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

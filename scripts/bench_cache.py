#!/usr/bin/env python3
"""Warm against cold cache, and first call against warm, for allreduce at 2 ranks (medians over launches).

Each launch runs ``microbench run --np 2 allreduce -m 8,4K:4M --cache both --first-call-samples K``, so the
warm and cold figures of a size come from the same launch, side by side. Per launch and size it takes the
p50 latency of the warm and the cold record; the report gives the median over launches of each and the
ratio of medians (cold / warm). For 8 B and 1 MiB it also gives the first call (max across ranks, the very
first call of the size on fresh buffers, and the median over the K fresh sets) against the warm p50.

    python scripts/bench_cache.py --launches 5 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--first-call-samples", type=int, default=5)
    ap.add_argument("--loop", default="auto")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    warm: dict[int, list[float]] = {}
    cold: dict[int, list[float]] = {}
    first: dict[int, list[float]] = {}
    first_fresh: dict[int, list[float]] = {}
    meta = None
    with tempfile.TemporaryDirectory() as tmp:
        for launch in range(args.launches):
            out = Path(tmp) / f"run{launch}.jsonl"
            cmd = [sys.executable, "-m", "microbench", "run", "--np", "2", "allreduce", "-m", "8,4K:4M",
                   "--cache", "both", "--first-call-samples", str(args.first_call_samples), "--loop", args.loop,
                   "--out", str(out)]
            subprocess.run(cmd, check=True, capture_output=True)
            for line in out.read_text().splitlines():
                rec = json.loads(line)
                if rec["type"] == "run":
                    meta = rec
                if rec["type"] != "result":
                    continue
                size = rec["size_bytes"]
                (warm if rec["cache"] == "warm" else cold).setdefault(size, []).append(rec["latency_us"]["p50"])
                if rec["first_call_us"]:
                    first.setdefault(size, []).append(rec["first_call_us"]["max"])
                    spread = rec["first_call_us"].get("max_across_ranks")
                    if spread:
                        first_fresh.setdefault(size, []).append(spread["p50"])
            print(f"# launch {launch + 1}/{args.launches} done", file=sys.stderr)

    cache_mib = meta["conditions"]["cache_bytes"] / (1 << 20)
    print(f"# allreduce, 2 ranks, {args.launches} launches, LLC {cache_mib:.0f} MiB, medians over launches of p50 (us)")
    print("| size (B) | warm p50 | cold p50 | cold / warm |")
    print("|---:|---:|---:|---:|")
    rows = []
    for size in sorted(cold):
        if size < 4096:
            continue
        w, c = statistics.median(warm[size]), statistics.median(cold[size])
        rows.append({"size_bytes": size, "warm_p50_us": w, "cold_p50_us": c, "ratio": c / w,
                     "warm_launches": warm[size], "cold_launches": cold[size]})
        print(f"| {size} | {w:.2f} | {c:.2f} | {c / w:.2f} |")
    print()
    print("| size (B) | first call, max across ranks (us) | first call on fresh sets, median (us) | warm p50 (us) "
          "| first / warm |")
    print("|---:|---:|---:|---:|---:|")
    firsts = []
    for size in (8, 1 << 20):
        f, ff, w = statistics.median(first[size]), statistics.median(first_fresh[size]), statistics.median(warm[size])
        firsts.append({"size_bytes": size, "first_call_max_us": f, "fresh_sets_p50_us": ff, "warm_p50_us": w,
                       "ratio": f / w, "first_launches": first[size]})
        print(f"| {size} | {f:.1f} | {ff:.1f} | {w:.2f} | {f / w:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"warm_cold": rows, "first_call": firsts}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Regenerate the reference figures in plots/ from the recorded run committed beside them.

    python scripts/plot_reference.py            # redraw plots/*.png from plots/reference.jsonl
    python scripts/plot_reference.py --record   # first record a new 2-rank run of the six core benchmarks

The figures are `microbench plot` output, nothing else: one PNG per benchmark (latency log-log with the
p10..p90 band, busbw beside it), at 100 dpi so the folder stays small. Only the benchmarks' figures are replaced
(and a benchmark's figure the record no longer makes removed); the folder's other figures
(`replay-prediction.png` from scripts/bench_replay.py, `frameworks-comm.png` from scripts/bench_frameworks.py)
are left as they are.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PLOTS = Path(__file__).resolve().parent.parent / "plots"
RECORD = PLOTS / "reference.jsonl"


def microbench(*args: str, quiet: bool = False) -> None:
    subprocess.run([sys.executable, "-m", "microbench", *args], check=True,
                   stdout=subprocess.DEVNULL if quiet else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help="record plots/reference.jsonl anew (microbench run --np 2, sizes 1:1M) first")
    args = parser.parse_args()
    if args.record:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp) / "reference.jsonl"
            microbench("run", "--np", "2", "-m", "1:1M", "--out", str(fresh))
            fresh.replace(RECORD)
    if not RECORD.exists():
        sys.exit(f"{RECORD} is missing: run with --record")
    with tempfile.TemporaryDirectory() as tmp:
        microbench("plot", str(RECORD), "-o", tmp, quiet=True)
        drawn = {png.name for png in Path(tmp).glob("*.png")}
        for stale in PLOTS.glob("*.png"):
            if stale.name not in drawn and is_benchmark_figure(stale.name):
                stale.unlink()
                print(f"removed {stale} (no longer in the record)")
        for name in sorted(drawn):
            shutil.copyfile(Path(tmp) / name, PLOTS / name)
            print(f"wrote {PLOTS / name}")
    return 0


def is_benchmark_figure(name: str) -> bool:
    """Whether ``name`` is a figure `microbench plot` draws for a benchmark (``<benchmark>[-overlap].png``)."""
    from microbench.benchmarks.table import COLLECTIVES
    stem = name.removesuffix(".png").removesuffix("-overlap")
    return stem in COLLECTIVES


if __name__ == "__main__":
    raise SystemExit(main())

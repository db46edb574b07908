#!/usr/bin/env python3
"""Regenerate the reference figures in plots/ from the recorded run committed beside them.

    python scripts/plot_reference.py            # redraw plots/*.png from plots/reference.jsonl
    python scripts/plot_reference.py --record   # first record a new 2-rank run of the six core benchmarks

The figures are `microbench plot` output, nothing else: one PNG per benchmark (latency log-log with the
p10..p90 band, busbw beside it), at 100 dpi so the folder stays small.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

PLOTS = Path(__file__).resolve().parent.parent / "plots"
RECORD = PLOTS / "reference.jsonl"


def microbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "microbench", *args], check=True)


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
    for old in PLOTS.glob("*.png"):
        old.unlink()
    microbench("plot", str(RECORD), "-o", str(PLOTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

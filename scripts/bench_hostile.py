#!/usr/bin/env python3
"""Cost of hostile inputs against benign inputs of the same size, side by side (ratios, in this process).

The quadratic inputs of the review are timed at doubling sizes: "growth" is the time over the time at half
the size (about 2 when the cost is linear, 4 when quadratic). Figures are the median of ``--repeat`` timings
(time.perf_counter).

- size grammar: ``parse_sizes("1<N spaces>x:8")`` (refused), N doubling (the former regex took
  0.34/1.27/5.1/20.9 s at 10k/20k/40k/80k: growth 4);
- depth guard: N MiB of backslashes, beside N MiB of letters (ratio), N doubling (the former guard was
  quadratic in the run's length);
- duplicate run ids: a warm read of F one-run files with the copy check against the same read without it.

    python scripts/bench_hostile.py [--repeat 3] [--files 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def timed(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.suppress(Exception):
            fn()
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", type=int, default=1000)
    args = ap.parse_args()
    from microbench.units import parse_sizes
    from microbench.workload.traces.jsondepth import DepthGuard

    print("size grammar        N  hostile s  growth")
    last = None
    for n in (10_000, 20_000, 40_000, 80_000, 160_000, 320_000):
        bad = timed(lambda: parse_sizes("1" + " " * n + "x:8"), args.repeat)
        print(f"{'':12}{n:>9}  {bad:9.4f}  {bad / last if last else float('nan'):6.2f}")
        last = bad

    print("depth guard       MiB  backslash s  letters s  ratio  growth")
    last = None
    for mib in (16, 32, 64, 128):
        def feed(byte: bytes) -> None:
            guard, block = DepthGuard(64, "x"), byte * (1 << 20)
            for _ in range(mib):
                guard.feed(block)
        bad, good = timed(lambda: feed(b"\\"), args.repeat), timed(lambda: feed(b"a"), args.repeat)
        print(f"{'':12}{mib:>9}  {bad:11.4f}  {good:9.4f}  {bad / good:5.2f}  "
              f"{bad / last if last else float('nan'):6.2f}")
        last = bad

    from fixtures.gate.synth import result, write_run

    from microbench.results import load
    with tempfile.TemporaryDirectory() as folder:
        os.environ["MICROBENCH_INDEX"] = str(Path(folder) / "index")
        base = Path(folder) / "runs"
        for i in range(args.files):
            write_run(base / f"n{i:05d}.jsonl", [result(b, 1 << k, 10.0) for b in ("allreduce", "bw")
                                                 for k in range(21)], run_id=f"r{i}")

        def read():
            with contextlib.redirect_stderr(io.StringIO()):
                load.load_table([base])
        read()  # the index is warm from here on
        with_check = timed(read, args.repeat)
        check, load.RunCopies.check = load.RunCopies.check, lambda self, part, source: None
        without = timed(read, args.repeat)
        load.RunCopies.check = check
    print(f"warm read of {args.files} files: with the copy check {with_check:.3f} s, without {without:.3f} s, "
          f"ratio {with_check / without:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

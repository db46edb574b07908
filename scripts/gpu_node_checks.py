#!/usr/bin/env python3
"""Checks of microbench's GPU paths that need a node with two GPUs or more; prints PASS/FAIL per item.

Run it on a multi-GPU node with microbench, torch (with NCCL) and, for the last item, a CUDA-aware MPI:

    python scripts/gpu_node_checks.py [--gpus N] [--out DIR]

Items:
1. graph replays aligned across ranks: with --cuda-graph, every rank's first timed replay is within 3x of
   its median replay (capture, upload and a barrier precede it);
2. in-place allgather and reduce_scatter on NCCL at n >= 2 pass --check (each rank's result at its block);
3. send/recv under graphs: latency and bw with --cuda-graph pass --check;
4. first call of latency excludes NCCL's two-rank communicator setup: the first call is within 100x of the
   warm p50 (it used to carry the communicator's creation, typically milliseconds);
5. CUDA-aware MPI selects the GPU before MPI_Init: the run record says so (UCX and Open MPI choose the
   network devices nearest the current GPU when MPI starts); skipped without mpirun and cupy.

Each item runs microbench under torchrun (or mpirun) and judges its records; the exit status is the number
of failed items.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def run(cmd: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def torchrun(gpus: int, *args: str) -> list[str]:
    return [shutil.which("torchrun") or "torchrun", f"--nproc-per-node={gpus}", "--no-python", "microbench",
            "run", "--backend", "torch", "--device", "cuda", *args]


def item_graph_alignment(gpus: int, out: Path) -> tuple[bool, str]:
    res, samples = out / "graphs.jsonl", out / "graphs-samples.jsonl"
    proc = run(torchrun(gpus, "--cuda-graph", "allreduce", "allgather", "-m", "8,64K,16M", "-i", "400",
                        "--out", str(res), "--samples", str(samples)))
    if proc.returncode:
        return False, proc.stderr[-2000:]
    worst = 0.0
    for row in records(samples):
        lat = sorted(row["latency_us"])
        worst = max(worst, row["latency_us"][0] / lat[len(lat) // 2])
    return worst <= 3.0, f"largest first-replay / median over ranks and sizes: {worst:.2f}"


def item_in_place(gpus: int, out: Path) -> tuple[bool, str]:
    res = out / "inplace.jsonl"
    proc = run(torchrun(gpus, "--in-place", "-c", "allgather", "reduce_scatter", "-m", "8,1M", "-i", "20",
                        "--out", str(res)))
    checks = [(r["benchmark"], r["size_bytes"], r["check"]) for r in records(res) if r["type"] == "result"]
    ok = proc.returncode == 0 and len(checks) == 4 and all(c == "pass" for _, _, c in checks)
    return ok, str(checks) if checks else proc.stderr[-2000:]


def item_p2p_graphs(gpus: int, out: Path) -> tuple[bool, str]:
    res = out / "p2p.jsonl"
    proc = run(torchrun(gpus, "--cuda-graph", "-c", "latency", "bw", "-m", "8,1M", "-i", "40", "--out", str(res)))
    checks = [(r["benchmark"], r["size_bytes"], r["check"]) for r in records(res) if r["type"] == "result"]
    ok = proc.returncode == 0 and len(checks) == 4 and all(c == "pass" for _, _, c in checks)
    return ok, str(checks) if checks else proc.stderr[-2000:]


def item_first_call(gpus: int, out: Path) -> tuple[bool, str]:
    res = out / "first.jsonl"
    proc = run(torchrun(gpus, "latency", "-m", "8", "-i", "1000", "--out", str(res)))
    rows = [r for r in records(res) if r["type"] == "result"]
    if proc.returncode or not rows:
        return False, proc.stderr[-2000:]
    first, p50 = rows[0]["first_call_us"]["max"], rows[0]["latency_us"]["p50"]
    return first <= 100 * p50, f"first call {first:.1f} us, warm p50 {p50:.1f} us"


def item_mpi_device_first(gpus: int, out: Path) -> tuple[bool, str]:
    import importlib.util

    mpirun = shutil.which("mpirun")
    if not mpirun or importlib.util.find_spec("cupy") is None:
        return True, "SKIP: needs mpirun and cupy"
    res = out / "mpi.jsonl"
    proc = run([mpirun, "-n", str(gpus), sys.executable, "-m", "microbench", "run", "--device", "cuda",
                "--buffer", "cupy", "allreduce", "-m", "8,1M", "-i", "20", "-c", "--out", str(res)])
    runs = [r for r in records(res) if r["type"] == "run"]
    if proc.returncode or not runs:
        return False, proc.stderr[-2000:]
    return bool(runs[0]["device"].get("selected_before_mpi_init")), f"device record: {runs[0]['device']}"


ITEMS = [("graph replays aligned across ranks", item_graph_alignment),
         ("in-place allgather/reduce_scatter checked on NCCL", item_in_place),
         ("send/recv under CUDA graphs checked", item_p2p_graphs),
         ("first call without the p2p communicator setup", item_first_call),
         ("GPU chosen before MPI_Init (CUDA-aware MPI)", item_mpi_device_first)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=None, help="GPUs (ranks) to use (default: all visible, at least 2)")
    ap.add_argument("--out", help="folder for the records (default: a temporary one)")
    args = ap.parse_args()
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 2:
        print(f"needs a node with 2 GPUs or more (this one has {torch.cuda.device_count()})", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-node-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, item in ITEMS:
        ok, detail = item(gpus, out)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    print(f"records in {out}; {failed} item(s) failed")
    return failed


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())

#!/usr/bin/env python3
"""Checks of microbench's GPU paths on a node with N GPUs (1, 2, 4, 8); prints PASS, FAIL or SKIP per item.

Run it on a GPU node with microbench, torch (with NCCL) and, for the MPI items, mpirun and cupy (a CUDA-aware MPI):

    python scripts/gpu_node_checks.py [--gpus N] [--out DIR] [--timeout SECONDS]

Each item runs microbench (under torchrun or mpirun, every command with a time limit) and judges what it
measured, so each can fail:

1. cold under graphs: with --cuda-graph --cache both, allreduce's cold p50 is at least its warm p50 at 8 B to
   64 KiB (cold used to read warm there: the untimed replay came after the only flush);
2. graph replays aligned across ranks at G = 1 (-i 10: one iteration per replay): every rank's first timed replay
   is within 3x of its median replay;
3. first calls apart: latency, bw, bibw and allreduce each have a first call recorded apart from the timed ones,
   and the timed p99 is within 20x of the p50 (a connection set up inside the timed iterations would show there);
4. in-place allgather and reduce_scatter on NCCL pass --check at sizes every rank count can split;
5. send/recv under graphs: latency and bw with --cuda-graph pass --check (N >= 2);
6. gloo on CUDA tensors passes --check;
7. two ranks on one GPU are refused under NCCL with one error line naming them (N >= 1: both ranks see GPU 0);
8. every rank on a GPU of its own: the run record's device.ranks has N distinct GPU UUIDs (N >= 2);
9. MPI with device buffers: the device flush (--cache cold) and staged in-place (--stage-host) pass --check
   at N ranks (needs mpirun and cupy);
10. NCCL connections: allreduce at 8 B to 64 MiB with --nccl-connect runtime and eager; the first calls' excess
   over the timed p50, summed over sizes, is smaller with eager (connections made with the communicator), and
   the run record says NCCL_RUNTIME_CONNECT 0 for eager (N >= 2).

An item that cannot run here (too few GPUs, no mpirun or cupy) is a SKIP, never a PASS; the exit status is the
number of failed items.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
TIMEOUT = 600


def run(cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", f"timed out after {TIMEOUT} s")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def results(path: Path) -> list[dict]:
    return [r for r in records(path) if r["type"] == "result"]


def torchrun(gpus: int, *args: str) -> list[str]:
    return [shutil.which("torchrun") or "torchrun", f"--nproc-per-node={gpus}", "--no-python", "microbench",
            "run", "--backend", "torch", "--device", "cuda", *args]


def failed(proc) -> tuple[str, str]:
    return FAIL, (proc.stderr or proc.stdout)[-2000:]


def item_cold_graphs(gpus: int, out: Path) -> tuple[str, str]:
    res = out / "cold-graphs.jsonl"
    proc = run(torchrun(gpus, "--cuda-graph", "--cache", "both", "allreduce", "-m", "8:64K", "-i", "200",
                        "--out", str(res)))
    if proc.returncode:
        return failed(proc)
    p50 = {(r["size_bytes"], r["cache"]): r["latency_us"]["p50"] for r in results(res)}
    sizes = sorted({s for s, _ in p50})
    warmer = [s for s in sizes if p50.get((s, "cold"), 0) < p50.get((s, "warm"), 0)]
    detail = ", ".join(f"{s} B cold/warm {p50[(s, 'cold')] / p50[(s, 'warm')]:.2f}" for s in sizes
                       if (s, "cold") in p50 and (s, "warm") in p50)
    return (PASS if sizes and not warmer else FAIL), detail or "no results"


def item_graph_alignment(gpus: int, out: Path) -> tuple[str, str]:
    if gpus < 2:
        return SKIP, "needs 2 GPUs"
    res, samples = out / "graphs.jsonl", out / "graphs-samples.jsonl"
    proc = run(torchrun(gpus, "--cuda-graph", "allreduce", "allgather", "-m", "8,64K,16M", "-i", "10",
                        "--out", str(res), "--samples", str(samples)))
    if proc.returncode:
        return failed(proc)
    per_replay = {r.get("cuda_graph", {}).get("iterations_per_replay") for r in results(res)}
    worst = 0.0
    for row in records(samples):
        lat = sorted(row["latency_us"])
        worst = max(worst, row["latency_us"][0] / lat[len(lat) // 2])
    ok = per_replay <= {1, None} and 0 < worst <= 3.0
    return (PASS if ok else FAIL), f"iterations per replay {sorted(map(str, per_replay))}; largest first / median {worst:.2f}"


def item_first_calls(gpus: int, out: Path) -> tuple[str, str]:
    if gpus < 2:
        return SKIP, "point to point needs 2 GPUs"
    res = out / "first.jsonl"
    proc = run(torchrun(gpus, "latency", "bw", "bibw", "allreduce", "-m", "8,1M", "-i", "200", "--out", str(res)))
    rows = results(res)
    if proc.returncode or not rows:
        return failed(proc)
    bad = [f"{r['benchmark']} {r['size_bytes']}" for r in rows
           if not r.get("first_call_us") or r["latency_us"]["p99"] > 20 * r["latency_us"]["p50"]]
    return (FAIL if bad else PASS), f"{len(rows)} results; without a first call apart or with p99 > 20 p50: {bad}"


def item_nccl_connect(gpus: int, out: Path) -> tuple[str, str]:
    """NCCL's runtime connection lands in the first call of the sizes that select a new algorithm; --nccl-connect
    eager (NCCL_RUNTIME_CONNECT=0) makes every connection with the communicator, so the first calls' excess over
    the timed p50, summed over sizes from 8 B (ring/LL) to 64 MiB (tree or NVLS where present), must shrink."""
    if gpus < 2:
        return SKIP, "a collective's connections need 2 GPUs"
    excess, recorded = {}, {}
    for mode in ("runtime", "eager"):
        res = out / f"connect-{mode}.jsonl"
        proc = run(torchrun(gpus, "--nccl-connect", mode, "allreduce", "-m", "8,64K,1M,64M", "-i", "50",
                            "--out", str(res)))
        rows = results(res)
        if proc.returncode or not rows:
            return failed(proc)
        run_line = next(r for r in records(res) if r["type"] == "run")
        recorded[mode] = (run_line.get("torch") or {}).get("nccl_runtime_connect")
        excess[mode] = sum(max(0.0, r["first_call_us"]["max"] - r["latency_us"]["p50"]) for r in rows)
    ok = recorded["eager"] == "0" and excess["eager"] < excess["runtime"]
    return (PASS if ok else FAIL), (f"first calls' excess over p50, summed: runtime {excess['runtime']:.0f} us, eager "
                                    f"{excess['eager']:.0f} us; recorded NCCL_RUNTIME_CONNECT {recorded}")


def item_in_place(gpus: int, out: Path) -> tuple[str, str]:
    res = out / "inplace.jsonl"
    small = 4 * gpus * 4  # float32: 4 elements per rank, so reduce_scatter splits it at any rank count
    proc = run(torchrun(gpus, "--in-place", "-c", "allgather", "reduce_scatter", "-m", f"{small},1M", "-i", "20",
                        "--out", str(res)))
    checks = [(r["benchmark"], r["size_bytes"], r["check"]) for r in results(res)]
    ok = proc.returncode == 0 and len(checks) == 4 and all(c == "pass" for _, _, c in checks)
    return (PASS if ok else FAIL), str(checks) if checks else proc.stderr[-2000:]


def item_p2p_graphs(gpus: int, out: Path) -> tuple[str, str]:
    if gpus < 2:
        return SKIP, "needs 2 GPUs"
    res = out / "p2p.jsonl"
    proc = run(torchrun(gpus, "--cuda-graph", "-c", "latency", "bw", "-m", "8,1M", "-i", "40", "--out", str(res)))
    checks = [(r["benchmark"], r["size_bytes"], r["check"]) for r in results(res)]
    ok = proc.returncode == 0 and len(checks) == 4 and all(c == "pass" for _, _, c in checks)
    return (PASS if ok else FAIL), str(checks) if checks else proc.stderr[-2000:]


def item_gloo_on_cuda(gpus: int, out: Path) -> tuple[str, str]:
    res = out / "gloo.jsonl"
    proc = run(torchrun(gpus, "--torch-backend", "gloo", "-c", "allreduce", "allgather", "-m", "8,64K", "-i", "20",
                        "--out", str(res)))
    checks = [r["check"] for r in results(res)]
    ok = proc.returncode == 0 and len(checks) == 4 and all(c == "pass" for c in checks)
    return (PASS if ok else FAIL), str(checks) if checks else proc.stderr[-2000:]


def item_shared_gpu_refused(gpus: int, out: Path) -> tuple[str, str]:
    proc = run(torchrun(2, "allreduce", "-m", "8", "-i", "5"), env={"CUDA_VISIBLE_DEVICES": "0"})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    ok = proc.returncode != 0 and len(errors) >= 1 and "share GPU" in errors[0] and "Traceback" not in proc.stderr
    return (PASS if ok else FAIL), errors[0] if errors else proc.stderr[-2000:]


def item_distinct_gpus(gpus: int, out: Path) -> tuple[str, str]:
    if gpus < 2:
        return SKIP, "needs 2 GPUs"
    res = out / "distinct.jsonl"
    proc = run(torchrun(gpus, "allreduce", "-m", "8", "-i", "5", "--out", str(res)))
    runs = [r for r in records(res) if r["type"] == "run"]
    if proc.returncode or not runs:
        return failed(proc)
    ranks = runs[0]["device"].get("ranks") or []
    uuids = {r.get("uuid") for r in ranks}
    ok = len(ranks) == gpus and len(uuids) == gpus and None not in uuids
    return (PASS if ok else FAIL), f"device.ranks: {ranks}"


def item_mpi_device(gpus: int, out: Path) -> tuple[str, str]:
    mpirun = shutil.which("mpirun")
    if not mpirun or importlib.util.find_spec("cupy") is None:
        return SKIP, "needs mpirun and cupy"
    verdicts = []
    for name, extra in (("cold", ["--cache", "cold", "allreduce"]),
                        ("staged in place", ["--stage-host", "--in-place", "allgather", "allreduce"])):
        res = out / f"mpi-{name.replace(' ', '-')}.jsonl"
        proc = run([mpirun, "-n", str(gpus), sys.executable, "-m", "microbench", "run", "--device", "cuda",
                    "--buffer", "cupy", *extra, "-m", "64,1M", "-i", "20", "-c", "--out", str(res)])
        checks = [r["check"] for r in results(res)]
        verdicts.append((name, proc.returncode, checks))
    ok = all(rc == 0 and checks and all(c == "pass" for c in checks) for _, rc, checks in verdicts)
    return (PASS if ok else FAIL), str(verdicts)


ITEMS = [("cold under CUDA graphs reads at least warm", item_cold_graphs),
         ("graph replays aligned across ranks (G = 1)", item_graph_alignment),
         ("first calls apart from the timed ones", item_first_calls),
         ("NCCL connections: runtime in the first calls, eager with the communicator", item_nccl_connect),
         ("in-place allgather/reduce_scatter checked on NCCL", item_in_place),
         ("send/recv under CUDA graphs checked", item_p2p_graphs),
         ("gloo on CUDA tensors checked", item_gloo_on_cuda),
         ("two ranks on one GPU refused under NCCL", item_shared_gpu_refused),
         ("every rank on a GPU of its own", item_distinct_gpus),
         ("MPI with device buffers: device flush, staged in place", item_mpi_device)]


def main() -> int:
    global TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=None, help="GPUs (ranks) to use (default: all visible)")
    ap.add_argument("--out", help="folder for the records (default: a temporary one)")
    ap.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds for each command (default 600)")
    args = ap.parse_args()
    TIMEOUT = args.timeout
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 1:
        print("needs a node with a GPU", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-node-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for name, item in ITEMS:
        verdict, detail = item(gpus, out)
        counts[verdict] += 1
        print(f"{verdict}  {name}: {detail}", flush=True)
    print(f"{gpus} GPU(s); {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped; records in {out}")
    return counts[FAIL]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())

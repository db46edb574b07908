#!/usr/bin/env python3
"""Checks of microbench's GPU paths on a GPU node (or several); prints PASS, FAIL or SKIP per item.

    python scripts/gpu_node_checks.py [--gpus N] [--out DIR] [--timeout SECONDS]
    python scripts/gpu_node_checks.py --nodes 2 --launcher srun-torchrun|srun|mpirun [--gpus 8]
    python scripts/gpu_node_checks.py --hostid-per-rank            # NCCL across ranks on one GPU

Each item runs microbench (every command with a time limit) and judges what it measured, with margins taken
from the noise it measured itself, so that each can fail on its defect and not without one:

1. cold under graphs: out-of-place allgather with --cuda-graph --cache both, twice; cold p50 above warm p50 by more
   than 3x the two warm runs' difference (at least 2 %) at the largest size, and below it nowhere;
2. graph replays aligned: every rank's first timed replay exceeds the median of its others by at most
   3 (p90 - p50) + 2 us (of the others);
3. first calls apart: latency, bw, bibw (N >= 2) and allreduce (with --nccl-connect eager) have a first call within
   10 p50 + 5 (p99 - p50) + 50 us (a connection made inside it costs milliseconds);
4. in-place allgather and reduce_scatter on NCCL pass --check at sizes every rank count can split;
5. send/recv under graphs: latency and bw with --cuda-graph pass --check (N >= 2);
6. gloo on CUDA tensors passes --check;
7. two ranks on one GPU refused under NCCL with one error line naming them, before NCCL says anything;
8. every rank on a GPU of its own: device.ranks has one distinct (host, UUID) per rank (and --nodes hosts);
9. MPI with device buffers: the device flush (--cache cold) and staged in-place (--stage-host) pass --check
   (SKIP without cupy, or where the MPI mpi4py loads is not CUDA-aware);
10. NCCL connections: allreduce 8 B to 64 MiB with --nccl-connect runtime and eager; the first calls' excess over
    p50 (summed) is smaller with eager by a margin, and the record says 0 for eager (SKIP where NCCL connects with
    the communicator anyway: NCCL < 2.22, NCCL_CUMEM_ENABLE=0, or no excess to remove);
11. launch-bound marked: eager allreduce at 8 B and 256 MiB; 256 MiB is not launch-bound, and every result whose
    record says launch-bound ends its table row with the mark;
12. the paired gate: --sync barrier allreduce at 8 B and 1 MiB; the start events waited behind the gate (at most
    1 % of the samples began before their launch ended);
13. the replay on NCCL (DDP over every rank) with GEMM compute slices runs and says its kernel is gemm.

--hostid-per-rank runs ranks on the first GPU, each with its own NCCL_HOSTID (NCCL then takes each for a host of
its own and connects them over its network transport): timings mean nothing there, correctness does. Items:
in-place allgather/reduce_scatter at n = 2 and 3, captured send/recv, the bw/bibw connection warm-up (first calls
within the bound of item 3), --nccl-connect eager recorded, and the replay on NCCL with a GEMM compute.

--nodes M runs every item across M nodes: ``srun-torchrun`` (srun starts one torchrun per node, which starts the
ranks), ``srun`` (one task per GPU, MPI's rendezvous) or ``mpirun`` (N ranks per node). Item 7 runs on the
first node only.

An item that cannot run here (too few GPUs, a missing tool, a prerequisite the node lacks) is a SKIP, never a
PASS; the exit status is the number of failed items.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
TIMEOUT = 600
SMALLEST_MARGIN = 0.02  #: item 1: the cold-warm margin is at least 2 %
NOISIEST = 0.2  #: item 1: warm runs that differ by more than this are too noisy to judge (SKIP)


def run(cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    print("$", shlex.join(cmd), flush=True)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return subprocess.CompletedProcess(cmd, 124, out, f"timed out after {TIMEOUT} s")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def results(path: Path) -> list[dict]:
    return [r for r in records(path) if r["type"] == "result"]


def failed(proc) -> tuple[str, str]:
    return FAIL, (proc.stderr or proc.stdout)[-2000:]


# ------------------------------------------------------------------------------ how ranks are started
@dataclass
class Launch:
    """How the items start ranks: ``gpus`` per node on ``nodes`` nodes, by ``launcher``; ``hostid``: every rank on
    the first GPU with an NCCL_HOSTID of its own."""

    gpus: int
    nodes: int = 1
    launcher: str = "torchrun"  #: torchrun, srun-torchrun, srun or mpirun
    hostid: bool = False
    port: int = 29517

    @property
    def ranks(self) -> int:
        return self.gpus * self.nodes

    def microbench(self, *args: str, ranks: int | None = None, backend: str = "torch") -> list[str]:
        """``microbench run`` on the node(s): the torch backend on CUDA unless ``backend`` is "mpi"."""
        run_args = ["run", *(("--backend", "torch", "--device", "cuda") if backend == "torch" else ()), *args]
        return self.command(["microbench", *run_args], ranks)

    def command(self, argv: list[str], ranks: int | None = None) -> list[str]:
        """``argv`` (a microbench command) started on ``ranks`` ranks (default: all) as this launch says."""
        per_node = ranks or self.gpus
        if self.hostid:  # each rank its own NCCL host; the wrapper reads torchrun's LOCAL_RANK
            wrapped = ["bash", "-c", 'NCCL_HOSTID="microbench-node-check-$LOCAL_RANK" exec "$@"', "bash", *argv]
            return [_torchrun(), f"--nproc-per-node={per_node}", "--no-python", *wrapped]
        if self.launcher == "torchrun" or self.nodes == 1 and self.launcher == "srun-torchrun":
            return [_torchrun(), f"--nproc-per-node={per_node}", "--no-python", *argv]
        if self.launcher == "srun-torchrun":
            return ["srun", f"--nodes={self.nodes}", "--ntasks-per-node=1", _torchrun(), f"--nnodes={self.nodes}",
                    f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={_first_node()}:{self.port}", "--rdzv-id=microbench-node-check",
                    "--no-python", *argv]
        if self.launcher == "srun":
            return ["srun", f"--nodes={self.nodes}", f"--ntasks-per-node={per_node}", f"--gpus-per-node={per_node}",
                    sys.executable, "-m", *argv]
        if self.launcher == "mpirun":
            return [_mpirun(), "-n", str(per_node * self.nodes), "--map-by", f"ppr:{per_node}:node",
                    sys.executable, "-m", *argv]
        raise SystemExit(f"unknown launcher {self.launcher}")

    def env(self) -> dict:
        return {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]} if self.hostid else {}

    def one_node(self) -> "Launch":
        return Launch(self.gpus, 1, "torchrun", False, self.port)


def _torchrun() -> str:
    return shutil.which("torchrun") or "torchrun"


def _mpirun() -> str:
    """The mpiexec that belongs to the MPI mpi4py loads (microbench's own choice), else mpirun on the PATH."""
    try:
        from microbench.cluster import launch
        from microbench.cluster.mpi_runtime import import_mpi, library

        lib = library(import_mpi(initialize=False))
        return launch.mpiexec_command(lib.prefix, lib.abi, 1)[0][0]
    except Exception:  # noqa: BLE001 - no mpi4py: the PATH's
        return shutil.which("mpirun") or "mpirun"


def _first_node() -> str:
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if nodes:
        proc = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.split():
            return proc.stdout.split()[0]
    return os.uname().nodename


# ------------------------------------------------------------------------------ judgements (pure: tested on CPU)
def p50_by(rows: list[dict]) -> dict[tuple[int, str], float]:
    return {(r["size_bytes"], r.get("cache") or "warm"): r["latency_us"]["p50"] for r in rows}


def judge_cold(first: list[dict], second: list[dict]) -> tuple[str, str]:
    """Item 1 from two runs of --cache both: the margin is 3x the largest relative difference between the two
    runs' warm p50s (at least SMALLEST_MARGIN); cold must exceed warm by it at the largest size and fall below warm
    by it nowhere. Warm runs that differ by more than NOISIEST cannot judge a few per cent: SKIP."""
    a, b = p50_by(first), p50_by(second)
    sizes = sorted(s for s, c in a if c == "warm" and (s, "cold") in a and (s, "warm") in b and (s, "cold") in b)
    if not sizes:
        return FAIL, "no size measured warm and cold in both runs"
    noise = max(abs(a[(s, "warm")] / b[(s, "warm")] - 1) for s in sizes)
    if noise > NOISIEST:
        return SKIP, f"warm p50 differs by {noise:.0%} between two identical runs: too noisy to judge"
    margin = max(3 * noise, SMALLEST_MARGIN)
    ratio = {s: statistics.median([a[(s, "cold")] / a[(s, "warm")], b[(s, "cold")] / b[(s, "warm")]]) for s in sizes}
    text = ", ".join(f"{s} B {ratio[s]:.3f}" for s in sizes) + f"; margin {margin:.1%}"
    ok = ratio[sizes[-1]] > 1 + margin and all(r >= 1 - margin for r in ratio.values())
    return (PASS if ok else FAIL), f"cold/warm p50: {text}"


def judge_alignment(samples: list[dict], per_replay: set) -> tuple[str, str]:
    """Item 2: every rank's first timed replay exceeds the median of its others by at most 3 (p90 - p50) + 2 us,
    p50 and p90 of the others (the first one's own excess would widen its bound)."""
    worst, where = 0.0, ""
    for row in samples:
        lat = sorted(row["latency_us"][1:])
        if len(lat) < 2:
            continue
        p50, p90 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.9 * len(lat)))]
        over = row["latency_us"][0] - p50 - (3 * (p90 - p50) + 2.0)
        if over > worst:
            worst, where = over, f"{row.get('benchmark')} {row.get('size_bytes')} B rank {row.get('rank')}"
    if not samples:
        return FAIL, "no samples recorded"
    detail = f"iterations per replay {sorted(map(str, per_replay))}"
    return ((FAIL, f"{detail}; first replay {worst:.2f} us beyond its bound at {where}") if worst > 0
            else (PASS, f"{detail}; every first replay within 3 (p90 - p50) + 2 us of its median"))


def first_call_bound(row: dict) -> float:
    """Item 3's bound on a first call (us): 10 p50 + 5 (p99 - p50) + 50 us."""
    lat = row["latency_us"]
    return 10 * lat["p50"] + 5 * (lat["p99"] - lat["p50"]) + 50.0


def judge_first_calls(rows: list[dict]) -> tuple[str, str]:
    """Item 3: every result has a first call apart, within ``first_call_bound``."""
    if not rows:
        return FAIL, "no results"
    bad = [f"{r['benchmark']} {r['size_bytes']} B: {(r.get('first_call_us') or {}).get('max', 'none')} us > "
           f"{first_call_bound(r):.0f}" for r in rows
           if not r.get("first_call_us") or r["first_call_us"]["max"] > first_call_bound(r)]
    return (FAIL, "; ".join(bad)) if bad else (PASS, f"{len(rows)} first calls within 10 p50 + 5 (p99 - p50) + 50 us")


def judge_checks(rows: list[dict], expected: int, rc: int) -> tuple[str, str]:
    """Items 4-6, 9 and the hostid items: the run succeeded and every expected result passed --check."""
    checks = [(r["benchmark"], r["size_bytes"], r.get("check")) for r in rows]
    ok = rc == 0 and len(checks) == expected and all(c == "pass" for _, _, c in checks)
    return (PASS if ok else FAIL), f"exit {rc}; {checks}"


def judge_refusal(rc: int, stderr: str) -> tuple[str, str]:
    """Item 7: a non-zero exit with one microbench error line naming the shared GPU, and nothing from NCCL."""
    errors = [line for line in stderr.splitlines() if line.startswith("microbench: error:")]
    nccl_first = any(s in stderr for s in ("Duplicate GPU", "DistBackendError", "ncclInvalidUsage", "Traceback"))
    ok = rc != 0 and len(errors) == 1 and "share GPU" in errors[0] and not nccl_first
    return (PASS if ok else FAIL), errors[0] if errors else stderr[-2000:]


def judge_distinct(run_line: dict | None, ranks: int, nodes: int) -> tuple[str, str]:
    """Item 8: device.ranks has one entry per rank, one distinct (host, UUID) each, on ``nodes`` hosts."""
    if not run_line:
        return FAIL, "no run record"
    gpus = (run_line.get("device") or {}).get("ranks") or []
    pairs = {(g.get("host"), g.get("uuid")) for g in gpus}
    hosts = {g.get("host") for g in gpus}
    ok = len(gpus) == ranks and len(pairs) == ranks and all(u for _, u in pairs) and len(hosts) == nodes
    return (PASS if ok else FAIL), f"{len(gpus)} ranks, {len(pairs)} distinct GPUs on {len(hosts)} host(s): {gpus}"


def judge_connect(excess: dict[str, float], recorded: dict[str, str | None]) -> tuple[str, str]:
    """Item 10: eager records "0"; where runtime connection was in effect and visible, eager removes it. The margin
    is the larger of 50 us and 20 % of the runtime excess (first calls vary by tens of us run to run)."""
    from microbench.cluster.torch_runtime import connects_at_runtime

    text = (f"first calls' excess over p50, summed: runtime {excess['runtime']:.0f} us, eager {excess['eager']:.0f} us;"
            f" recorded NCCL_RUNTIME_CONNECT {recorded}")
    if recorded.get("eager") != "0":
        return FAIL, text
    if not connects_at_runtime(recorded.get("runtime")):
        return SKIP, f"NCCL connects with the communicator here ({recorded.get('runtime')}); {text}"
    margin = max(50.0, 0.2 * excess["runtime"])
    if excess["runtime"] <= margin:
        return SKIP, f"no connection cost visible in the runtime first calls (margin {margin:.0f} us); {text}"
    return (PASS if excess["eager"] < excess["runtime"] - margin else FAIL), f"{text}; margin {margin:.0f} us"


def judge_launch_marks(rows: list[dict], stdout: str) -> tuple[str, str]:
    """Item 11: the largest size is not launch-bound, and every launch-bound result's table row carries the mark."""
    from microbench.run.terminal import LAUNCH_MARK

    if not rows or any("launch" not in r for r in rows):
        return FAIL, "results without launch facts"
    largest = max(rows, key=lambda r: r["size_bytes"])
    marked = [line for line in stdout.splitlines() if line.endswith(LAUNCH_MARK)]
    bound = [r for r in rows if r["launch"]["bound"]]
    facts = {r["size_bytes"]: r["launch"] for r in rows}
    ok = not largest["launch"]["bound"] and len(marked) == len(bound)
    return (PASS if ok else FAIL), f"launch facts {facts}; {len(marked)} row(s) marked, {len(bound)} bound"


def judge_gate(rows: list[dict]) -> tuple[str, str]:
    """Item 12: paired samples gated (``launch.gate_us``), at most 1 % of them ungated."""
    if not rows or any("gate_us" not in (r.get("launch") or {}) for r in rows):
        return FAIL, f"no gate recorded: {[r.get('launch') for r in rows]}"
    bad = [r for r in rows if r["launch"]["bound"]]
    return (FAIL if bad else PASS), str({r["size_bytes"]: r["launch"] for r in rows})


# ------------------------------------------------------------------------------ items
def item_cold_graphs(launch: Launch, out: Path) -> tuple[str, str]:
    runs = []
    for n in (1, 2):
        res = out / f"cold-graphs-{n}.jsonl"
        proc = run(launch.microbench("--cuda-graph", "--cache", "both", "allgather", "-m", "64K,1M,4M,16M",
                                     "-i", "500", "--out", str(res)), launch.env())
        if proc.returncode:
            return failed(proc)
        runs.append(results(res))
    return judge_cold(*runs)


def item_graph_alignment(launch: Launch, out: Path) -> tuple[str, str]:
    res, samples = out / "graphs.jsonl", out / "graphs-samples.jsonl"
    proc = run(launch.microbench("--cuda-graph", "allgather", "-m", "8,64K,16M", "-i", "500", "--out", str(res),
                                 "--samples", str(samples)), launch.env())
    if proc.returncode:
        return failed(proc)
    per_replay = {(r.get("cuda_graph") or {}).get("iterations_per_replay") for r in results(res)}
    return judge_alignment([r for r in records(samples) if r["type"] == "samples"], per_replay)


def item_first_calls(launch: Launch, out: Path) -> tuple[str, str]:
    benchmarks = ["latency", "bw", "bibw"] if launch.ranks >= 2 else []
    rows = []
    for name, extra in (("p2p", benchmarks), ("allreduce", ["--nccl-connect", "eager", "allreduce"])):
        if not extra:
            continue
        res = out / f"first-{name}.jsonl"
        proc = run(launch.microbench(*extra, "-m", "8,1M", "-i", "200", "--out", str(res)), launch.env())
        if proc.returncode:
            return failed(proc)
        rows += results(res)
    return judge_first_calls(rows)


def item_nccl_connect(launch: Launch, out: Path) -> tuple[str, str]:
    """NCCL's runtime connection lands in the first call of the sizes that select a new algorithm; --nccl-connect
    eager (NCCL_RUNTIME_CONNECT=0) makes every connection with the communicator, so the first calls' excess over
    the timed p50, summed over sizes from 8 B (ring/LL) to 64 MiB (tree or NVLS where present), must shrink."""
    if launch.ranks < 2:
        return SKIP, "a collective's connections need 2 ranks"
    excess, recorded = {}, {}
    for mode in ("runtime", "eager"):
        res = out / f"connect-{mode}.jsonl"
        proc = run(launch.microbench("--nccl-connect", mode, "allreduce", "-m", "8,64K,1M,64M", "-i", "50",
                                     "--out", str(res)), launch.env())
        rows = results(res)
        if proc.returncode or not rows:
            return failed(proc)
        run_line = next(r for r in records(res) if r["type"] == "run")
        recorded[mode] = (run_line.get("torch") or {}).get("nccl_runtime_connect")
        excess[mode] = sum(max(0.0, r["first_call_us"]["max"] - r["latency_us"]["p50"]) for r in rows)
    return judge_connect(excess, recorded)


def item_in_place(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "inplace.jsonl"
    small = 4 * launch.ranks * 4  # float32: 4 elements per rank, so reduce_scatter splits it at any rank count
    proc = run(launch.microbench("--in-place", "-c", "allgather", "reduce_scatter", "-m", f"{small},1M", "-i", "20",
                                 "--out", str(res)), launch.env())
    return judge_checks(results(res), 4, proc.returncode)


def item_p2p_graphs(launch: Launch, out: Path) -> tuple[str, str]:
    if launch.ranks < 2:
        return SKIP, "needs 2 ranks"
    res = out / "p2p.jsonl"
    proc = run(launch.microbench("--cuda-graph", "-c", "latency", "bw", "-m", "8,1M", "-i", "40", "--out", str(res)),
               launch.env())
    return judge_checks(results(res), 4, proc.returncode)


def item_gloo_on_cuda(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "gloo.jsonl"
    proc = run(launch.microbench("--torch-backend", "gloo", "-c", "allreduce", "allgather", "-m", "8,64K", "-i", "20",
                                 "--out", str(res)), launch.env())
    return judge_checks(results(res), 4, proc.returncode)


def item_shared_gpu_refused(launch: Launch, out: Path) -> tuple[str, str]:
    proc = run(launch.one_node().microbench("allreduce", "-m", "8", "-i", "5", ranks=2),
               env={"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]})
    return judge_refusal(proc.returncode, proc.stderr)


def item_distinct_gpus(launch: Launch, out: Path) -> tuple[str, str]:
    if launch.ranks < 2:
        return SKIP, "needs 2 GPUs"
    res = out / "distinct.jsonl"
    proc = run(launch.microbench("allreduce", "-m", "8", "-i", "5", "--out", str(res)), launch.env())
    if proc.returncode:
        return failed(proc)
    return judge_distinct(next((r for r in records(res) if r["type"] == "run"), None), launch.ranks, launch.nodes)


def item_mpi_device(launch: Launch, out: Path) -> tuple[str, str]:
    if importlib.util.find_spec("cupy") is None:
        return SKIP, "needs cupy"
    try:
        from microbench.cluster.mpi_runtime import import_mpi, library
        from microbench.measure.device import cuda_aware_mpi

        aware = cuda_aware_mpi(library(import_mpi(initialize=False)).path)
    except Exception as exc:  # noqa: BLE001 - no mpi4py or no MPI library
        return SKIP, f"needs mpi4py and an MPI library ({exc})"
    if aware is not True:
        return SKIP, f"the MPI mpi4py loads {'is not' if aware is False else 'cannot say whether it is'} CUDA-aware"
    mpi = launch if launch.launcher in ("srun", "mpirun") else Launch(launch.gpus, launch.nodes, "mpirun")
    verdicts = []
    for name, extra, expected in (("cold", ["--cache", "cold", "allreduce"], 2),
                                  ("staged in place", ["--stage-host", "--in-place", "allgather", "allreduce"], 4)):
        res = out / f"mpi-{name.replace(' ', '-')}.jsonl"
        proc = run(mpi.microbench("--device", "cuda", "--buffer", "cupy", *extra, "-m", "64,1M", "-i", "20", "-c",
                                  "--out", str(res), backend="mpi"))
        verdicts.append((name, *judge_checks(results(res), expected, proc.returncode)))
    ok = all(v == PASS for _, v, _ in verdicts)
    return (PASS if ok else FAIL), str(verdicts)


def item_launch_marks(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "launch.jsonl"
    proc = run(launch.microbench("allreduce", "-m", "8,256M", "-i", "100", "--out", str(res)), launch.env())
    if proc.returncode:
        return failed(proc)
    return judge_launch_marks(results(res), proc.stdout)


def item_paired_gate(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "gate.jsonl"
    proc = run(launch.microbench("--sync", "barrier", "allreduce", "-m", "8,1M", "-i", "200", "--out", str(res)),
               launch.env())
    if proc.returncode:
        return failed(proc)
    return judge_gate(results(res))


def item_replay(launch: Launch, out: Path, ranks: int | None = None) -> tuple[str, str]:
    """The replay on NCCL (DDP over every rank) with GEMM compute slices: it runs, and says its kernel is gemm."""
    ranks = ranks or launch.ranks
    if ranks < 2:
        return SKIP, "data parallelism needs 2 ranks"
    res = out / f"replay-{ranks}.jsonl"
    argv = ["microbench", "replay", "--backend", "torch", "--device", "cuda", "--hidden", "256", "--layers", "2",
            "--heads", "4", "--seq", "64", "--scheme", "ddp", "--dp", str(ranks), "--tflops", "5", "--iterations",
            "2", "--out", str(res)]
    proc = run(launch.command(argv, None if ranks == launch.ranks else ranks), launch.env())
    replays = [r for r in records(res) if r["type"] == "replay"]
    kernel = (replays[0].get("compute") or {}).get("kernel") if replays else None
    ok = proc.returncode == 0 and replays and kernel == "gemm"
    return (PASS if ok else FAIL), f"exit {proc.returncode}; compute kernel {kernel}" + (
        "" if ok else f"; {(proc.stderr or proc.stdout)[-1500:]}")


ITEMS = [("cold under CUDA graphs reads above warm", item_cold_graphs),
         ("graph replays aligned across ranks", item_graph_alignment),
         ("first calls apart from the timed ones, without connections", item_first_calls),
         ("in-place allgather/reduce_scatter checked on NCCL", item_in_place),
         ("send/recv under CUDA graphs checked", item_p2p_graphs),
         ("gloo on CUDA tensors checked", item_gloo_on_cuda),
         ("two ranks on one GPU refused under NCCL before NCCL", item_shared_gpu_refused),
         ("every rank on a GPU of its own", item_distinct_gpus),
         ("MPI with device buffers: device flush, staged in place", item_mpi_device),
         ("NCCL connections: runtime in the first calls, eager with the communicator", item_nccl_connect),
         ("launch-bound results marked", item_launch_marks),
         ("paired samples gated", item_paired_gate),
         ("the replay on NCCL with GEMM compute", item_replay)]


# ------------------------------------------------------------------------------ NCCL_HOSTID per rank, one GPU
def item_hostid_in_place(launch: Launch, out: Path) -> tuple[str, str]:
    verdicts = []
    for n in (2, 3):
        res = out / f"hostid-inplace-{n}.jsonl"
        small = 4 * n * 4
        proc = run(launch.microbench("--in-place", "-c", "allgather", "reduce_scatter", "-m", f"{small},64K", "-i", "5",
                                     "--out", str(res), ranks=n), launch.env())
        verdicts.append((n, *judge_checks(results(res), 4, proc.returncode)))
    return (PASS if all(v == PASS for _, v, _ in verdicts) else FAIL), str(verdicts)


def item_hostid_p2p_graphs(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "hostid-p2p.jsonl"
    proc = run(launch.microbench("--cuda-graph", "-c", "latency", "bw", "-m", "8,64K", "-i", "20", "--out", str(res),
                                 ranks=2), launch.env())
    return judge_checks(results(res), 4, proc.returncode)


def item_hostid_connect_warmup(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "hostid-first.jsonl"
    proc = run(launch.microbench("bw", "bibw", "-m", "8,64K", "-i", "50", "--out", str(res), ranks=2), launch.env())
    if proc.returncode:
        return failed(proc)
    return judge_first_calls(results(res))


def item_hostid_eager_connect(launch: Launch, out: Path) -> tuple[str, str]:
    res = out / "hostid-eager.jsonl"
    proc = run(launch.microbench("--nccl-connect", "eager", "-c", "allreduce", "-m", "8,64K", "-i", "5",
                                 "--out", str(res), ranks=2), launch.env())
    run_line = next((r for r in records(res) if r["type"] == "run"), {})
    verdict, detail = judge_checks(results(res), 2, proc.returncode)
    recorded = (run_line.get("torch") or {}).get("nccl_runtime_connect")
    return (verdict if recorded == "0" else FAIL), f"{detail}; recorded {recorded!r}"


HOSTID_ITEMS = [("in-place allgather/reduce_scatter at n = 2 and 3", item_hostid_in_place),
                ("captured send/recv checked", item_hostid_p2p_graphs),
                ("bw/bibw first calls without NCCL's connection", item_hostid_connect_warmup),
                ("--nccl-connect eager recorded and checked", item_hostid_eager_connect),
                ("the replay on NCCL with GEMM compute", lambda launch, out: item_replay(launch, out, 2))]


def main(argv: list[str] | None = None) -> int:
    global TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=None, help="GPUs (ranks) per node (default: all visible)")
    ap.add_argument("--nodes", type=int, default=1, help="nodes to run across (default 1)")
    ap.add_argument("--launcher", choices=("torchrun", "srun-torchrun", "srun", "mpirun"), default=None,
                    help="how ranks start (default: torchrun on one node, srun-torchrun across nodes)")
    ap.add_argument("--hostid-per-rank", action="store_true",
                    help="ranks on the first GPU, each with its own NCCL_HOSTID: NCCL correctness on one GPU")
    ap.add_argument("--out", help="folder for the records (default: a temporary one)")
    ap.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds for each command (default 600)")
    args = ap.parse_args(argv)
    TIMEOUT = args.timeout
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 1:
        print("needs a node with a GPU", file=sys.stderr)
        return 2
    launcher = args.launcher or ("srun-torchrun" if args.nodes > 1 else "torchrun")
    if args.hostid_per_rank and (args.nodes > 1 or launcher != "torchrun"):
        print("--hostid-per-rank runs on one node under torchrun", file=sys.stderr)
        return 2
    launch = Launch(gpus, args.nodes, launcher, args.hostid_per_rank)
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-node-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for name, item in (HOSTID_ITEMS if args.hostid_per_rank else ITEMS):
        verdict, detail = item(launch, out)
        counts[verdict] += 1
        print(f"{verdict}  {name}: {detail}", flush=True)
    where = "ranks on one GPU, NCCL_HOSTID per rank" if args.hostid_per_rank else \
        f"{gpus} GPU(s) x {args.nodes} node(s), {launcher}"
    print(f"{where}; {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped; records in {out}")
    return counts[FAIL]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())

#!/usr/bin/env python3
"""Rounds, wall time and rank-0 control bytes of the diagnostics at 16 to 16,384 nodes, by simulation.

Part 1, measured here: three short runs at ``--np 4`` (ranks stand for nodes) give the harness's own cost of
one pairs round, one bisection round and one size of a sweep: the record's wall time less the iterations'
own time (iterations + warmup times the measured per-iteration latency). That is what microbench adds around
the measurement (buffers, calls, barriers, communicator split, gathers, statistics, records) on this machine.

Part 2, the model at N nodes (``--ppn`` ranks each, R = N x ppn ranks), with stated network parameters
(``--alpha-us`` per message, ``--link-gbps`` per node):

- pairs: 2 (N - 1) rounds (latency and bandwidth matrices, round-robin) per pass, ``PAIR_PASSES`` passes (the
  default of ``--pair-repeats``); a round = the harness cost + its
  iterations (ping-pong: 2 alpha + 2 S / link; windowed stream: W S / link + 2 alpha) + the cell gather to rank 0;
- bisection: ceil(log2 N) rounds at most; a round = the harness cost + a communicator split (alpha log2 R +
  8 R bytes of (color, key) pairs) +
  the iterations of an allreduce over N/2 nodes (2 log2(n) alpha + 2 (n - 1) / n S / link) + the gather;
- one soak cycle: the default sweep (six benchmarks, 1 B to 1 MiB, OMB's iteration counts), each size =
  the harness cost + its iterations (collectives over N nodes as nccl-tests' bus bandwidth would have it at
  the link rate, with 2 log2(N) alpha of latency) + the cross-rank summaries.

Rank-0 bytes are counted from what the code sends: per size, the latency summary (two allreduces and a
histogram reduce of ``--bins`` bins: log2 R messages each, recursive doubling and a binomial tree), the
first-call gather (one pickled float per rank), the straggler extremes (two allreduces) and the per-node
gather (40 B per node); per pairs round the mpi4py gather of one pickled cell or None per rank; per bisection
round the gather of the two groups' per-iteration times. The wall times are a model, not a measurement at
scale; the per-round harness costs in it are measured.

    python scripts/sim_diagnostics.py [--ppn 8] [--alpha-us 2] [--link-gbps 25] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

NODES = (16, 64, 256, 1024, 4096, 16384)
DEFAULT_SIZES = [1 << k for k in range(21)]  #: 1 B .. 1 MiB, as `microbench run` by default
SWEEP = ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw")
PAIR_SIZES, BISECT_SIZE, WINDOW = (8, 1 << 20), 1 << 20, 64
PAIR_PASSES = 2  #: passes over every pair, the default of `run pairs --pair-repeats` (issue 39)


def omb_counts(benchmark: str, size: int) -> int:
    """Iterations + warmup OMB uses (microbench's defaults): small sizes up to 8 KiB, then large."""
    small = size <= 8192
    if benchmark == "latency":
        return 10000 + 100 if small else 1000 + 10
    if benchmark == "bw":
        return 100 + 10 if small else 20 + 2
    return 1000 + 100 if small else 100 + 10


# ------------------------------------------------------------------------------ part 1: measured here
def _run(args: list[str], out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "microbench", "run", "--np", "4", *args, "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return [json.loads(line) for line in out.read_text().splitlines()]


def measure_here() -> dict:
    """Harness seconds per pairs round, per bisection round and per sweep size, at 4 ranks here."""
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [r for r in _run(["pairs", "-m", "8,1M", "-i", "20", "-x", "2"], Path(tmp) / "p.jsonl")
                 if r["type"] == "result"]
        bisect = next(r for r in _run(["bisect", "--bisect-size", "1M", "-i", "20", "-x", "2"], Path(tmp) / "b.jsonl")
                      if r["type"] == "bisect")
        sweep = [r for r in _run(["allreduce", "-m", "8:1M", "-i", "100", "-x", "10", "--cycles", "1"],
                                 Path(tmp) / "s.jsonl") if r["type"] == "result"]
    # a pairs record's latency is per message: an iteration of the bandwidth matrix moves a window of them
    passes = [len(r.get("repeats") or [None]) for r in pairs]  # each pass measured every round again
    pair_round = [(r["wall_s"] - k * r["rounds"] * (r["iterations"] + r["warmup"]) * (r["window"] or 1)
                   * r["latency_us"]["max"] * 1e-6) / (k * r["rounds"]) for r, k in zip(pairs, passes)]
    rounds = len(bisect["rounds"])
    bisect_measured = sum((bisect["iterations"] + bisect["warmup"]) * max(r["p50_us"]) * 1e-6 for r in bisect["rounds"])
    per_size = [r["wall_s"] - (r["iterations"] + r["warmup"]) * r["latency_us"]["avg"] * 1e-6 for r in sweep]
    return {"pairs_round_s": max(0.0, sum(pair_round) / len(pair_round)),
            "bisect_round_s": max(0.0, (bisect["wall_s"] - bisect_measured) / rounds),
            "size_s": max(0.0, sum(per_size) / len(per_size)), "measured_at": "4 ranks on one host"}


# ------------------------------------------------------------------------------ part 2: the model
def t_collective(benchmark: str, nodes: int, size: int, alpha: float, link: float) -> float:
    """Seconds per iteration at ``nodes`` nodes: latency 2 log2(N) alpha (point to point: a round trip),
    bandwidth at the link rate with nccl-tests' bytes (allreduce 2(n-1)/n S, allgather (n-1) S, ...)."""
    n, lat = nodes, 2 * math.log2(max(nodes, 2)) * alpha
    moved = {"allreduce": 2 * (n - 1) / n * size, "allgather": (n - 1) * size, "reduce_scatter": (n - 1) / n * size,
             "broadcast": size, "alltoall": (n - 1) / n * size}
    if benchmark == "latency":
        return 2 * alpha + 2 * size / link
    if benchmark == "bw":
        return 2 * alpha + WINDOW * size / link
    return lat + moved[benchmark] / link


def summary_bytes(ranks: int, nodes: int, bins: int) -> dict:
    """What rank 0 receives per measured size for the cross-rank summaries (bytes)."""
    hops = math.ceil(math.log2(max(ranks, 2)))
    latency = hops * (4 + 3) * 8 + hops * bins * 8  # two allreduces, histogram reduce (binomial tree)
    first_call = ranks * (4 + len(pickle.dumps([1.5], protocol=5)))  # counts, then one pickled list per rank
    checks = hops * 2 * 8  # check and huge-page sums
    stragglers = hops * (16 + 16) + nodes * 40  # the extremes (two allreduces), the per-node rows
    return {"straggler_bytes": stragglers, "size_bytes_total": latency + first_call + checks + stragglers}


def gather_bytes(ranks: int, payloads: int, payload: bytes) -> int:
    """An mpi4py gather at rank 0: a 4-byte count per rank, then ``payloads`` pickles and None for the rest."""
    none = len(pickle.dumps(None, protocol=5))
    return ranks * 4 + payloads * len(payload) + (ranks - payloads) * none


def model(nodes: int, cost: dict, a: argparse.Namespace) -> dict:
    alpha, link, ranks = a.alpha_us * 1e-6, a.link_gbps * 1e9, nodes * a.ppn
    hops = math.log2(ranks)
    gather_s = lambda nbytes: hops * alpha + nbytes / link  # noqa: E731 - a one-line cost
    cell = pickle.dumps((nodes - 1, 12.345678), protocol=5)
    pair_bytes = gather_bytes(ranks, nodes // 2, cell)
    pair_iters = [(20 + 2) * t_collective("latency", 2, PAIR_SIZES[0], alpha, link),
                  (20 + 2) * t_collective("bw", 2, PAIR_SIZES[1], alpha, link)]
    pairs_s = PAIR_PASSES * sum((nodes - 1) * (cost["pairs_round_s"] + it + gather_s(pair_bytes)) for it in pair_iters)
    b_rounds = math.ceil(math.log2(nodes))
    times = pickle.dumps((0, [123.456] * a.bisect_iterations, None), protocol=5)
    b_bytes = gather_bytes(ranks, 2, times)
    b_iter = a.bisect_iterations * t_collective("allreduce", nodes // 2, BISECT_SIZE, alpha, link)
    split_s = hops * alpha + ranks * 8 / link  # MPI_Comm_split: an allgather of (color, key) over every rank
    bisect_s = b_rounds * (cost["bisect_round_s"] + split_s + b_iter + gather_s(b_bytes))
    summary = summary_bytes(ranks, nodes, a.bins)
    soak_s = sum(cost["size_s"] + omb_counts(b, s) * t_collective(b, nodes, s, alpha, link)
                 + gather_s(summary["size_bytes_total"]) for b in SWEEP for s in DEFAULT_SIZES)
    return {"nodes": nodes, "ranks": ranks, "pairs_rounds": 2 * PAIR_PASSES * (nodes - 1), "pairs_s": pairs_s,
            "pairs_round_bytes": pair_bytes, "bisect_rounds": b_rounds, "bisect_s": bisect_s,
            "bisect_round_bytes": b_bytes, "soak_cycle_s": soak_s, **summary}


def _cost(seconds: float) -> str:
    """A measured harness cost; 0 means the wall time did not exceed the estimate of the iterations' own time (the
    estimate uses the slowest pair's p50, so the cost is below what this measure resolves), not that it is free."""
    return f"{seconds * 1e3:.1f} ms" if seconds > 0 else "not resolved (below the iterations' estimated time)"


def _time(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _bytes(n: float) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ppn", type=int, default=8, help="ranks per node (default 8)")
    ap.add_argument("--alpha-us", type=float, default=2.0, help="latency of one network message (default 2 us)")
    ap.add_argument("--link-gbps", type=float, default=25.0, help="bandwidth per node link, GB/s (default 25)")
    ap.add_argument("--bins", type=int, default=700, help="histogram bins per size (700: a 1000x latency spread)")
    ap.add_argument("--bisect-iterations", type=int, default=110, help="iterations + warmup per bisection round")
    ap.add_argument("--costs", help="reuse measured costs (JSON from --json) instead of measuring")
    ap.add_argument("--json", help="also write the costs and the table here")
    a = ap.parse_args()
    cost = json.loads(Path(a.costs).read_text())["measured"] if a.costs else measure_here()
    rows = [model(n, cost, a) for n in NODES]
    print(f"# measured here ({cost['measured_at']}): harness per pairs round {_cost(cost['pairs_round_s'])}, "
          f"per bisection round {_cost(cost['bisect_round_s'])}, per sweep size {_cost(cost['size_s'])}")
    print(f"# model: {a.ppn} ranks per node, alpha {a.alpha_us:g} us, link {a.link_gbps:g} GB/s; pairs at 8 B and "
          f"1 MiB (22 iterations), bisection allreduce 1 MiB ({a.bisect_iterations} iterations), soak cycle = the "
          f"default sweep with OMB's counts")
    print("| nodes | ranks | pairs rounds | pairs wall | bisect rounds | bisect wall | soak cycle wall "
          "| rank-0 bytes per pairs round | per bisect round | per size: straggler summary | per size: all summaries |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['nodes']} | {r['ranks']} | {r['pairs_rounds']} | {_time(r['pairs_s'])} | {r['bisect_rounds']} | "
              f"{_time(r['bisect_s'])} | {_time(r['soak_cycle_s'])} | {_bytes(r['pairs_round_bytes'])} | "
              f"{_bytes(r['bisect_round_bytes'])} | {_bytes(r['straggler_bytes'])} | {_bytes(r['size_bytes_total'])} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"measured": cost, "parameters": vars(a), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

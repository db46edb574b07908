#!/usr/bin/env python3
"""Issue 42 on this machine: what routing skew costs an all-to-all-v, and how far the replay's prediction is off
for a mixture-of-experts and a context-parallel layout.

``curves``: ``microbench run --np 4 alltoallv --splits P`` for each pattern (uniform, zipf:1.2, hot:4, and the
combine of zipf:1.2, zipf:1.2/T), ``--rounds`` launches each in a shuffled order; per pattern and size the median
over launches of each launch's p50 latency. What the skew costs is read at the same *mean* bytes a rank sends
(the same tokens routed): a dispatch split (zipf, hot: every rank sends the size) at the same size as the uniform
one; a combine split (zipf:1.2/T, whose size is what the hot rank sends back) at the uniform split's latency
interpolated (log-log) at its mean send. The figure: p50 latency against the mean send per pattern, and each
skewed pattern's latency over the uniform one's at the same mean. The records are kept (``--out``), so
``microbench workload --results`` can price a MoE workload on them. ``--emulated``: the same on the emulated
cluster, 2 nodes x 2 ranks (ranks 0, 1 on node0, 2, 3 on node1: half of every rank's blocks cross TCP).

``replay``: ``microbench replay --np 4`` of an MoE layout (ep 4 x dp 4, zipf:1.2 routing) and of two
context-parallel layouts (ring attention on cp 2 x dp 2 and on cp 4), ``--rounds`` launches each shuffled: the
total row of the comparison (predicted from the same launch's per-call latencies, replayed) and its ratio.
``--emulated``: on the emulated cluster (2 nodes x 2 ranks, tests/emulated_cluster.py) the MoE model with ep 2
(expert groups inside a node, expert-data-parallel groups across) and ep 4 (expert groups across the nodes),
open and with node1's link capped at ``--throttle`` Mbit/s (default 200): per-group seconds, and the isolated
seconds per call of the largest all-to-all-v (the same launch's, one group at a time).

    python scripts/bench_moe.py curves [--rounds 3] [--emulated] [--out DIR] [--figure plots/alltoallv-skew.png]
    python scripts/bench_moe.py curves --replot DIR [--emulated] --figure plots/alltoallv-skew.png
    python scripts/bench_moe.py replay [--rounds 3] [--emulated [--skip-local]] [--throttle 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's microbench, before tests/emulated_cluster.py imports any
PATTERNS = ("uniform", "zipf:1.2", "zipf:1.2/T", "hot:4")
SIZES = "4K,16K,64K,256K,1M,4M"
DENSE = ["--hidden", "512", "--layers", "2", "--heads", "8", "--family", "llama", "--kv-heads", "2", "--seq", "512",
         "--vocab", "2048", "--micro-batch", "1"]
MOE = [*DENSE, "--experts", "8", "--top-k", "2"]
#: the emulated cluster's MoE model: smaller experts and vocabulary, so a throttled link's replay stays minutes
MOE_EMULATED = [*MOE, "--expert-ffn", "256", "--vocab", "512"]
LAYOUTS = {  # name -> (model flags, layout flags) on 4 ranks
    "moe ep4 dp4 zipf:1.2": (MOE, ["--scheme", "moe", "--ep", "4", "--dp", "4", "--routing", "zipf:1.2"]),
    "cp ring cp2 dp2": (DENSE, ["--scheme", "cp", "--cp", "2", "--dp", "2"]),
    "cp ring cp4": (DENSE, ["--scheme", "cp", "--cp", "4"]),
}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def microbench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "microbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


# ------------------------------------------------------------------------------------------------ curves
def curves(args) -> None:
    out = Path(args.replot or args.out)
    if args.replot:  # the p50s of an earlier measurement: table and figure again
        p50 = {(k.split("|")[0], int(k.split("|")[1])): v for k, v in json.loads((out / "p50.json").read_text()).items()}
        report(args, p50)
        return
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(p, r) for p in PATTERNS for r in range(args.rounds)]
    random.shuffle(jobs)
    p50: dict[tuple[str, int], list[float]] = {}
    cluster = emulated_cluster() if args.emulated else None
    print(f"# load at start: {load()}")
    try:
        for pattern, r in jobs:
            path = out / f"alltoallv-{pattern.replace(':', '').replace('/', '')}-{r}.jsonl"
            run = ["run", "alltoallv", "--splits", pattern, "-m", args.sizes, "-i", "30", "-x", "5", "--out", str(path)]
            if cluster is None:
                proc = microbench(*run[:1], "--np", "4", *run[1:])
            else:
                cmd, env = cluster.microbench_command(run, per_node=2, hosts=cluster.hosts[:2])
                proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise SystemExit(f"alltoallv --splits {pattern} failed:\n{proc.stderr}")
            _collect(path, pattern, p50)
    finally:
        if cluster is not None:
            cluster.down()
    print(f"# load at end: {load()}")
    (out / "p50.json").write_text(json.dumps({f"{p}|{size}": v for (p, size), v in p50.items()}))
    report(args, p50)


def report(args, p50: dict) -> None:
    """The table (medians over launches, their range, each pattern over the uniform split's) and the figure."""
    medians = {key: statistics.median(v) for key, v in p50.items()}
    sizes = sorted({s for _, s in medians})
    means = {(p, s): mean_send(p, s) for p, s in medians}
    print("| size (B) | " + " | ".join(f"{p} p50 us (launches' range)" for p in PATTERNS) + " | "
          + " | ".join(f"{p} / uniform at its mean send" for p in PATTERNS[1:]) + " |")
    print("|" + "---|" * (1 + 2 * len(PATTERNS) - 1))
    for s in sizes:
        cells = [f"{medians[(p, s)]:.1f} ({min(p50[(p, s)]):.0f}-{max(p50[(p, s)]):.0f})" for p in PATTERNS]
        ratios = [cost(medians, means, p, s, sizes) for p in PATTERNS[1:]]
        print(f"| {s} | " + " | ".join(cells + [f"{r:.2f}" if r else "-" for r in ratios]) + " |")
    if args.figure:
        where = ("emulated cluster, 2 nodes x 2 ranks, TCP between nodes" if args.emulated
                 else "one host, Open MPI shared memory")
        figure(p50, means, sizes, args.figure, where)


def _collect(path: Path, pattern: str, p50: dict) -> None:
    """Each result's p50 of one launch's records, by (pattern, size)."""
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "result":
            p50.setdefault((pattern, rec["size_bytes"]), []).append(rec["latency_us"]["p50"])


def emulated_cluster():
    """The emulated 2-node cluster (tests/emulated_cluster.py), up."""
    sys.path.insert(0, str(REPO / "tests"))
    import emulated_cluster as emu

    why = emu.missing()
    if why:
        raise SystemExit(f"the emulated cluster cannot be made here: {why}")
    cluster = emu.EmulatedCluster(2, "benchmoe")
    cluster.up()
    return cluster


def mean_send(pattern: str, size: int, ranks: int = 4) -> float:
    """Bytes a rank sends on average at ``size`` (uint8: one element a byte)."""
    from microbench.benchmarks.splits import parse

    return float(parse(pattern).matrix(size, ranks).sum(axis=1).mean())


def uniform_at(medians: dict, sizes: list[int], mean: float) -> float | None:
    """The uniform split's p50 at ``mean`` bytes, log-log between its measured sizes (None outside them)."""
    import math

    for a, b in zip(sizes, sizes[1:]):
        if a <= mean <= b:
            ya, yb = medians[("uniform", a)], medians[("uniform", b)]
            t = math.log(mean / a) / math.log(b / a)
            return math.exp(math.log(ya) + t * (math.log(yb) - math.log(ya)))
    return None


def cost(medians: dict, means: dict, pattern: str, size: int, sizes: list[int]) -> float | None:
    """A pattern's p50 over the uniform split's at the same mean send."""
    base = uniform_at(medians, sizes, means[(pattern, size)])
    return medians[(pattern, size)] / base if base else None


COLORS = {"uniform": "tab:blue", "zipf:1.2": "tab:orange", "zipf:1.2/T": "tab:green", "hot:4": "tab:red"}


def figure(p50: dict, means: dict, sizes: list[int], path: str, where: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from microbench.output_files import write_output
    from microbench.units import format_size

    medians = {key: statistics.median(v) for key, v in p50.items()}
    rounds = min(len(v) for v in p50.values())
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for p in PATTERNS:
        x, y = [means[(p, s)] for s in sizes], [medians[(p, s)] for s in sizes]
        spread = [[y[i] - min(p50[(p, s)]) for i, s in enumerate(sizes)],
                  [max(p50[(p, s)]) - y[i] for i, s in enumerate(sizes)]]
        left.errorbar(x, y, yerr=spread, marker="o", capsize=2, color=COLORS[p], label=p)
        if p != "uniform":
            points = [(means[(p, s)], cost(medians, means, p, s, sizes)) for s in sizes]
            points = [(a, b) for a, b in points if b]
            right.plot([a for a, _ in points], [b for _, b in points], marker="o", color=COLORS[p], label=p)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [format_size(s) for s in sizes])
        ax.set_xlabel("bytes a rank sends on average (the tokens routed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("p50 latency (us): median and range of the launches")
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_ylabel("latency / uniform split's at the same mean send")
    fig.suptitle(f"alltoallv on 4 ranks ({where}): routing skew's cost; median of {rounds} launches each",
                 fontsize=10)
    fig.tight_layout()
    write_output(path, lambda f: fig.savefig(f, format="png", dpi=110), what="figure ")
    print(f"# figure written to {path}")


# ------------------------------------------------------------------------------------------------ replay
def total(summary: dict) -> dict:
    return next(r for r in summary["comparison"] if r["what"] == "total")


def replay(args) -> None:
    results: dict[str, list[dict]] = {}
    jobs = [(name, r) for name in LAYOUTS for r in range(args.rounds)] if not args.skip_local else []
    random.shuffle(jobs)
    print(f"# load at start: {load()}")
    for name, _ in jobs:
        model, layout = LAYOUTS[name]
        proc = microbench("replay", "--np", "4", *model, *layout, "--iterations", "3", "--json")
        if proc.returncode != 0:
            raise SystemExit(f"replay {name} failed:\n{proc.stderr}")
        summary = json.loads(proc.stdout)
        row = total(summary)
        results.setdefault(name, []).append({"predicted_s": row["predicted_s"], "replayed_s": row["replayed_s"],
                                             "ratio": row["ratio"], "per_group_s": summary["per_group_s"]})
    print(f"# load at end: {load()}")
    print("| layout (4 ranks, one host) | predicted (ms) | replayed (ms) | replayed / predicted (median, range) |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        ratios = [r["ratio"] for r in rows]
        print(f"| {name} | {statistics.median(r['predicted_s'] for r in rows) * 1e3:.1f} | "
              f"{statistics.median(r['replayed_s'] for r in rows) * 1e3:.1f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}..{max(ratios):.2f}) |")
    emulated = emulated_runs(args) if args.emulated else None
    if args.json:
        Path(args.json).write_text(json.dumps({"local": results, "emulated": emulated}, indent=1))


def emulated_runs(args) -> dict:
    """MoE with ep 2 (inside a node) and ep 4 (across), open and throttled, on 2 emulated nodes x 2 ranks."""
    cluster = emulated_cluster()
    out: dict = {}
    try:
        for ep in ("2", "4"):
            cmd, env = cluster.microbench_command(
                ["replay", *MOE_EMULATED, "--scheme", "moe", "--ep", ep, "--dp", "4", "--routing", "zipf:1.2",
                 "--iterations", "3", "--json"], per_node=2, hosts=cluster.hosts[:2])
            for state in ("open", "throttled"):
                for _ in range(args.rounds):
                    full = {**os.environ, **env}
                    if state == "throttled":
                        with cluster.throttled("node1", args.throttle):
                            proc = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
                    else:
                        proc = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
                    if proc.returncode != 0:
                        raise SystemExit(f"emulated replay ep {ep} {state} failed:\n{proc.stderr}")
                    summary = json.loads(proc.stdout)
                    a2a = [c for c in summary["per_call"] if c["collective"] == "alltoallv"]
                    out.setdefault(f"ep{ep} {state}", []).append(
                        {"per_group_s": summary["per_group_s"], "ratio": total(summary)["ratio"],
                         "wall_s": summary["wall_s"],
                         "a2a_isolated_s": max(a2a, key=lambda c: c["bytes"])["isolated_s_per_call"]})
    finally:
        cluster.down()
    print(f"| emulated, 2 nodes x 2 ranks, node1 at {args.throttle:g} Mbit/s when throttled | group ep (ms) | "
          "group edp (ms) | group dp (ms) | largest all-to-all-v alone (ms) | wall (ms) | replayed / predicted |")
    print("|---|---|---|---|---|---|---|")
    for key, rows in out.items():
        med = {g: statistics.median(r["per_group_s"].get(g, 0.0) for r in rows) * 1e3 for g in ("ep", "edp", "dp")}
        wall = statistics.median(r["wall_s"] for r in rows) * 1e3
        a2a = statistics.median(r["a2a_isolated_s"] for r in rows) * 1e3
        ratio = statistics.median(r["ratio"] for r in rows)
        print(f"| {key} | {med['ep']:.1f} | {med['edp']:.1f} | {med['dp']:.1f} | {a2a:.2f} | {wall:.1f} | "
              f"{ratio:.2f} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("curves")
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--sizes", default=SIZES)
    c.add_argument("--out", default="alltoallv-curves")
    c.add_argument("--figure")
    c.add_argument("--emulated", action="store_true")
    c.add_argument("--replot", metavar="DIR", help="the table and figure of an earlier --out DIR again")
    r = sub.add_parser("replay")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--emulated", action="store_true")
    r.add_argument("--skip-local", action="store_true", help="only the emulated replays")
    r.add_argument("--throttle", type=float, default=200)
    r.add_argument("--json")
    args = p.parse_args()
    curves(args) if args.what == "curves" else replay(args)


if __name__ == "__main__":
    main()

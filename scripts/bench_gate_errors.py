#!/usr/bin/env python3
"""How often `microbench compare` cries wolf, and how often it catches a real slowdown, on this machine.

1. ``collect``: real launches of ``microbench run --np 2 allreduce latency -m 8:4K`` (20 configurations),
   one file each, in blocks: ``--block`` runs of the normal build, then ``--block`` runs of a slowed one,
   over and over (``--blocks`` pairs); with ``--interleave`` the two alternate run by run instead.
   The slowdown is real and outside microbench's timed loop: Open MPI's own tuning variables force
   another allreduce algorithm (``OMPI_MCA_coll_tuned_use_dynamic_rules=1``,
   ``OMPI_MCA_coll_tuned_allreduce_algorithm=N``; N=3 recursive doubling by default). The point-to-point
   latency configurations are untouched by it, so every slowed comparison also holds 10 true nulls.
2. ``analyze``: comparisons formed from the pool, each judged by ``microbench compare --json`` of the
   source tree(s) given (``--src NAME=PATH``: e.g. before=/work/main after=.), run as a user would:

   - false alarms: normal runs only, baseline = the first k, new = the next k of a block (sequential,
     k = 4 and 8), or alternate runs of a block (interleaved); a whole comparison is a false alarm when
     it reports any REGRESSION (compare exits 1);
   - power: a normal block against the slowed block after it (sequential, k = 4 and 8), per allreduce
     configuration: the share flagged REGRESSION, by the slowdown the pool actually shows for it
     (ratio of medians over all slowed and all normal runs of the configuration).

   Per verdict (REGRESSION, regression?, noise, ok, improved) the share of configurations, and per
   comparison the share that failed. Also: the lag-1 correlation of back-to-back runs (each
   configuration's log values minus its block mean, pooled), the reason runs are not independent samples.

    python scripts/bench_gate_errors.py collect POOL --blocks 6 --block 8 [--algorithm 3] [--interleave]
    python scripts/bench_gate_errors.py analyze POOL --src before=/work/main --src after=.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUN = ["run", "--np", "2", "allreduce", "latency", "-m", "8:4K"]
VERDICTS = ("regression", "regression?", "noise", "ok", "improved", "improved?")


def slow_env(algorithm: int) -> dict:
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": str(algorithm)}


def collect(pool: Path, blocks: int, block: int, algorithm: int, interleave: bool) -> None:
    pool.mkdir(parents=True, exist_ok=True)
    start = len(list(pool.glob("*.jsonl")))
    plan = []
    for b in range(blocks):
        if interleave:
            plan += [v for _ in range(block) for v in ("normal", "slow")]
        else:
            plan += ["normal"] * block + ["slow"] * block
    for i, variant in enumerate(plan):
        out = pool / f"{start + i:05d}-{'i' if interleave else 's'}-{variant}.jsonl"
        env = {**os.environ, **(slow_env(algorithm) if variant == "slow" else {})}
        subprocess.run([sys.executable, "-m", "microbench", *RUN, "--out", str(out)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"# {i + 1}/{len(plan)} {out.name} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)


def pool_runs(pool: Path) -> list[dict]:
    """Each launch of the pool in order: its file, mode (s/i), variant and per-configuration p50."""
    out = []
    for path in sorted(pool.glob("*.jsonl")):
        _, mode, variant = path.stem.split("-")
        values = {}
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "result":
                values[(rec["benchmark"], rec["size_bytes"])] = rec["latency_us"]["p50"]
        if values:
            out.append({"path": path, "mode": mode, "variant": variant, "values": values})
    return out


def blocks_of(runs: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """Consecutive runs of one mode and variant: (mode, variant, runs)."""
    out: list[tuple[str, str, list[dict]]] = []
    for run in runs:
        if out and out[-1][0] == run["mode"] and (run["mode"] == "i" or out[-1][1] == run["variant"]):
            out[-1][2].append(run)
        else:
            out.append((run["mode"], run["variant"], [run]))
    return out


def comparisons(runs: list[dict]) -> list[dict]:
    """The comparisons the pool allows: kind, k, baseline and new files."""
    out = []
    blocks = blocks_of(runs)
    for index, (mode, variant, members) in enumerate(blocks):
        if mode == "s" and variant == "normal":
            for k in (4, 8):
                if len(members) >= 2 * k:
                    out.append({"kind": "false alarm, sequential", "k": k, "base": members[:k], "new": members[k:2 * k]})
                nxt = blocks[index + 1] if index + 1 < len(blocks) else None
                if nxt and nxt[0] == "s" and nxt[1] == "slow" and len(members) >= k and len(nxt[2]) >= k:
                    out.append({"kind": "power, sequential", "k": k, "base": members[-k:], "new": nxt[2][:k]})
        if mode == "i":
            normal = [r for r in members if r["variant"] == "normal"]
            slow = [r for r in members if r["variant"] == "slow"]
            for k in (4, 8):
                if len(normal) >= 2 * k:
                    out.append({"kind": "false alarm, interleaved", "k": k, "base": normal[0:2 * k:2],
                                "new": normal[1:2 * k:2]})
                if len(normal) >= k and len(slow) >= k:
                    out.append({"kind": "power, interleaved", "k": k, "base": normal[:k], "new": slow[:k]})
    return out


def judge(src: Path, comparison: dict, extra: list[str]) -> dict:
    """``microbench compare --json`` of source tree ``src`` on one comparison."""
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "MICROBENCH_INDEX": "off"}
    cmd = [sys.executable, "-m", "microbench", "compare", "--json", "--baseline",
           *[str(r["path"]) for r in comparison["base"]], "--new", *[str(r["path"]) for r in comparison["new"]], *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def actual_slowdowns(runs: list[dict]) -> dict:
    """Per configuration: median over slowed runs / median over normal runs (the pool's own figure)."""
    out = {}
    keys = runs[0]["values"].keys()
    for key in keys:
        normal = [r["values"][key] for r in runs if r["variant"] == "normal" and key in r["values"]]
        slow = [r["values"][key] for r in runs if r["variant"] == "slow" and key in r["values"]]
        if normal and slow:
            out[key] = statistics.median(slow) / statistics.median(normal)
    return out


def lag1_correlation(runs: list[dict]) -> float | None:
    """Pooled lag-1 correlation of back-to-back normal runs (sequential blocks), per configuration the
    log value minus its block mean; the figure that says whether runs in a row are independent."""
    pairs = []
    for mode, variant, members in blocks_of(runs):
        if mode != "s" or variant != "normal" or len(members) < 3:
            continue
        for key in members[0]["values"]:
            logs = [math.log(r["values"][key]) for r in members if key in r["values"]]
            mean = statistics.fmean(logs)
            res = [v - mean for v in logs]
            pairs += list(zip(res[:-1], res[1:]))
    if len(pairs) < 3:
        return None
    num = sum(a * b for a, b in pairs)
    den = math.sqrt(sum(a * a for a, _ in pairs) * sum(b * b for _, b in pairs))
    return num / den if den else None


def analyze(pool: Path, sources: dict[str, Path], extra: list[str], out_json: Path | None) -> None:
    runs = pool_runs(pool)
    slowdown = actual_slowdowns(runs)
    rho = lag1_correlation(runs)
    print(f"# pool {pool}: {len(runs)} launches; lag-1 correlation of back-to-back runs: "
          f"{'-' if rho is None else f'{rho:.2f}'}")
    shown = ", ".join(f"{b} {s} B x{v:.2f}" for (b, s), v in sorted(slowdown.items()) if b == "allreduce")
    print(f"# actual slowdown of the slowed runs (median/median): {shown}")
    figures = []
    for name, src in sources.items():
        tally: dict = {}
        for comp in comparisons(runs):
            result = judge(src, comp, extra)
            t = tally.setdefault((comp["kind"], comp["k"]), {"comparisons": 0, "failed": 0, "verdicts": {},
                                                               "flagged_slowed": 0, "slowed": 0})
            t["comparisons"] += 1
            t["failed"] += result["exit_status"] == 1
            for row in result["rows"]:
                cfg = row["config"]
                if comp["kind"].startswith("power") and cfg["benchmark"] != "allreduce":
                    continue  # power: the slowed configurations only
                t["verdicts"][row["verdict"]] = t["verdicts"].get(row["verdict"], 0) + 1
                if comp["kind"].startswith("power"):
                    t["slowed"] += 1
                    t["flagged_slowed"] += row["verdict"] == "regression"
        for (kind, k), t in sorted(tally.items()):
            total = sum(t["verdicts"].values()) or 1
            shares = " ".join(f"{v}={t['verdicts'].get(v, 0) / total:.2f}" for v in VERDICTS)
            power = f" detected={t['flagged_slowed'] / t['slowed']:.2f}" if t["slowed"] else ""
            print(f"{name:>7}  {kind:<26} {k}+{k}  n={t['comparisons']:>3}  failed={t['failed'] / t['comparisons']:.2f}"
                  f"{power}  {shares}")
            figures.append({"source": name, "kind": kind, "k": k, **t})
    if out_json:
        out_json.write_text(json.dumps({"rho": rho, "slowdown": {f"{b} {s}": v for (b, s), v in slowdown.items()},
                                        "figures": figures}, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("pool", type=Path)
    c.add_argument("--blocks", type=int, default=6)
    c.add_argument("--block", type=int, default=8)
    c.add_argument("--algorithm", type=int, default=3)
    c.add_argument("--interleave", action="store_true")
    a = sub.add_parser("analyze")
    a.add_argument("pool", type=Path)
    a.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="a source tree whose compare judges (default after=.)")
    a.add_argument("--json", type=Path)
    a.add_argument("extra", nargs="*", help="more compare options, after --")
    args = ap.parse_args()
    if args.cmd == "collect":
        t0 = time.monotonic()
        collect(args.pool, args.blocks, args.block, args.algorithm, args.interleave)
        print(f"# collected in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        return 0
    sources = dict(s.split("=", 1) for s in args.src) or {"after": "."}
    analyze(args.pool, {k: Path(v) for k, v in sources.items()}, args.extra, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

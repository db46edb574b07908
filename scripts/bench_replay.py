#!/usr/bin/env python3
"""How far the prediction from per-call curves is off from a replayed iteration, per scheme, side by side.

For each scheme (layouts on 4 ranks: ddp and zero3 with dp 4, tp with tp 2 x dp 2, pp with pp 2 x dp 2) it
launches ``microbench replay --json`` and reads the total row of its comparison: the prediction priced on
the same launch's isolated per-call latencies (one group at a time, ``replay/calibrate.py``) against the
replayed iteration (median of the timed iterations, slowest rank), their ratio, and what the tool attributes
a large difference to. Settings:

- ``local``: 4 ranks on this machine (``--np 4``, shared memory);
- ``emulated``: the emulated cluster (tests/emulated_cluster.py: network namespaces, TCP between nodes),
  2 nodes x 2 ranks, Open MPI's launcher; needs root, ``ip``/``tc`` and the Open MPI wheel. With
  ``--throttle MBIT`` node1's link is capped (tc tbf) as well, a third setting ``emulated-throttled``.

Every scheme and setting runs ``--rounds`` times in a shuffled order; a figure is the median over rounds.

    python scripts/bench_replay.py [--rounds 3] [--settings local,emulated] [--throttle 200]
                                   [--json out.json] [--figure plots/replay-prediction.png]
    python scripts/bench_replay.py --replot out.json --figure plots/replay-prediction.png   # table and figure again
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
MODEL = ["--hidden", "512", "--layers", "2", "--heads", "8", "--seq", "128", "--vocab", "4096"]
SCHEMES = {  # scheme -> layout flags on 4 ranks
    "ddp": ["--dp", "4"],
    "zero3": ["--dp", "4"],
    "tp": ["--tp", "2", "--dp", "2"],
    "pp": ["--pp", "2", "--dp", "2", "--microbatches", "4"],
}
SETTINGS = ("local", "emulated", "emulated-throttled")


def replay_args(scheme: str, iterations: int) -> list[str]:
    return ["replay", *MODEL, "--scheme", scheme, *SCHEMES[scheme], "--iterations", str(iterations), "--json"]


def total_row(summary: dict) -> dict:
    """The comparison's row for the whole iteration's communication."""
    return next(r for r in summary["comparison"] if r["what"] == "total")


def largest_off(summary: dict) -> dict | None:
    """The comparison row (a collective kind or a group) furthest from its prediction."""
    rows = [r for r in summary["comparison"] if r["what"] != "total" and r.get("ratio")]
    return max(rows, key=lambda r: abs(r["ratio"] - 1), default=None)


def run_local(scheme: str, iterations: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "microbench", *replay_args(scheme, iterations), "--np", "4"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"replay {scheme} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


class Emulated:
    """The emulated 2-node cluster, up for the whole measurement."""

    def __init__(self):
        sys.path.insert(0, str(REPO / "tests"))
        import emulated_cluster as emu

        why = emu.missing()
        if why:
            raise SystemExit(f"the emulated cluster cannot be made here: {why}")
        self.cluster = emu.EmulatedCluster(2, "benchreplay")
        self.cluster.up()

    def run(self, scheme: str, iterations: int, throttle_mbit: float | None) -> dict:
        cmd, env = self.cluster.microbench_command(replay_args(scheme, iterations), per_node=2)
        if throttle_mbit:
            self.cluster.throttle("node1", throttle_mbit)
        try:
            proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
        finally:
            if throttle_mbit:
                self.cluster.unthrottle("node1")
        if proc.returncode != 0:
            raise SystemExit(f"replay {scheme} on the emulated cluster failed:\n{proc.stderr}")
        return json.loads(proc.stdout)

    def down(self) -> None:
        self.cluster.down()


def summarize(summaries: list[dict]) -> dict:
    """Medians over rounds of one (setting, scheme): predicted, replayed, ratio; the attribution of the round
    whose ratio is the median."""
    rows = [total_row(s) for s in summaries]
    ratios = [r["ratio"] for r in rows]
    middle = summaries[sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]]
    off = largest_off(middle)
    return {"predicted_ms": statistics.median(r["predicted_s"] for r in rows) * 1e3,
            "replayed_ms": statistics.median(r["replayed_s"] for r in rows) * 1e3,
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "rounds": len(rows),
            "explained_by": total_row(middle).get("explained_by", []),
            "largest_off": ({"what": off["what"], "ratio": off["ratio"], "explained_by": off.get("explained_by", [])}
                            if off else None)}


def table(results: dict) -> str:
    lines = ["| setting | scheme | layout | predicted (ms) | replayed (ms) | replayed / predicted (min-max) | "
             "furthest off | what the replay attributes |", "|---|---|---|---:|---:|---:|---|---|"]
    for (setting, scheme), r in results.items():
        off = r["largest_off"]
        furthest = f"{off['what']} {off['ratio']:.2f}x" if off else "-"
        why = "; ".join(r["explained_by"] or (off["explained_by"] if off else [])) or "-"
        lines.append(f"| {setting} | {scheme} | {' '.join(SCHEMES[scheme])} | {r['predicted_ms']:.2f} | "
                     f"{r['replayed_ms']:.2f} | {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
                     f"{furthest} | {why} |")
    return "\n".join(lines)


def figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(s for s, _ in results))
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    width = 0.8 / len(settings)
    for i, setting in enumerate(settings):
        xs = [j + i * width for j, _ in enumerate(SCHEMES)]
        ratios = [results.get((setting, s), {}).get("ratio", float("nan")) for s in SCHEMES]
        lo = [r - results.get((setting, s), {}).get("ratio_min", r) for r, s in zip(ratios, SCHEMES)]
        hi = [results.get((setting, s), {}).get("ratio_max", r) - r for r, s in zip(ratios, SCHEMES)]
        ax.bar(xs, ratios, width, yerr=[lo, hi], capsize=3, label=setting)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(settings) - 1) / 2 for j in range(len(SCHEMES))], list(SCHEMES))
    ax.set_ylabel("replayed / predicted")
    ax.set_title("One iteration's communication: replay against the prediction from per-call latencies",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="launches per scheme and setting (default 3)")
    ap.add_argument("--iterations", type=int, default=5, help="timed iterations per launch (default 5)")
    ap.add_argument("--settings", default="local,emulated", help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--throttle", type=float, metavar="MBIT",
                    help="cap node1's link at MBIT Mbit/s for the emulated-throttled setting")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated (default all)")
    ap.add_argument("--json", type=Path, help="also write every summary here")
    ap.add_argument("--figure", type=Path, help="a bar chart of the ratios")
    ap.add_argument("--replot", type=Path, metavar="OUT.json", help="the table and figure of an earlier --json, "
                    "measuring nothing")
    args = ap.parse_args()
    if args.replot:
        saved = json.loads(args.replot.read_text())["results"]
        results = {tuple(k.split("/")): {f: v for f, v in r.items() if f != "summaries"} for k, r in saved.items()}
        print(table(results))
        if args.figure:
            figure(results, args.figure)
        return 0
    settings = args.settings.split(",")
    if "emulated-throttled" in settings and not args.throttle:
        ap.error("the emulated-throttled setting needs --throttle MBIT")
    schemes = args.schemes.split(",")
    unknown = [x for x in settings if x not in SETTINGS] + [x for x in schemes if x not in SCHEMES]
    if unknown:
        ap.error(f"unknown setting or scheme: {', '.join(unknown)}")
    emulated = Emulated() if any(s.startswith("emulated") for s in settings) else None
    runs: dict[tuple[str, str], list[dict]] = {(s, k): [] for s in settings for k in schemes}
    try:
        for round_ in range(args.rounds):
            order = list(runs)
            random.shuffle(order)
            for setting, scheme in order:
                print(f"# round {round_ + 1}/{args.rounds}: {setting} {scheme}", file=sys.stderr, flush=True)
                if setting == "local":
                    summary = run_local(scheme, args.iterations)
                else:
                    summary = emulated.run(scheme, args.iterations,
                                           args.throttle if setting == "emulated-throttled" else None)
                runs[setting, scheme].append(summary)
    finally:
        if emulated:
            emulated.down()
    results = {key: summarize(summaries) for key, summaries in runs.items()}
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"model": MODEL, "schemes": SCHEMES, "results": {
            f"{s}/{k}": {**r, "summaries": runs[s, k]} for (s, k), r in results.items()}}, indent=1))
    if args.figure:
        figure(results, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How often `microbench compare` cries wolf, and how often it catches a real slowdown, on this machine.

1. ``collect``: real launches of ``microbench run --np 2 allreduce latency -m 8:4K`` (20 configurations),
   one file each: ``--normal`` runs, then ``--slow`` runs with MPI_Allreduce slowed by a fraction f, for
   each f of ``--fractions`` (0.10 and 0.25), ``--cycles`` times; with ``--interleave`` normal and slowed
   runs alternate instead. The slowdown is real and outside microbench's timed loop: every launch
   LD_PRELOADs ``slow_mpi/slow_allreduce.c``, whose MPI_Allreduce calls the library's PMPI_Allreduce and
   then spins until the call has taken (1 + f) times as long (f = 0 in the normal runs). Why not Open
   MPI's own knobs: forcing another allreduce algorithm (``OMPI_MCA_coll_tuned_use_dynamic_rules=1``,
   ``OMPI_MCA_coll_tuned_allreduce_algorithm=N``) moved 8 B to 4 KiB allreduce by 2x to 5x on an idle
   machine and by 0.7x to 2x on a loaded one (faster at small sizes), never by 10 or 25 %; a competing
   process on a shared 2-core machine moves p50 by what the other tenants happen to do. The point-to-
   point latency configurations are untouched, so every slowed comparison also holds 10 true nulls.
2. ``analyze``: comparisons formed from the pool, each judged by ``microbench compare --json`` of the
   source tree(s) given (``--src NAME=PATH``: e.g. before=/work/main after=.), run as a user would:

   - false alarms: normal runs only, baseline = the first k, new = the next k of a block (sequential,
     k = 4 and 8), or alternate runs of a block (interleaved); a whole comparison is a false alarm when
     it reports any REGRESSION (compare exits 1);
   - power: the k normal runs before a slowed block against its first k (sequential), or k alternating
     pairs: ``caught``, the share of comparisons in which at least one slowed (allreduce) configuration is
     judged REGRESSION, and ``rows``, the share of allreduce configurations judged REGRESSION, per slowed
     variant, with the slowdown the pool actually shows for it (median of slowed / median of normal runs,
     geometric mean over sizes).

   Per verdict (REGRESSION, regression?, noise, ok, improved) the share of configurations, and per
   comparison the share that failed. Also: the lag-1 correlation of back-to-back runs (each
   configuration's log values minus its block mean, pooled), the reason runs are not independent samples.

    python scripts/bench_gate_errors.py collect POOL [--fractions 0.1 0.25] [--normal 16] [--slow 8] [--cycles 2]
    python scripts/bench_gate_errors.py collect POOL --interleave [--slow 8]
    python scripts/bench_gate_errors.py analyze POOL --src before=/work/main --src after=.
    python scripts/bench_gate_errors.py detect POOL [--draws 100] [--sides 4 8 16] [--slowdowns 0 0.1 0.25 0.5 1]

3. ``detect``: what compare said it could see, against what it saw. Each draw takes 2k distinct normal
   launches of the pool at random (baseline k, new k), multiplies the new side's allreduce latencies by
   1 + s (its bandwidths divided by it: a slowdown injected into real launches' records), and runs this
   tree's ``compare --json`` in-process. Predicted: the mean over draws and allreduce configurations of the
   detection probability compare_power gives each row at s from the row's own se, df and number tested
   (what ``could_see`` reports as the 90 % point); measured: the share of those rows judged REGRESSION. The
   untouched latency configurations give the false-alarm rate at every s. Random draws are not back-to-back
   runs: compare's run correlation is estimated from them like any other input.
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

from microbench.results.metrics import LATENCY_STATS

RUN = ["run", "--np", "2", "allreduce", "latency", "-m", "8:4K"]
VERDICTS = ("regression", "regression?", "noise", "ok", "improved", "improved?")
HERE = Path(__file__).resolve().parent


def build_shim(out: Path) -> Path:
    """slow_mpi/slow_allreduce.c built with the mpicc of the MPI microbench loads."""
    from microbench.cluster.mpi_runtime import import_mpi, library
    from microbench.measure.native.toolchain import find_mpicc

    lib = library(import_mpi(initialize=False))
    target = out / "slow_allreduce.so"
    subprocess.run([find_mpicc(lib.prefix), "-O2", "-fPIC", "-shared", "-o", str(target),
                    str(HERE / "slow_mpi" / "slow_allreduce.c")], check=True)
    return target


def plan(fractions: list[float], normal: int, slow: int, cycles: int, interleave: bool) -> list[str]:
    """The launch order: per cycle and fraction, ``normal`` normal runs then ``slow`` slowed ones (or,
    interleaved, ``slow`` normal/slowed pairs)."""
    out = []
    for _ in range(cycles):
        for f in fractions:
            name = f"slow{f:.2f}"
            out += [v for _ in range(slow) for v in ("normal", name)] if interleave else \
                ["normal"] * normal + [name] * slow
    return out


def collect(pool: Path, order: list[str], shim: Path, interleave: bool) -> None:
    """Every launch carries the shim; the normal ones with fraction 0, so only the spin differs."""
    pool.mkdir(parents=True, exist_ok=True)
    start = len(list(pool.glob("*.jsonl")))
    for i, variant in enumerate(order):
        out = pool / f"{start + i:05d}-{'i' if interleave else 's'}-{variant}.jsonl"
        fraction = variant[4:] if variant.startswith("slow") else "0"
        env = {**os.environ, "LD_PRELOAD": str(shim), "MICROBENCH_SLOW_FRACTION": fraction}
        proc = subprocess.run([sys.executable, "-m", "microbench", *RUN, "--out", str(out)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode:
            print(f"# {out.name} failed, left out: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            out.unlink(missing_ok=True)
        print(f"# {i + 1}/{len(order)} {out.name} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)


def pool_runs(pool: Path) -> list[dict]:
    """Each launch of the pool in order: its file, mode (s/i), variant and per-configuration p50."""
    out = []
    for path in sorted(pool.glob("*.jsonl")):
        _, mode, variant = path.stem.split("-")
        values = {}
        lines = path.read_text().splitlines()
        if not lines or json.loads(lines[-1]).get("type") != "end":
            continue  # a launch still running, or one that died
        for line in lines:
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
    """The comparisons the pool allows: kind, k, baseline and new runs. False alarms: disjoint windows of
    2k back-to-back normal runs (first k against next k), or k alternating pairs of normal runs; power:
    the k normal runs just before a slowed block against its first k (or disjoint windows of k normal/slowed pairs)."""
    out = []
    blocks = blocks_of(runs)
    for index, (mode, variant, members) in enumerate(blocks):
        if mode == "s" and variant == "normal":
            nxt = blocks[index + 1] if index + 1 < len(blocks) else None
            for k in (4, 8):
                for w in range(0, len(members) - 2 * k + 1, 2 * k):
                    out.append({"kind": "false alarm, sequential", "k": k, "base": members[w:w + k],
                                "new": members[w + k:w + 2 * k]})
                if nxt and nxt[0] == "s" and nxt[1] != "normal" and len(members) >= k and len(nxt[2]) >= k:
                    out.append({"kind": f"power {nxt[1]}, sequential", "k": k, "base": members[-k:],
                                "new": nxt[2][:k], "variant": nxt[1]})
        if mode == "i":
            normal = [r for r in members if r["variant"] == "normal"]
            for k in (4, 8):
                for w in range(0, len(normal) - 2 * k + 1, 2 * k):
                    out.append({"kind": "false alarm, interleaved", "k": k, "base": normal[w:w + 2 * k:2],
                                "new": normal[w + 1:w + 2 * k:2]})
            pairs: dict[str, list[tuple[dict, dict]]] = {}
            for before, run in zip(members, members[1:]):
                if before["variant"] == "normal" and run["variant"] != "normal":
                    pairs.setdefault(run["variant"], []).append((before, run))
            for variant, found in pairs.items():
                for k in (4, 8):
                    for w in range(0, len(found) - k + 1, k):  # disjoint windows of k pairs
                        window = found[w:w + k]
                        out.append({"kind": f"power {variant}, interleaved", "k": k, "variant": variant,
                                    "base": [a for a, _ in window], "new": [b for _, b in window]})
    return out


def judge(src: Path, comparison: dict, extra: list[str]) -> dict:
    """``microbench compare --json`` of source tree ``src`` on one comparison."""
    src = src.resolve()
    env = {**os.environ, "PYTHONPATH": str(src), "MICROBENCH_INDEX": "off"}
    cmd = [sys.executable, "-m", "microbench", "compare", "--json", "--baseline",
           *[str(r["path"].resolve()) for r in comparison["base"]], "--new",
           *[str(r["path"].resolve()) for r in comparison["new"]], *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=src)  # cwd: -m imports from there
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def actual_slowdowns(runs: list[dict]) -> dict[str, float]:
    """Per slowed variant: the geometric mean over allreduce configurations of median(slowed runs) /
    median(normal runs), the slowdown the pool actually shows (the shim's clock reads add to its spin)."""
    out = {}
    for variant in sorted({r["variant"] for r in runs} - {"normal"}):
        logs = []
        for key in runs[0]["values"]:
            if key[0] != "allreduce":
                continue
            normal = [r["values"][key] for r in runs if r["variant"] == "normal" and key in r["values"]]
            slow = [r["values"][key] for r in runs if r["variant"] == variant and key in r["values"]]
            if normal and slow:
                logs.append(math.log(statistics.median(slow) / statistics.median(normal)))
        if logs:
            out[variant] = math.exp(statistics.fmean(logs))
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
    shown = ", ".join(f"{v}: x{ratio:.3f}" for v, ratio in slowdown.items())
    print(f"# actual slowdown of allreduce, geometric mean over sizes of median(slowed)/median(normal): {shown}")
    figures = []
    for name, src in sources.items():
        tally: dict = {}
        for comp in comparisons(runs):
            result = judge(src, comp, extra)
            t = tally.setdefault((comp["kind"], comp["k"]), {"comparisons": 0, "failed": 0, "verdicts": {},
                                                               "flagged_slowed": 0, "slowed": 0,
                                                               "caught": 0})
            t["comparisons"] += 1
            t["failed"] += result["exit_status"] == 1
            t["caught"] += any(row["verdict"] == "regression" and row["config"]["benchmark"] == "allreduce"
                               for row in result["rows"])
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
            power = (f" caught={t['caught'] / t['comparisons']:.2f} rows={t['flagged_slowed'] / t['slowed']:.2f}"
                     if t["slowed"] else "")
            print(f"{name:>7}  {kind:<26} {k}+{k}  n={t['comparisons']:>3}  failed={t['failed'] / t['comparisons']:.2f}"
                  f"{power}  {shares}")
            figures.append({"source": name, "kind": kind, "k": k, **t})
    if out_json:
        out_json.write_text(json.dumps({"rho": rho, "slowdown": slowdown, "figures": figures}, indent=1))


def _scaled(lines: list[str], factor: float) -> str:
    """A launch's JSONL with every allreduce result slowed by ``factor`` (latencies times it, bandwidths over it)."""
    out = []
    for line in lines:
        rec = json.loads(line)
        if rec.get("type") == "result" and rec.get("benchmark") == "allreduce" and factor != 1:
            rec["latency_us"] = {k: v * factor if k in LATENCY_STATS else v  # not the sample counts
                                 for k, v in rec["latency_us"].items()}
            for key in ("algbw_gbps", "busbw_gbps"):
                if isinstance(rec.get(key), (int, float)):
                    rec[key] = rec[key] / factor
            if isinstance(rec.get("first_call_us"), dict):
                rec["first_call_us"] = None
        out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


def detect(pool: Path, draws: int, sides: list[int], slowdowns: list[float], seed: int, out_json: Path | None) -> None:
    """Predicted against measured detection of injected slowdowns (see ``detect`` in the module's text)."""
    import contextlib
    import io
    import random
    import tempfile

    from microbench.cli import main as microbench_main
    from microbench.gate import compare_power

    os.environ["MICROBENCH_INDEX"] = "off"
    normal = [r["path"] for r in pool_runs(pool) if r["variant"] == "normal"]
    text = {p: p.read_text().splitlines() for p in normal}
    rng = random.Random(seed)
    figures = []
    print(f"# pool {pool}: {len(normal)} normal launches; {draws} draws per cell; compare --json of this tree")
    print(f"# {'k':>3} {'slowdown':>9} {'predicted':>10} {'measured':>9} {'rows':>6} {'false alarms (latency)':>23} "
          f"{'90 % point (median)':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        for k in sides:
            if 2 * k > len(normal):
                continue
            for s in slowdowns:
                predicted, flagged, rows, nulls, false = [], 0, 0, 0, 0
                points = []
                for d in range(draws):
                    chosen = rng.sample(normal, 2 * k)
                    folder = Path(tmp) / f"k{k}-s{s}-d{d}"
                    folder.mkdir()
                    base, new = [], []
                    for i, path in enumerate(chosen):
                        target = folder / f"{i:02d}.jsonl"
                        target.write_text(_scaled(text[path], 1 + s if i >= k else 1))
                        (new if i >= k else base).append(str(target))
                    buf = io.StringIO()
                    with contextlib.redirect_stdout(buf):
                        microbench_main(["compare", "--json", "--baseline", *base, "--new", *new])
                    result = json.loads(buf.getvalue())
                    alpha = 1 - result["confidence"]
                    log_thr = compare_power.log_threshold(result["threshold"], False)
                    tested = sum(1 for r in result["rows"] if r.get("p") is not None)
                    for row in result["rows"]:
                        if row["config"]["benchmark"] != "allreduce":
                            nulls += 1
                            false += row["verdict"] == "regression"
                            continue
                        rows += 1
                        flagged += row["verdict"] == "regression"
                        if row.get("detectable_change_90") is not None:
                            points.append(row["detectable_change_90"])
                        if row.get("se_log") is not None and row.get("df"):
                            predicted.append(compare_power.detection_probability(
                                math.log1p(s), row["se_log"], row["df"], tested, alpha, log_thr))
                        else:
                            predicted.append(0.0)
                pred = statistics.fmean(predicted) if predicted else float("nan")
                meas = flagged / rows if rows else float("nan")
                point = statistics.median(points) if points else float("nan")
                print(f"  {k:>3} {s:>9.0%} {pred:>10.2f} {meas:>9.2f} {rows:>6} {false / max(nulls, 1):>23.3f} "
                      f"{point:>19.0%}", flush=True)
                figures.append({"k": k, "slowdown": s, "predicted": pred, "measured": meas, "rows": rows,
                                "false_alarm_rate_untouched": false / max(nulls, 1), "median_detectable_90": point})
    if out_json:
        out_json.write_text(json.dumps({"draws": draws, "seed": seed, "figures": figures}, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("pool", type=Path)
    c.add_argument("--fractions", type=float, nargs="+", default=[0.10, 0.25],
                   help="slowdowns of MPI_Allreduce to make (the shim's MICROBENCH_SLOW_FRACTION)")
    c.add_argument("--normal", type=int, default=16, help="normal runs before each slowed block")
    c.add_argument("--slow", type=int, default=8, help="runs in a slowed block (pairs when interleaved)")
    c.add_argument("--cycles", type=int, default=2)
    c.add_argument("--interleave", action="store_true")
    a = sub.add_parser("analyze")
    a.add_argument("pool", type=Path)
    a.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="a source tree whose compare judges (default after=.)")
    a.add_argument("--json", type=Path)
    a.add_argument("extra", nargs="*", help="more compare options, after --")
    t = sub.add_parser("detect")
    t.add_argument("pool", type=Path)
    t.add_argument("--draws", type=int, default=100, help="random draws per (k, slowdown) (default 100)")
    t.add_argument("--sides", type=int, nargs="+", default=[4, 8, 16], help="runs a side (default 4 8 16)")
    t.add_argument("--slowdowns", type=float, nargs="+", default=[0.0, 0.1, 0.25, 0.5, 1.0],
                   help="slowdowns injected into the new side's allreduce (default 0 0.1 0.25 0.5 1)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.cmd == "detect":
        detect(args.pool, args.draws, args.sides, args.slowdowns, args.seed, args.json)
        return 0
    if args.cmd == "collect":
        t0 = time.monotonic()
        args.pool.mkdir(parents=True, exist_ok=True)
        shim = build_shim(args.pool.resolve())
        collect(args.pool, plan(args.fractions, args.normal, args.slow, args.cycles, args.interleave), shim,
                args.interleave)
        print(f"# collected in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        return 0
    sources = dict(s.split("=", 1) for s in args.src) or {"after": "."}
    analyze(args.pool, {k: Path(v) for k, v in sources.items()}, args.extra, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

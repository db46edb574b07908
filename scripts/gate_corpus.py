#!/usr/bin/env python3
"""The real-launch corpus of the gate tests and of docs/regressions.md's rates: real 2-rank launches of the core
suite at small sizes, same code throughout, in several machine states over several "nights".

    python scripts/gate_corpus.py collect OUT [--nights 4] [--per-state 4] [--states quiet,one,both] [--code DIR]
    python scripts/gate_corpus.py rates CORPUS [--draws 200] [--seed 1] [--json FILE]

``collect`` makes the corpus: for each night (a batch; the machine's other tenants do what they do), for each
machine state in a shuffled order, ``--per-state`` launches of
``microbench run --np 2 -m 8:1K --out OUT/nNN-STATE-K.jsonl`` (the default benchmarks: allreduce, allgather,
reduce_scatter, broadcast, latency, bw). The states: ``quiet`` (nothing of ours beside the ranks), ``one`` (one
busy-loop process of ours beside them: one core busy), ``both`` (two: both cores of this 2-core machine busy).
The code is copied once to a scratch folder first (``--code``: an existing copy), so edits to the checkout while
it collects do not reach the launches. Every record is the run's own (records model, machine state at start and
end); ``OUT/manifest.json`` says when, which commit, which states, and how long it took.

``rates`` measures each gate on the corpus (``corpus.py`` beside the tests draws from it: the gate tests use
the same functions): false alarms on same code, detection of +15 %, +40 % and 2x slowdowns injected into real
launches (latencies scaled, bandwidths recomputed, as ``tests/fixtures/corpus/corpus.py`` does), at 1, 2, 3,
4, 8 and 16 runs a side for ``compare``, and ``history --fail-on-step`` at 6, 12 and 30 nights. It prints the
tables docs/regressions.md shows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

STATES = {"quiet": 0, "one": 1, "both": 2}  #: state -> busy-loop processes of ours beside the ranks
RUN_ARGS = ["run", "--np", "2", "-m", "8:1K"]


def _busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=10)


def _commit() -> str:
    """HEAD's commit, marked ``+changes`` when the checkout's package differs from it."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "microbench"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + (" +changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def collect(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    code = Path(args.code) if args.code else Path(tempfile.mkdtemp(prefix="microbench-corpus-code-"))
    if not args.code:
        shutil.copytree(REPO / "microbench", code / "microbench")
    env = {**os.environ, "PYTHONPATH": str(code), "MICROBENCH_PROGRESS": "0"}
    env.pop("MICROBENCH_TESTING", None)
    states = [s.strip() for s in args.states.split(",") if s.strip()]
    unknown = [s for s in states if s not in STATES]
    if unknown:
        raise SystemExit(f"unknown state(s) {', '.join(unknown)}: choose from {', '.join(STATES)}")
    rng = random.Random(args.seed)
    commit = _commit()  # the code launched is this commit's (copied above), whatever the checkout becomes
    began, launches, failed = time.monotonic(), 0, 0
    for night in range(args.nights):
        order = states[:]
        rng.shuffle(order)
        wdir = code / f"night-{night:02d}"  # a dated folder, as a nightly job's (recorded as a per-launch value)
        wdir.mkdir(exist_ok=True)
        for state in order:
            procs = _busy(STATES[state])
            try:
                time.sleep(1.0 if procs else 0.0)
                for k in range(args.per_state):
                    path = out / f"n{night:02d}-{state}-{k}.jsonl"
                    proc = subprocess.run([sys.executable, "-m", "microbench", *RUN_ARGS, "--out", str(path)],
                                          env=env, cwd=wdir, capture_output=True, text=True, timeout=600)
                    launches += 1
                    if proc.returncode != 0:
                        failed += 1
                        print(f"{path.name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}", file=sys.stderr)
                    else:
                        print(f"{path.name}: {path.stat().st_size // 1024} KB", flush=True)
            finally:
                _stop(procs)
    took = time.monotonic() - began
    manifest = {"made_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
                "command": ["microbench", *RUN_ARGS], "nights": args.nights, "per_state": args.per_state,
                "states": {s: f"{STATES[s]} busy-loop process(es) of ours beside the 2 ranks" for s in states},
                "launches": launches, "failed": failed, "seconds": round(took, 1),
                "load_avg_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
                "cpus": os.cpu_count()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{launches} launches ({failed} failed) in {took:.0f} s; manifest in {out / 'manifest.json'}")
    return 1 if failed else 0


def rates(args) -> int:
    from fixtures.corpus import rates as measure

    doc = measure.all_rates(Path(args.corpus), draws=args.draws, seed=args.seed)
    print("\n".join(measure.markdown(doc)))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    c = sub.add_parser("collect", help="make a corpus of real launches")
    c.add_argument("out")
    c.add_argument("--nights", type=int, default=4)
    c.add_argument("--per-state", type=int, default=4)
    c.add_argument("--states", default="quiet,one,both")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--code", help="a copy of the package to launch (default: copied now)")
    r = sub.add_parser("rates", help="the rates each gate reaches on a corpus")
    r.add_argument("corpus")
    r.add_argument("--draws", type=int, default=200)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--json", help="also write the figures as JSON")
    args = ap.parse_args()
    return collect(args) if args.verb == "collect" else rates(args)


if __name__ == "__main__":
    raise SystemExit(main())

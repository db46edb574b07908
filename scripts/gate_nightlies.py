#!/usr/bin/env python3
"""Nightly result directories built from one real run: the input of the gate benchmarks and tests.

A real ``microbench run`` file is the template. Night ``d`` gets a directory ``OUT/YYYY-MM-DD/`` with one
file ``nightly.jsonl`` holding a copy of the template's run: a fresh run id, the night's start time on the
run line, every result line and the end line, and every latency statistic of a result multiplied by one
factor (so p10 <= p50 <= p99 stay ordered); ``algbw_gbps`` and ``busbw_gbps`` are recomputed from the
scaled mean latency as ``microbench run`` computes them (S / avg latency [x factor]). Nothing else changes,
so the records keep the shape (and the schema) the template had.

Factors: exp(N(0, night_sigma)) for the night (a machine's spell) times exp(N(0, record_sigma)) per result,
from a seeded generator; ``steps`` multiply the results of chosen benchmarks from a chosen night on, and
``changes`` overwrite run-line fields from a night on (for example a new MPI library), so that tests and
benchmarks know exactly where a step starts and what changed with it.

    python scripts/gate_nightlies.py RUN.jsonl OUT --nights 365 [--start 2026-01-01]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

LATENCY_STATS = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")


@dataclass
class Step:
    """From night ``night`` (0-based) on, results of ``benchmarks`` (all when empty) take ``factor`` x."""

    night: int
    factor: float
    benchmarks: tuple[str, ...] = ()
    max_size: int | None = None  #: only results up to this size (bytes), None: every size


@dataclass
class Plan:
    nights: int
    start: dt.date = dt.date(2026, 1, 1)
    night_sigma: float = 0.05
    record_sigma: float = 0.02
    seed: int = 1
    steps: list[Step] = field(default_factory=list)
    changes: dict[int, dict] = field(default_factory=dict)  #: night -> run-line fields set from then on
    hour_utc: int = 2


def read_template(path: str | Path) -> tuple[dict, list[dict], dict | None]:
    """(run line, result lines, end line) of the first run in a real results file."""
    run, results, end = None, [], None
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        kind = rec.get("type")
        if kind == "run":
            if run is not None:
                break
            run = rec
        elif kind == "result" and run is not None:
            results.append(rec)
        elif kind == "end" and run is not None:
            end = rec
            break
    if run is None or not results:
        raise SystemExit(f"{path}: no run with results to copy")
    return run, results, end


def scale_result(rec: dict, factor: float, run_id: str, time_utc: str) -> dict:
    """A copy of result ``rec`` with every latency statistic x ``factor`` and bandwidth recomputed."""
    out = dict(rec)
    out["run_id"], out["time_utc"] = run_id, time_utc
    latency = dict(rec.get("latency_us") or {})
    for stat in LATENCY_STATS:
        if isinstance(latency.get(stat), (int, float)):
            latency[stat] = latency[stat] * factor
    out["latency_us"] = latency
    avg, s_bytes = latency.get("avg"), rec.get("algbw_bytes")
    if isinstance(avg, (int, float)) and avg > 0 and isinstance(s_bytes, (int, float)):
        out["algbw_gbps"] = s_bytes / (avg * 1e-6) / 1e9
        out["busbw_gbps"] = out["algbw_gbps"] * (rec.get("busbw_factor") or 1.0)
    return out


def step_factor(steps: Iterable[Step], night: int, rec: dict) -> float:
    factor = 1.0
    for step in steps:
        if night >= step.night and (not step.benchmarks or rec.get("benchmark") in step.benchmarks) \
                and (step.max_size is None or (rec.get("size_bytes") or 0) <= step.max_size):
            factor *= step.factor
    return factor


def night_lines(template: tuple[dict, list[dict], dict | None], plan: Plan, night: int,
                rng: random.Random) -> list[dict]:
    """The records of night ``night``: run line, results, end line."""
    run, results, end = template
    when = dt.datetime.combine(plan.start + dt.timedelta(days=night), dt.time(plan.hour_utc, rng.randrange(60)))
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    run_id = secrets.token_hex(6)
    meta = copy.deepcopy(run)
    meta["run_id"], meta["time_utc"] = run_id, stamp
    for from_night, fields in sorted(plan.changes.items()):
        if night >= from_night:
            merge(meta, fields)
    spell = math.exp(rng.gauss(0, plan.night_sigma))
    lines = [meta]
    for rec in results:
        factor = spell * math.exp(rng.gauss(0, plan.record_sigma)) * step_factor(plan.steps, night, rec)
        lines.append(scale_result(rec, factor, run_id, stamp))
    if end is not None:
        lines.append({**end, "run_id": run_id, "time_utc": stamp})
    return lines


def merge(target: dict, fields: dict) -> None:
    """Set ``fields`` in ``target``; nested dicts are merged key by key."""
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def night_dir(out: Path, plan: Plan, night: int) -> Path:
    return Path(out) / (plan.start + dt.timedelta(days=night)).isoformat()


def write_nightlies(template_path: str | Path, out: str | Path, plan: Plan) -> list[Path]:
    """Write ``plan.nights`` nightly directories under ``out``; returns the files written."""
    template = read_template(template_path)
    rng = random.Random(plan.seed)
    written = []
    for night in range(plan.nights):
        path = night_dir(Path(out), plan, night) / "nightly.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n"
                       for rec in night_lines(template, plan, night, rng))
        path.write_text(text)
        written.append(path)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("template", help="a real microbench run's JSONL file")
    ap.add_argument("out", help="folder for the nightly directories (created)")
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--start", type=dt.date.fromisoformat, default=dt.date(2026, 1, 1))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    files = write_nightlies(args.template, args.out, Plan(args.nights, args.start, seed=args.seed))
    total = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} nightly files, {total / 1e6:.1f} MB, under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

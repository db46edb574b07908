#!/usr/bin/env python3
"""Which way to read a year of nightly JSONL for the gate tools: the measurement behind docs/results-at-scale.md.

Each reader extracts the same thing from every JSONL file below a folder, the work every gate verb does
first: for every result record its configuration key (20 fields), its p50 latency, and its run's id,
time, hosts, MPI and versions. Each runs in a fresh process; the script prints wall seconds, CPU seconds
and peak resident memory (MB = 1e6 B) per reader:

- ``stdlib``: json.loads per line, keys dictionary-encoded, numbers appended to arrays;
- ``orjson``: the same with orjson.loads (if installed);
- ``msgspec``: msgspec decodes each file into structs holding only those fields (skipping the rest);
- ``duckdb``: DuckDB's read_ndjson over the folder with an explicit column list (if installed);
- ``microbench``: ``microbench.results.load.load_table`` itself, index off (cold) and on (warm, second run).

    python scripts/bench_gate_readers.py FOLDER [--readers stdlib msgspec ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

KEY = ("benchmark", "size_bytes", "ranks", "backend", "dtype", "op", "in_place", "loop", "call_path", "cache", "sync",
       "window", "root", "huge_pages", "check", "torch_backend", "device", "buffer", "metric", "schedule")
RUN_FIELDS = ("run_id", "time_utc", "hosts", "mpi", "versions")
READERS = ("stdlib", "orjson", "msgspec", "duckdb", "microbench-cold", "microbench-warm")


def files(folder: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).rglob("*.jsonl"))


def by_line(folder: str, loads) -> int:
    codes: dict = {}
    config, p50, runs = array("i"), array("d"), []
    for path in files(folder):
        with open(path, "rb") as f:
            for line in f:
                try:
                    rec = loads(line)
                except ValueError:
                    continue
                kind = rec.get("type")
                if kind == "result":
                    key = tuple(json.dumps(v) if isinstance(v, (dict, list)) else v for v in map(rec.get, KEY))
                    config.append(codes.setdefault(key, len(codes)))
                    p50.append((rec.get("latency_us") or {}).get("p50") or float("nan"))
                elif kind == "run":
                    runs.append({n: rec.get(n) for n in RUN_FIELDS})
    return len(p50)


def read_msgspec(folder: str) -> int:
    from typing import Any, Optional

    import msgspec

    latency = msgspec.defstruct("Latency", [("p50", Optional[float], None)])
    line_type = msgspec.defstruct("Line", [(n, Any, None) for n in (*KEY, "type", *RUN_FIELDS)]
                                  + [("latency_us", Optional[latency], None)])
    decoder = msgspec.json.Decoder(line_type)
    codes: dict = {}
    config, p50, runs = array("i"), array("d"), []
    for path in files(folder):
        for rec in decoder.decode_lines(Path(path).read_bytes()):
            if rec.type == "result":
                key = tuple(getattr(rec, n) for n in KEY)
                config.append(codes.setdefault(key, len(codes)))
                p50.append(rec.latency_us.p50 if rec.latency_us and rec.latency_us.p50 is not None else float("nan"))
            elif rec.type == "run":
                runs.append(rec)
    return len(p50)


def read_duckdb(folder: str) -> int:
    import duckdb

    con = duckdb.connect(config={"threads": 2})
    types = {n: "VARCHAR" for n in KEY} | {"size_bytes": "BIGINT", "ranks": "INTEGER", "in_place": "BOOLEAN",
                                           "window": "INTEGER", "root": "INTEGER"}
    columns = {"type": "VARCHAR", "run_id": "VARCHAR", **types, "latency_us": "STRUCT(p50 DOUBLE)"}
    spec = "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"
    names = ", ".join(f'"{n}"' for n in KEY)
    query = (f"SELECT {names}, latency_us.p50 AS p50, run_id FROM read_ndjson('{folder}/**/*.jsonl', "
             f"columns={spec}, ignore_errors=true) WHERE type = 'result'")
    return len(con.execute(query).fetchnumpy()["p50"])


def read_microbench(folder: str) -> int:
    from microbench.results.load import load_table

    return len(load_table([folder], stats=["p50"]))


def child(name: str, folder: str) -> None:
    """Runs one reader in this (fresh) process and prints one JSON line."""
    start, cpu = time.monotonic(), time.process_time()
    if name == "stdlib":
        rows = by_line(folder, json.loads)
    elif name == "orjson":
        import orjson

        rows = by_line(folder, orjson.loads)
    elif name == "msgspec":
        rows = read_msgspec(folder)
    elif name == "duckdb":
        rows = read_duckdb(folder)
    else:
        rows = read_microbench(folder)
    print(json.dumps({"reader": name, "rows": rows, "wall_s": time.monotonic() - start,
                      "cpu_s": time.process_time() - cpu,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--readers", nargs="+", choices=READERS, default=list(READERS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.folder)
        return 0
    size = sum(os.path.getsize(p) for p in files(args.folder))
    print(f"# {args.folder}: {size / 1e6:.1f} MB of JSONL; load average {os.getloadavg()[0]:.1f} (2 cores shared)")
    print(f"# {'reader':<16} {'rows':>8} {'wall_s':>7} {'cpu_s':>7} {'MB/s':>6} {'peak_MB':>8}")
    with tempfile.TemporaryDirectory() as index:
        for name in args.readers:
            env = {**os.environ, "MICROBENCH_INDEX": index if name == "microbench-warm" else "off"}
            if name == "microbench-warm":  # fill the index first
                subprocess.run([sys.executable, __file__, args.folder, "--child", name], env=env, check=True,
                               capture_output=True)
            proc = subprocess.run([sys.executable, __file__, args.folder, "--child", name], env=env,
                                  capture_output=True, text=True)
            if proc.returncode:
                print(f"  {name:<16} not run: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"  {name:<16} {r['rows']:>8} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} "
                  f"{size / 1e6 / r['wall_s']:>6.0f} {r['peak_mb']:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

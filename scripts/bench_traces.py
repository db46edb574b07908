#!/usr/bin/env python3
"""Trace readers at any size: MB/s and peak memory per format and file size (targets: NCCL logs >= 50 MB/s,
peak memory <= 200 MB reading a 1 GB log or trace).

For each format and size it writes a synthetic file of about that size (samples.py's lines and events, a
mix like a real run's: collectives among other lines or ops; gzip formats are compressed text of that
size), then reads it with ``read_trace`` in a fresh Python process, ``--repeat`` times. Per run it takes the
wall time and CPU time (process_time) of ``read_trace`` alone, the process's peak resident memory
(ru_maxrss), and the resident memory after the imports, before reading (the interpreter's own share of the
peak). It reports the median over runs: MB/s = text bytes / wall seconds (MB = 10^6 bytes; "file MB/s" the
same for the bytes on disk, which differ for gzip), CPU MB/s = text bytes / CPU seconds (what the reader
would do alone: on a machine shared with other work, wall time also counts the waits for a core), peak and
baseline memory in MiB, and whether the targets hold (on wall time). Files are deleted after they are
measured.

    python scripts/bench_traces.py                       # 10 MB, 100 MB, 1 GB of every format
    python scripts/bench_traces.py --sizes 10M --formats nccl kineto --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from microbench.workload.traces import samples

SIZES = {"10M": 10 ** 7, "100M": 10 ** 8, "1G": 10 ** 9}
NCCL_TARGET_MBPS = 50.0
MEMORY_TARGET_MIB = 200.0

READ = r"""
import json, resource, sys, time
from microbench.workload.traces import read_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start, cpu = time.perf_counter(), time.process_time()
report = read_trace(sys.argv[1])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_kib": peak,
                  "base_kib": base, "calls": report.total_calls, "ranks": len(report.ranks),
                  "entries": report.entries}))
"""

_SIZES = [4 << k for k in range(8, 24)]  # 1 KiB .. 32 MiB messages


def nccl_lines() -> Iterator[str]:
    """16 ranks (4 hosts x 2 processes x 2 GPUs), a TP and a DP communicator each; 1 line in 10 is no call."""
    for host in range(4):
        for proc in range(2):
            for dev in range(2):
                for kind in ("tp", "dp"):
                    yield samples.nccl_init(f"0x{kind}{host}{proc}{dev}", dev, 4, host=f"node{host:03d}",
                                            pid=1000 + proc, dev=dev)
    ops = [("AllReduce", 1), ("AllGather", 1), ("ReduceScatter", 1), ("Broadcast", 1), ("Send", 1), ("Recv", 1)]
    i = 0
    while True:
        i += 1
        host, proc, dev = i % 4, (i // 4) % 2, (i // 8) % 2
        op = ops[i % len(ops)][0]
        kind = "tp" if i % 3 else "dp"
        yield samples.nccl_call(op, _SIZES[i % len(_SIZES)] // 4, 7 if i % 2 else 9, f"0x{kind}{host}{proc}{dev}",
                                4, host=f"node{host:03d}", pid=1000 + proc, tid=2000 + proc, dev=dev, opcount=i)
        if i % 9 == 0:
            yield (f"node{host:03d}:{1000 + proc}:{3000 + proc} [{dev}] NCCL INFO Channel 0{i % 8}/0 : "
                   f"{dev}[{dev}] -> {1 - dev}[{1 - dev}] via P2P/IPC/read")


def kineto_events() -> Iterator[dict]:
    """A GPU training step's profile: 1 event in 20 is a collective (CPU op, kernel, annotation)."""
    i = 0
    while True:
        i += 1
        if i % 20 == 0:
            yield samples.kineto_comms("allreduce", _SIZES[i % len(_SIZES)] // 2, "BFloat16", 8, ts=i)
            yield samples.kineto_comms("allreduce", _SIZES[i % len(_SIZES)] // 2, "BFloat16", 8, cat="kernel", ts=i)
            yield samples.kineto_op("nccl:all_reduce", [[_SIZES[i % len(_SIZES)] // 2]], ["c10::BFloat16"],
                                    cat="user_annotation", ts=i)
        elif i % 2:
            yield samples.kineto_op("aten::mm", [[4096, 4096], [4096, 1024]], ["c10::BFloat16"] * 2, ts=i)
        else:
            yield samples.kineto_kernel("void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_128x128>"
                                        "(Params)", ts=i)


def et_nodes() -> Iterator[dict]:
    i = 2
    while True:
        i += 1
        if i % 20 == 0:
            yield samples.et_comms_node(i, "allreduce", _SIZES[i % len(_SIZES)] // 2, "BFloat16", 8)
        else:
            yield samples.et_op_node(i, "aten::mm", [[4096, 4096], [4096, 1024]], ["Tensor(c10::BFloat16)"] * 2)


def profiler_lines() -> Iterator[str]:
    yield "["
    i = 0
    while True:
        i += 1
        name = ("AllReduce", "AllGather", "Broadcast")[i % 3]
        yield samples.profiler_event(name, _SIZES[i % len(_SIZES)] // 4, "ncclFloat32", ident=i)
        for step in range(3):
            yield (f'{{"name": "ScheduleSend", "cat": "PROXY", "ph": "b", "id": {i}, "pid": 4242, "tid": 1, '
                   f'"ts": {i}.{step}, "args": {{"Channel": {step}, "Peer": 1, "Steps": 8, "ChunkSize": 524288, '
                   f'"transSize": 4194304}}}},')
        yield samples.profiler_end(name, ident=i)


def deepspeed_lines() -> Iterator[str]:
    i = 0
    while True:
        i += 1
        size = ("24.0 MB", "6.0 MB", "2.0 KB", "98.25 MB")[i % 4]
        yield samples.deepspeed_verbose(("all_reduce", "all_gather_into_tensor", "broadcast", "reduce_scatter")[i % 4],
                                        size)
        if i % 5 == 0:
            yield f"[2024-05-01 10:00:01,000] [INFO] [engine.py:1000:train] step={i} loss=7.{i % 100:02d}"


def json_pieces(kind: str) -> Iterator[str]:
    if kind == "kineto":
        return samples.json_document({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0}},
                                     "traceEvents", kineto_events())
    return samples.json_document({"schema": "1.1.1-chakra.0.0.4", "pid": 4242}, "nodes", et_nodes())


FORMATS = {  # name -> (pieces, closing text, gzip)
    "nccl": (lambda: (line + "\n" for line in nccl_lines()), "", False),
    "nccl.gz": (lambda: (line + "\n" for line in nccl_lines()), "", True),
    "nccl-profiler": (lambda: (line + "\n" for line in profiler_lines()), "{}]\n", False),
    "deepspeed": (lambda: (line + "\n" for line in deepspeed_lines()), "", False),
    "kineto": (lambda: json_pieces("kineto"), "\n]}\n", False),
    "kineto.gz": (lambda: json_pieces("kineto"), "\n]}\n", True),
    "execution-trace": (lambda: json_pieces("et"), "\n]}\n", False),
}


def write_sample(path: Path, fmt: str, target: int) -> int:
    """Write about ``target`` bytes of text in ``fmt``; returns the text bytes written."""
    pieces, closing, compress = FORMATS[fmt]
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if compress else (lambda p: open(p, "wb"))
    written, batch = 0, []
    with opener(path) as out:
        for piece in pieces():
            batch.append(piece)
            if len(batch) == 4096 or written + len(batch) * len(piece) >= target:
                data = "".join(batch).encode()
                out.write(data)
                written += len(data)
                batch = []
                if written >= target:
                    break
        out.write(closing.encode())
    return written + len(closing)


def measure(path: Path, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"reading {path} failed:\n{done.stderr}")
        runs.append(json.loads(done.stdout))
    pick = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    return {"seconds": pick("seconds"), "cpu_seconds": pick("cpu_seconds"), "peak_mib": pick("peak_kib") / 1024,
            "base_mib": pick("base_kib") / 1024,
            "calls": runs[0]["calls"], "ranks": runs[0]["ranks"], "entries": runs[0]["entries"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))  # the first paragraph
    ap.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES))
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--repeat", type=int, default=1, help="reads per file (median reported)")
    ap.add_argument("--dir", help="where to write the samples (default: a temporary directory)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    rows = []
    print(f"{'format':>16} {'size':>5} {'text MB':>8} {'file MB':>8} {'s':>7} {'MB/s':>7} {'file MB/s':>9} "
          f"{'CPU MB/s':>8} {'peak MiB':>8} {'base MiB':>8} {'calls':>10} {'ranks':>5}  target")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for fmt in args.formats:
            for size in args.sizes:
                path = Path(tmp) / f"sample.{fmt}"
                text_bytes = write_sample(path, fmt, SIZES[size])
                file_bytes = path.stat().st_size
                m = measure(path, args.repeat)
                path.unlink()
                mbps = text_bytes / 1e6 / m["seconds"]
                ok = [m["peak_mib"] <= MEMORY_TARGET_MIB] + ([mbps >= NCCL_TARGET_MBPS] if fmt == "nccl" else [])
                row = {"format": fmt, "size": size, "text_mb": text_bytes / 1e6, "file_mb": file_bytes / 1e6,
                       **m, "mb_per_s": mbps, "file_mb_per_s": file_bytes / 1e6 / m["seconds"],
                       "cpu_mb_per_s": text_bytes / 1e6 / m["cpu_seconds"], "targets_met": all(ok)}
                rows.append(row)
                print(f"{fmt:>16} {size:>5} {row['text_mb']:8.1f} {row['file_mb']:8.1f} {m['seconds']:7.2f} "
                      f"{mbps:7.1f} {row['file_mb_per_s']:9.1f} {row['cpu_mb_per_s']:8.1f} {m['peak_mib']:8.1f} "
                      f"{m['base_mib']:8.1f} "
                      f"{m['calls']:>10} {m['ranks']:>5}  {'met' if all(ok) else 'MISSED'}", flush=True)
    print(f"# targets: nccl >= {NCCL_TARGET_MBPS:g} MB/s of text; peak resident memory <= {MEMORY_TARGET_MIB:g} MiB "
          "at every size (base: the interpreter and imports before reading)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["targets_met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

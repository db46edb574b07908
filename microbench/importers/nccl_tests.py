"""nccl-tests output: its text table (out-of-place and in-place halves) and its ``-J`` JSON file.

Text: a run starts at ``# nThread 1 nGpus 1 minBytes 8 maxBytes ... warmup iters: 5 iters: 20 ...``
(newer versions print ``# nccl-tests version ...`` and ``# Collective test starting: all_reduce_perf``
before it), lists ``#  Rank  0 Group  0 Pid ... on HOST device  0 [...] NAME`` per rank, then a
header ``# size count type redop root time algbw busbw #wrong time algbw busbw #wrong`` (``i_min
i_max i_p99 i_cv%`` after each half with ``-I 1``; older versions lack ``root`` or print ``error``)
and ends with ``# Out of bounds values : 0 OK``. JSON (``-J FILE``, nccl-tests 2.17 and later): the
same figures under ``config`` and ``results``, with ``args`` (the command line) and ``start_time``.

Each table row gives two results, out-of-place and in-place. ``time`` is nccl-tests' mean time per
iteration, by default (``-a 1``) averaged over ranks: microbench's ``latency_us.avg``. Sizes are
converted to microbench's definition: allgather and alltoall print the whole buffer, microbench
counts each rank's contribution (count x element size).
"""

from __future__ import annotations

import json
import os
import re
import shlex

from microbench.benchmarks.dtypes import DTYPES
from microbench.errors import UsageError
from microbench.importers.parsed import Row, ToolRun, where

BENCHMARKS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
              "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall"}
#: nccl-tests type name -> (microbench dtype name, bytes per element)
TYPES = {"int8": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "uint32": ("uint32", 4),
         "int64": ("int64", 8), "uint64": ("uint64", 8), "half": ("float16", 2), "float": ("float32", 4),
         "double": ("float64", 8), "bfloat16": ("bfloat16", 2), "f8e4m3": ("f8e4m3", 1), "f8e5m2": ("f8e5m2", 1)}
#: -a: which statistic nccl-tests' time is
AVERAGE = {1: "avg", 2: "min", 3: "max"}
PER_ITER = {"i_min": "fastest", "i_max": "slowest", "i_p50": "p50", "i_p99": "p99"}  #: i_p50: JSON only
DEFINITIONS = {
    "avg": "nccl-tests' time (-a 1): each rank's mean time per iteration, averaged over ranks",
    "min": "nccl-tests' time with -a 2: the minimum over ranks of the mean time per iteration",
    "max": "nccl-tests' time with -a 3: the maximum over ranks of the mean time per iteration",
    "fastest/slowest/p50/p99": "nccl-tests -I 1 (i_min, i_max, the JSON's p50_us, i_p99): over iterations of the "
                               "CUDA-event time, the maximum over the process's GPUs per iteration",
}

NTHREAD = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
VERSION_LINE = re.compile(r"^#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+"
                       r"\s+\[[^\]]*\]\s*(.*)$")
NCCL_INFO = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
HEADER_ITEMS = {"warmup": r"warmup iters: (\d+)", "iterations": r"(?<!warmup )(?<!agg )iters: (\d+)",
                 "agg_iterations": r"agg iters: (\d+)", "validation": r"validation: (\d+)", "graph": r"graph: (\d+)",
                 "min_bytes": r"minBytes (\d+)", "max_bytes": r"maxBytes (\d+)"}


def benchmark_of(program: str) -> str:
    """microbench's benchmark for an nccl-tests program (``./build/all_reduce_perf`` -> allreduce)."""
    name = re.sub(r"(_perf)?(_mpi)?$", "", os.path.basename(program.strip()))
    if name not in BENCHMARKS:
        raise UsageError(f"nccl-tests program {program!r} has no microbench counterpart "
                         f"(importable: {', '.join(f'{k}_perf' for k in BENCHMARKS)})")
    return BENCHMARKS[name]


def nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE as text: 22703 -> 2.27.3 (from 2.9), 2708 -> 2.7.8 (before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def args_options(argv: list[str]) -> dict:
    """The options that decide how nccl-tests' figures read: -a (average mode), -C (CPU time), -n, -w."""
    out, flags = {}, {"-a": "average", "--average": "average", "-C": "report_cputime", "--report_cputime":
                      "report_cputime", "-n": "iterations", "--iters": "iterations", "-w": "warmup",
                      "--warmup_iters": "warmup"}
    for i, token in enumerate(argv):
        key, _, value = token.partition("=")
        if key in flags and (value or i + 1 < len(argv)):
            try:
                out[flags[key]] = int(value or argv[i + 1])
            except ValueError:
                raise UsageError(f"nccl-tests option {key} needs a number (got {value or argv[i + 1]!r})") from None
    return out


def latency_stat(options: dict, where: str) -> str:
    """The latency statistic nccl-tests' time column is; CPU time and rank-0 time are refused."""
    if options.get("report_cputime"):
        raise UsageError(f"{where}: nccl-tests ran with -C 1 (CPU time per iteration, not the collective's time)")
    mode = options.get("average", 1)
    if mode not in AVERAGE:
        raise UsageError(f"{where}: nccl-tests ran with -a {mode} (rank 0's time alone); microbench records "
                         f"a statistic over ranks")
    return AVERAGE[mode]


def rows_from(benchmark: str, ranks: int | None, meta: dict, halves: list[tuple[bool, dict]], line: int,
              stat: str, where: str) -> list[Row]:
    """The results of one table line: ``meta`` holds size, count, type, redop, root; each half its figures."""
    dtype, itemsize = TYPES.get(meta["type"], (meta["type"], None))
    size = int(meta["size"])
    if benchmark in ("allgather", "alltoall"):  # nccl-tests prints the whole buffer; microbench each rank's part
        if itemsize is None and not ranks:
            raise UsageError(f"{where}: cannot convert {benchmark} sizes of type {meta['type']!r} without the "
                             f"rank count: pass --ranks")
        size = int(meta["count"]) * itemsize if itemsize else size // ranks
    root = int(meta["root"]) if str(meta.get("root", "-1")).strip().lstrip("-").isdigit() else None
    out = []
    for in_place, figures in halves:
        time_us = figures.get("time")
        if time_us is None:
            continue
        row = Row(benchmark=benchmark, size_bytes=size, latency_us={stat: float(time_us)}, line=line,
                  values={k: v for k, v in figures.items()}, dtype=DTYPES[dtype].name if dtype in DTYPES else dtype,
                  op=meta.get("redop") if meta.get("redop") not in (None, "none") else None, in_place=in_place,
                  root=root if root is not None and root >= 0 else None)
        row.latency_us.update({PER_ITER[k]: float(v) for k, v in figures.items() if k in PER_ITER})
        wrong = figures.get("#wrong")
        if wrong is not None and str(wrong) != "N/A":
            row.check = "pass" if float(wrong) == 0 else "fail"
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------ JSON
def parse_json(text: str, path: str, ranks: int | None, benchmark: str | None, args: str | None) -> ToolRun:
    """One nccl-tests JSON file (``-J``) as a tool run."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply to be an nccl-tests file") from None
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    with where(path):
        return _parse_doc(doc, path, ranks, benchmark, args)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number this import takes (NaN and infinities are refused)")


def _parse_doc(doc, path: str, ranks: int | None, benchmark: str | None, args: str | None) -> ToolRun:
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list) or "config" not in doc:
        raise UsageError(f"{path}: not an nccl-tests JSON file (no config and results)")
    argv = [str(a) for a in doc.get("args") or []] or shlex.split(args or "")
    if benchmark is None and not argv:
        raise UsageError(f"{path}: the JSON names no program: pass --benchmark")
    bench = benchmark or benchmark_of(argv[0])
    config = doc["config"] or {}
    devices = config.get("devices") or []
    options = args_options(argv)
    stat = latency_stat(options, path)
    if not (ranks or devices):
        raise UsageError(f"{path}: the JSON lists no devices: pass --ranks N")
    run = ToolRun(tool="nccl-tests", tool_version=None, file=path, first_line=1, backend="nccl",
                  ranks=ranks or len(devices) or None, command=shlex.join(argv) if argv else None,
                  hosts_by_rank=[d.get("hostname") for d in devices] or None,
                  device=device_of([d.get("device_info") for d in devices]),
                  options={k: v for k, v in config.items() if k != "devices"},
                  start_time_local=doc.get("start_time"), definitions=DEFINITIONS,
                  extra_source={"json_version": doc.get("version")})
    if isinstance(doc.get("nccl_version"), int):
        run.versions["nccl"] = nccl_version(doc["nccl_version"])
    if "average" not in options:
        run.assumed.append("time is the mean over ranks (-a 1, nccl-tests' default): the command line shows no -a")
    for index, item in enumerate(doc["results"]):
        if not isinstance(item, dict) or "size" not in item:
            raise UsageError(f"{path}: results[{index}] is not an nccl-tests result")
        halves = [(key == "in_place", _json_half(item.get(key), item.get(f"{key}_per_iter")))
                  for key in ("out_of_place", "in_place") if isinstance(item.get(key), dict)]
        meta = {k: item.get(k) for k in ("size", "count", "type", "redop", "root")}
        with where(f"{path}: results[{index}]"):
            for row in rows_from(bench, run.ranks, meta, halves, index, stat, f"{path}: results[{index}]"):
                run.add(row)
    for row in run.rows:
        row.iterations, row.warmup = config.get("iterations"), config.get("warmup_iters")
    run.complete = "end_time" in doc and bool(run.rows)
    run.end_reason = "" if run.complete else "the JSON file has no end_time (the run stopped early)"
    return run


def _json_half(half: dict, per_iter: dict | None) -> dict:
    figures = {"time": half.get("time", half.get("cpu_time")), "algbw": half.get("alg_bw"),
               "busbw": half.get("bus_bw"), "#wrong": half.get("nwrong") if half.get("nwrong") is not None else "N/A"}
    if isinstance(per_iter, dict):
        figures.update({"i_min": per_iter.get("min_us"), "i_max": per_iter.get("max_us"),
                        "i_p50": per_iter.get("p50_us"), "i_p99": per_iter.get("p99_us")})
    return figures


def device_of(names: list[str | None]) -> dict:
    names = [n for n in names if n]
    distinct = sorted(set(names))
    return {"kind": "cuda", "name": distinct[0] if len(distinct) == 1 else (", ".join(distinct) or None),
            "count": len(names) or None}

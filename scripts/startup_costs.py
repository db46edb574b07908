#!/usr/bin/env python3
"""What each rank of a launch costs before it measures: file-system calls, modules imported and import time,
counted inside every process (no strace), beside the floor that any Python MPI program pays.

Each process runs under a small counter (``COUNTER`` below, written to a temporary file and run as the
program): it adds an audit hook (PEP 578) and wraps the ``stat`` family, then runs the command as ``python``
would, and at exit writes one JSON line per process. Counted, as calls that reach the file system by path:

- ``open``: every file opened (the ``open`` audit event: builtins ``open``, ``io.open_code`` -- each module's
  ``.pyc`` or zip archive --, ``os.open``);
- ``stat``: ``stat``, ``lstat``, ``access``, ``readlink``, ``scandir``/``listdir`` of a folder, wrapped in both
  ``os`` and ``posix`` (so the import system's own stats of each folder and file on ``sys.path`` count);
- ``write``: ``mkdir``, ``rename``/``replace``, ``remove``, ``rmdir``, ``utime``, ``chmod``;
- ``dlopen``: each extension module and ctypes library loaded (the dynamic loader's own search is not seen).

Of those, ``shared`` counts the calls whose path is not node-local (``/proc``, ``/sys``, ``/dev``, ``/run``,
``/tmp``): what lands on the file system holding the Python installation, the environment and the home folder,
a parallel file system's metadata server on most clusters (dlopens count there). The script's own folder is in
``/tmp``, first on ``sys.path``: its stats count as local, the same for every scenario.

Not counted: what C code does by itself (the MPI library, numpy's and the loader's searches, ``fstat`` of an
open descriptor). Those are the same with and without microbench; ``--strace`` counts them too (every
syscall that names a path, per process) where strace is installed, as a cross-check. Import time is the time
spent in the import system's outermost ``_find_and_load`` calls (what ``python -X importtime`` sums at the top).

Scenarios (each launched as ``--np`` ranks under the MPI's mpiexec, in the same environment):

- ``floor``: ``python -c "from mpi4py import MPI; import numpy"``, the floor;
- ``run``: ``microbench run allreduce -m 8 -i 100 -x 10 --out DIR`` (rank 0 writes the records);
- ``run (zipapp)``: the same from ``scripts/build_zipapp.py``'s archive (``--zipapp PATH``, else built here);
- ``run (no bytecode)``: from a copy of the package with no ``.pyc`` and ``PYTHONDONTWRITEBYTECODE=1`` (each
  rank compiles every module, every launch: an install on a file system the ranks cannot write);
- ``run (unchecked pyc)``: from a copy compiled with ``compileall --invalidation-mode unchecked-hash`` (no
  source stat per module);
- ``replay``: ``microbench replay --hidden 256 --layers 1 --heads 4 --scheme ddp --dp N --iterations 3``;
- ``doctor``: ``microbench doctor --skip torch,bandwidth`` under mpiexec (layers 1-5);
- ``--np parent``: the process ``microbench run --np N`` starts before mpiexec (alone, not its ranks);
- ``check``, ``compare``, ``history``, ``report``: the verbs that read results, on ``run``'s file (one process).

    python scripts/startup_costs.py [--np 2] [--repeat 3] [--strace] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COUNTER = r'''
import os, posix, sys, time
_t0 = time.perf_counter()
_calls = {"open": 0, "stat": 0, "write": 0, "dlopen": 0}
_paths = []
_LOCAL = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp")  # on every node, never the shared file system
_WRITE = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.utime", "os.chmod", "os.truncate", "os.link",
          "os.symlink"}
def _hook(event, args):
    if event == "open":
        if args and isinstance(args[0], (str, bytes, os.PathLike)):
            _calls["open"] += 1
            _paths.append(("open", os.fsdecode(args[0])))
    elif event in ("os.listdir", "os.scandir"):
        _calls["stat"] += 1
        _paths.append(("list", os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes)) else "."))
    elif event in _WRITE:
        _calls["write"] += 1
        _paths.append(("write", os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes)) else "."))
    elif event == "ctypes.dlopen":
        _calls["dlopen"] += 1
    elif event == "import" and len(args) > 1 and isinstance(args[1], str) and args[1].endswith((".so", ".pyd")):
        _calls["dlopen"] += 1
sys.addaudithook(_hook)
def _wrap(fn):
    def counted(path, *a, **k):
        _calls["stat"] += 1
        _paths.append(("stat", os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)))
        return fn(path, *a, **k)
    return counted
for _name in ("stat", "lstat", "access", "readlink"):
    _wrapped = _wrap(getattr(posix, _name))
    setattr(posix, _name, _wrapped)
    setattr(os, _name, _wrapped)
import _frozen_importlib as _fi
_depth, _import_s = [0], [0.0]
_find_and_load = _fi._find_and_load
def _timed(name, import_):
    _depth[0] += 1
    start = time.perf_counter() if _depth[0] == 1 else 0.0
    try:
        return _find_and_load(name, import_)
    finally:
        _depth[0] -= 1
        if _depth[0] == 0:
            _import_s[0] += time.perf_counter() - start
_fi._find_and_load = _timed
def _report():
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID")
                 if v in os.environ), "-")
    local = sum(1 for _, p in _paths if p.startswith(_LOCAL))
    modules = sorted(sys.modules)  # before the json this report needs
    import json
    line = {"pid": os.getpid(), "rank": rank, "calls": dict(_calls), "total": sum(_calls.values()),
            "node_local": local, "modules": modules, "import_s": round(_import_s[0], 4),
            "wall_s": round(time.perf_counter() - _t0, 4)}
    if os.environ.get("MB_COUNT_PATHS") == "1": line["paths"] = _paths
    with open(os.environ["MB_COUNT_OUT"], "a") as f:
        f.write(json.dumps(line) + "\n")
import atexit
atexit.register(_report)
import runpy
_argv = sys.argv[1:]
if _argv[0] == "-c":
    sys.argv = ["-c", *_argv[2:]]
    exec(compile(_argv[1], "<string>", "exec"), {"__name__": "__main__"})
elif _argv[0] == "-m":
    sys.argv = [_argv[1], *_argv[2:]]
    runpy.run_module(_argv[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = _argv
    sys.path.insert(0, _argv[0])
    runpy.run_path(_argv[0], run_name="__main__")
'''


def counter_file(folder: Path) -> Path:
    """The counter, written where the processes can run it."""
    path = folder / "mb_count.py"
    path.write_text(COUNTER)
    return path


def mpiexec(nranks: int) -> tuple[list[str], dict[str, str]]:
    """The mpiexec microbench's --np uses, and the environment it adds."""
    from microbench.cluster.launch import mpiexec_command
    from microbench.cluster.mpi_runtime import launcher_library

    prefix, abi = launcher_library()
    return mpiexec_command(prefix, abi, nranks)


def count(argv: list[str], extra: dict[str, str], out: Path, keep_paths: bool = False,
          timeout: float = 300) -> list[dict]:
    """Run ``argv`` (its python processes under the counter); one record per counted process."""
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as an install: .pyc read
    env.update(extra, MB_COUNT_OUT=str(out), MB_COUNT_PATHS="1" if keep_paths else "0")
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    if proc.returncode not in (0, 1, 4):  # a verdict (FAIL, INCONCLUSIVE) is an answer; 2 and 3 are not
        raise SystemExit(f"startup_costs: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-600:]}")
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def strace_counts(argv: list[str], extra: dict[str, str], folder: Path, exe: str | None = None) -> list[list[int]]:
    """Per python process, [syscalls that name a path (strace ``%file``) and folder reads, of which on a shared
    file system (its first path, or its descriptor's, outside /proc, /sys, /dev, /run, /tmp)], sorted."""
    trace = folder / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    trace.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    subprocess.run(["strace", "-f", "-ff", "-qq", "-y", "-e", "trace=%file,getdents64", "-o", str(trace / "t"), *argv],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
    counts, exe = [], f'execve("{exe or sys.executable}"'
    import re

    local, path = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp"), re.compile(r'"(/[^"]*)"|<(/[^>]*)>')
    for f in trace.iterdir():
        lines = f.read_text(errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith(exe)]
        if starts:  # this interpreter's process: what it did from its exec on
            calls = [line for line in lines[starts[-1]:] if not line.startswith(("+++", "---"))]
            named = [path.search(line) for line in calls]  # the first path a call names (-y: a descriptor's too)
            shared = sum(1 for m in named if m is None or not (m.group(1) or m.group(2)).startswith(local))
            counts.append([len(calls), shared])
    return sorted(counts)


C_PROGRAM = """#include <mpi.h>
int main(int argc, char **argv) { double x = 1, y; MPI_Init(&argc, &argv);
  for (int i = 0; i < 100; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize(); return 0; }
"""


def c_program_counts(nranks: int, folder: Path) -> list[list[int]] | None:
    """strace counts per rank of a C MPI program (MPI_Init, 100 allreduces: what OMB's osu_allreduce does before
    it measures), built with the MPI's own mpicc; None where it cannot be built."""
    from microbench.cluster.mpi_runtime import launcher_library
    from microbench.measure.native.toolchain import NativeUnavailable, find_mpicc

    source, exe = folder / "c_mpi.c", folder / "c_mpi"
    source.write_text(C_PROGRAM)
    try:
        mpicc = find_mpicc(launcher_library()[0])
    except NativeUnavailable:
        return None
    if subprocess.run([mpicc, "-O2", str(source), "-o", str(exe)], capture_output=True).returncode != 0:
        return None
    runner, extra = mpiexec(nranks)
    return strace_counts([*runner, str(exe)], extra, folder, exe=str(exe))


def model(per_rank: dict[str, int], rate: float, per_node: int) -> list[str]:
    """Time to first measurement spent on the shared file system's metadata server, on paper: each rank's
    metadata operations on it, times the ranks, over the server's rate (no client cache: every rank's lookups
    reach the server), and over the nodes alone (a client cache shared by a node's ranks: one rank's lookups
    per node reach it)."""
    scales = [16, 128, 1024, 4096, 16384]
    lines = [f"# metadata operations per rank on the shared file system, at {rate:,.0f} operations/s; seconds "
             f"with no client cache / with one per node ({per_node} ranks per node)",
             f"{'':<28} {'ops/rank':>8} " + " ".join(f"{n:>15,}" for n in scales)]
    for name, ops in per_rank.items():
        cells = [f"{ops * n / rate:7.1f}/{ops * max(1, n // per_node) / rate:<7.2f}" for n in scales]
        lines.append(f"{name:<28} {ops:>8,} " + " ".join(f"{c:>15}" for c in cells))
    return lines


def package_copy(folder: Path, name: str, compile_mode: str | None) -> Path:
    """A copy of the package without bytecode (``compile_mode`` None) or compiled by ``compileall`` with that
    invalidation mode; returns the folder to put on ``PYTHONPATH``."""
    import compileall
    import py_compile

    import microbench

    root = folder / name
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(Path(microbench.__file__).parent, root / "microbench",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    if compile_mode:
        compileall.compile_dir(root, quiet=1, invalidation_mode=py_compile.PycInvalidationMode[compile_mode])
    return root


def scenarios(nranks: int, folder: Path, zipapp: Path,
              copies: Path) -> dict[str, tuple[list[str], dict[str, str], str]]:
    """name -> (argv, environment additions, which processes to report: 'ranks' or 'one'); the package's copies
    go to ``copies`` (not under /tmp, so that their calls count as shared as an install's do)."""
    runner, extra = mpiexec(nranks)
    no_pyc = {**extra, "PYTHONPATH": str(package_copy(copies, "no-bytecode", None)), "PYTHONDONTWRITEBYTECODE": "1"}
    unchecked = {**extra, "PYTHONPATH": str(package_copy(copies, "unchecked", "UNCHECKED_HASH"))}
    py, counter = sys.executable, str(counter_file(folder))
    out = str(folder / "results.jsonl")
    run = ["run", "allreduce", "-m", "8", "-i", "100", "-x", "10", "--out", out]
    replay = ["replay", "--hidden", "256", "--layers", "1", "--heads", "4", "--scheme", "ddp", "--dp", str(nranks),
              "--iterations", "3", "--out", str(folder / "replay.jsonl")]
    spec = folder / "spec.toml"
    spec.write_text('[[rule]]\nname = "latency"\nbenchmark = "allreduce"\nmax_latency_us = 1e9\n')
    return {
        "floor": ([*runner, py, counter, "-c", "from mpi4py import MPI; import numpy"], extra, "ranks"),
        "run": ([*runner, py, counter, "-m", "microbench", *run], extra, "ranks"),
        "run (zipapp)": ([*runner, py, counter, str(zipapp), *run], extra, "ranks"),
        "run (no bytecode)": ([*runner, py, counter, "-m", "microbench", *run], no_pyc, "ranks"),
        "run (unchecked pyc)": ([*runner, py, counter, "-m", "microbench", *run], unchecked, "ranks"),
        "replay": ([*runner, py, counter, "-m", "microbench", *replay], extra, "ranks"),
        "doctor": ([*runner, py, counter, "-m", "microbench", "doctor", "--skip", "torch,bandwidth", "--out",
                    str(folder / "doctor.jsonl")], extra, "ranks"),
        "--np parent": ([py, counter, "-m", "microbench", "run", "--np", str(nranks), *run[1:]], {}, "one"),
        "check": ([py, counter, "-m", "microbench", "check", out, "--spec", str(spec)], {}, "one"),
        "compare": ([py, counter, "-m", "microbench", "compare", "--baseline", out, "--new", out], {}, "one"),
        "history": ([py, counter, "-m", "microbench", "history", out], {}, "one"),
        "report": ([py, counter, "-m", "microbench", "report", out, "-o", str(folder / "report.html")], {}, "one"),
    }


def summarize(records: list[list[dict]], floor_modules: set[str] | None) -> dict:
    """Median over repeats of each process's figures (processes in rank order)."""
    by_rank: dict[str, list[dict]] = {}
    for rep in records:
        for r in rep:
            by_rank.setdefault(r["rank"], []).append(r)
    out = {}
    for rank, rs in sorted(by_rank.items()):
        mods = rs[-1]["modules"]
        out[rank] = {"calls": statistics.median(r["total"] for r in rs),
                     "shared": statistics.median(r["total"] - r["node_local"] for r in rs),
                     "by_kind": {k: statistics.median(r["calls"][k] for r in rs) for k in rs[0]["calls"]},
                     "modules": len(mods),
                     "microbench_modules": sum(1 for m in mods if m == "microbench" or m.startswith("microbench.")),
                     "beyond_floor": (sum(1 for m in mods if m not in floor_modules) if floor_modules else None),
                     "import_s": statistics.median(r["import_s"] for r in rs),
                     "wall_s": statistics.median(r["wall_s"] for r in rs)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks per launch (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="launches per scenario; figures are medians (default 3)")
    p.add_argument("--zipapp", type=Path, help="a microbench.pyz to use (default: built here)")
    p.add_argument("--only", nargs="*", help="scenarios to run (default: all)")
    p.add_argument("--strace", action="store_true", help="also count every path syscall per process with strace")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--mds-rate", type=float, default=50_000,
                   help="with --strace: the metadata server's operations per second for the model (default 50,000)")
    p.add_argument("--ranks-per-node", type=int, default=8, help="with --strace: for the model (default 8)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mb-startup-") as tmp, \
            tempfile.TemporaryDirectory(prefix=".mb-startup-", dir=Path.home()) as copies:
        folder = Path(tmp)
        zipapp = args.zipapp
        if zipapp is None:
            zipapp = Path(copies) / "microbench.pyz"  # beside the copies: read as from a shared folder
            subprocess.run([sys.executable, str(Path(__file__).with_name("build_zipapp.py")), "-o", str(zipapp)],
                           check=True, stdout=subprocess.DEVNULL)
        table = scenarios(args.np, folder, zipapp, Path(copies))
        chosen = [n for n in table if not args.only or n in args.only]
        if "run" not in chosen and any(n in chosen for n in ("check", "compare", "history", "report")):
            chosen.insert(0, "run")  # the reading verbs read run's file
        figures, floor_modules = {}, None
        for name in ["floor", *[n for n in chosen if n != "floor"]]:
            cmd, extra, _ = table[name]
            count(cmd, extra, folder / "warm.jsonl")  # untimed: bytecode written, the native loop built
            reps = [count(cmd, extra, folder / "count.jsonl") for _ in range(args.repeat)]
            if name == "floor":
                floor_modules = set(reps[-1][0]["modules"]) if reps[-1] else set()
            figures[name] = {"processes": summarize(reps, floor_modules)}
            if args.strace and shutil.which("strace"):
                figures[name]["strace"] = strace_counts(cmd, extra, folder)
        floor_calls = statistics.median(v["calls"] for v in figures["floor"]["processes"].values())
        floor_shared = statistics.median(v["shared"] for v in figures["floor"]["processes"].values())
        print(f"# {args.np} ranks, {args.repeat} launches each; python {sys.version.split()[0]}; file-system calls "
              f"by path counted in each process (open, stat family, folder reads, writes, libraries loaded)")
        print(f"{'scenario':<15} {'rank':>4} {'fs calls':>9} {'x floor':>8} {'shared':>7} {'x floor':>8} "
              f"{'open':>6} {'stat':>6} {'dlopen':>6} "
              f"{'modules':>8} {'microbench':>10} {'import s':>9}" + ("  strace" if args.strace else ""))
        for name, fig in figures.items():
            for rank, f in fig["processes"].items():
                trace = fig.get("strace")
                print(f"{name:<15} {rank:>4} {f['calls']:>9.0f} {f['calls'] / floor_calls:>7.2f}x "
                      f"{f['shared']:>7.0f} {f['shared'] / floor_shared:>7.2f}x "
                      f"{f['by_kind']['open']:>6.0f} {f['by_kind']['stat']:>6.0f} {f['by_kind']['dlopen']:>6.0f} "
                      f"{f['modules']:>8} {f['microbench_modules']:>10} {f['import_s']:>9.3f}"
                      + (f"  {trace}" if trace is not None else ""))
        c_counts = c_program_counts(args.np, folder) if args.strace and shutil.which("strace") else None
        if args.strace and "run" in figures and figures["run"].get("strace"):
            ranks = {"a C MPI program (OMB)": c_counts,
                     "python + mpi4py + numpy": figures["floor"].get("strace"),
                     "microbench run, rank > 0": figures["run"]["strace"],
                     "microbench.pyz, rank > 0": figures.get("run (zipapp)", {}).get("strace")}
            per_rank = {k: int(statistics.median(c[1] for c in v[:-1] or v)) for k, v in ranks.items() if v}
            print()
            print("\n".join(model(per_rank, args.mds_rate, args.ranks_per_node)))
        if args.json:
            args.json.write_text(json.dumps({"np": args.np, "repeat": args.repeat, "floor_calls": floor_calls,
                                             "floor_shared": floor_shared, "c_program_strace": c_counts,
                                             "figures": figures}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""A year (and ten years) of nightlies: wall time, MB/s and peak memory of every verb that reads them.

1. One real run, the template (``--template``): ``blocking`` (default), ``microbench run --np 2`` of the nine
   blocking benchmarks at ``-m 1:1M`` (184 records, issue 23's baseline); ``all``, the whole suite as sites
   run it (``microbench run --np 2 all -m 1:1M``: the non-blocking benchmarks too, whose records hold the
   overlap figures and are larger); or FILE, a run you already have.
2. ``scripts/gate_nightlies.py`` copies it into N nightly directories (``YYYY-MM-DD/nightly.jsonl``), run
   ids, start times and latencies varied (see that script).
3. Each verb runs as a fresh process, as a user would start it, over the whole folder:

   - check    ``microbench check DIR --spec scripts/specs/nightly-2rank.toml``
   - compare  ``microbench compare --baseline DIR --new DIR/<last night>``
   - history  ``microbench history DIR`` (8 B, every benchmark: 9 series)
   - plot     ``microbench plot DIR -o OUT`` (one figure per benchmark, and an overlap figure per
     non-blocking benchmark)
   - report   ``microbench report DIR -o OUT/report.html --spec scripts/specs/nightly-2rank.toml
     --baseline DIR/<first night>`` (the page's size is reported too)

Per verb, twice: ``cold`` with an empty index (every JSONL file decoded, the index written: the first
night a tool reads a folder) and ``warm`` with the index current (every later night: only a new or
changed file is decoded). Each: wall seconds (``--repeat`` runs, the median), CPU seconds (user + system of
the verb and its workers, the median: what the verb costs when the machine's other tenants take their share
of the wall time), MB/s = the folder's JSONL bytes / wall seconds, peak memory = the largest resident set
size of one process (``ru_maxrss`` from wait4, MB = 1e6 B), and ``tree_MB`` = the largest sum, sampled every
100 ms, of the proportional set sizes (Pss: shared pages divided among the processes sharing them) of the
verb and its worker processes (a cold read decodes in one worker per CPU: microbench/results/index.py). The
memory target is judged on the larger of the two. Targets: for ``blocking`` (issue 23) check, compare,
history on one year <= 2 s; for ``all`` (issue 29) every verb on one year <= 5 s warm and <= 15 s cold; ten
years <= 10 s warm; always <= 300 MB. The machine is shared: the script prints the load average before
and after.

    python scripts/bench_gate_scale.py --years 1 10 [--template blocking|all|RUN.jsonl] [--work DIR] [--json out.json]
    python scripts/bench_gate_scale.py --years 10 --states cold --read-workers 2 1 --repeat 5   # workers or not
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
import time
from pathlib import Path

from microbench.benchmarks.table import BLOCKING

HERE = Path(__file__).resolve().parent
SPEC = HERE / "specs" / "nightly-2rank.toml"
VERBS = ("check", "compare", "history", "plot", "report")
TEMPLATES = ("blocking", "all")
TARGET_MB = 300.0


def target_s(template: str, verb: str, years: int, state: str) -> float | None:
    """The wall-time target of a verb (None: none set): issue 23's for ``blocking``, issue 29's for ``all``."""
    if template == "blocking":
        return None if verb in ("plot", "report") else {1: 2.0, 10: 10.0}.get(years)
    if state == "cold":
        return 15.0 if years == 1 else None
    return {1: 5.0, 10: 10.0}.get(years)


def nightlies_module():
    """scripts/gate_nightlies.py, imported from beside this script."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import gate_nightlies

    return gate_nightlies


def real_run(work: Path, which: str) -> Path:
    """One real 2-rank sweep, 1 B to 1 MiB, of the blocking benchmarks or (``all``) the whole suite."""
    out = work / ("template.jsonl" if which == "blocking" else f"template-{which}.jsonl")
    if not out.exists():
        names = list(BLOCKING) if which == "blocking" else ["all"]
        cmd = [sys.executable, "-m", "microbench", "run", "--np", "2", *names, "-m", "1:1M", "--out", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def template_name(text: str) -> str:
    """``blocking``, ``all``, or the stem of a template file (names the nightly folders)."""
    return text if text in TEMPLATES else Path(text).stem


def build(template: Path, work: Path, years: int, name: str = "blocking") -> Path:
    """The nightly folder of ``years`` years (reused when it is already there)."""
    folder = work / (f"nightly-{years}y" if name == "blocking" else f"nightly-{name}-{years}y")
    done = folder / ".complete"
    if not done.exists():
        gen = nightlies_module()
        gen.write_nightlies(template, folder, gen.Plan(nights=365 * years, seed=years))
        done.write_text("")
    return folder


def validate(folder: Path) -> str:
    """The first and last night's records checked against microbench/records/schema.json."""
    try:
        from microbench.records.validate import file_problems
    except ImportError:  # pragma: no cover - records without a schema (older microbench)
        return "not checked (no schema in this microbench)"
    files = sorted(folder.rglob("*.jsonl"))
    found = [p for f in (files[0], files[-1]) for p in file_problems(f)]
    if found:
        raise SystemExit("generated records do not match the schema:\n" + "\n".join(found[:10]))
    return f"valid against schema.json ({files[0].parent.name}, {files[-1].parent.name} checked)"


def verb_command(verb: str, folder: Path, out: Path) -> list[str]:
    nights = sorted(p for p in folder.iterdir() if p.is_dir())
    args = {"check": ["check", str(folder), "--spec", str(SPEC)],
            "compare": ["compare", "--baseline", str(folder), "--new", str(nights[-1])],
            "history": ["history", str(folder)],
            "plot": ["plot", str(folder), "-o", str(out / "plots")],
            "report": ["report", str(folder), "-o", str(out / "report.html"), "--spec", str(SPEC),
                       "--baseline", str(nights[0])]}[verb]
    return [sys.executable, "-m", "microbench", *args]


def tree_pss_mb(pid: int) -> float:
    """The summed Pss (MB) of a process and its descendants now; 0 for what has gone."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total * 1024 / 1e6


def measure(cmd: list[str], timeout: float, index: Path | None,
            read_workers: str = "") -> tuple[float, float, int, float, float]:
    """(wall seconds, peak RSS MB, exit status, CPU seconds, peak summed Pss MB of the process tree) of one
    process; wall inf past ``timeout``. ``index``: the folder of the reader's index (None: the index off);
    ``read_workers``: ``MICROBENCH_READ_WORKERS`` ("" for the reader's own choice)."""
    env = {**os.environ, "MICROBENCH_INDEX": str(index) if index else "off",
           "MICROBENCH_READ_WORKERS": read_workers}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = start + timeout
    tree, polls = 0.0, 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            return float("inf"), usage.ru_maxrss * 1024 / 1e6, -9, usage.ru_utime + usage.ru_stime, tree
        if polls % 10 == 0:  # Pss every 100 ms; the exit every 10 ms
            tree = max(tree, tree_pss_mb(proc.pid))
        polls += 1
        time.sleep(0.01)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss * 1024 / 1e6, proc.returncode, usage.ru_utime + usage.ru_stime, tree


def jsonl_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.jsonl"))


def run_verbs(folder: Path, years: int, verbs: list[str], repeat: int, timeout: float,
              states: tuple[str, ...] = ("cold", "warm"), workers: tuple[str, ...] = ("",),
              template: str = "blocking") -> list[dict]:
    """Per verb: ``cold`` (no index: every JSONL file decoded, and the index written), then ``warm``
    (the index current: the state of every night after the first), ``repeat`` runs each; with several
    ``workers`` settings (``MICROBENCH_READ_WORKERS``, "" for the default) each repeat runs every setting in
    turn, so that they share the machine's spells."""
    size = jsonl_bytes(folder)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        for verb in verbs:
            for state in states:
                runs: dict[str, list[tuple]] = {w: [] for w in workers}
                for _ in range(repeat):
                    for setting in workers:
                        if state == "cold":
                            shutil.rmtree(index, ignore_errors=True)
                        runs[setting].append(measure(verb_command(verb, folder, Path(tmp)), timeout, index,
                                                     setting))
                    if any(got[-1][0] == float("inf") for got in runs.values()):
                        break  # a verb past the timeout is not run again
                for setting, got in runs.items():
                    walls = [g[0] for g in got]
                    wall = statistics.median(walls)
                    page = Path(tmp) / "report.html"
                    rows.append({"template": template, "years": years, "verb": verb, "index": state,
                                 "input_mb": size / 1e6,
                                 "read_workers": setting or "default", "wall_s": wall,
                                 "wall_min_s": min(walls), "wall_max_s": max(walls),
                                 "cpu_s": statistics.median([g[3] for g in got]),
                                 "mb_per_s": size / 1e6 / wall if wall else None,
                                 "peak_mb": max(g[1] for g in got), "tree_pss_mb": max(g[4] for g in got),
                                 "exit": got[-1][2], "repeats": len(got),
                                 "page_mb": page.stat().st_size / 1e6 if verb == "report" and page.exists()
                                 else None,
                                 "target_s": target_s(template, verb, years, state)})
                    page.unlink(missing_ok=True)
                    print(table_row(rows[-1]), flush=True)
    return rows


def table_row(row: dict) -> str:
    wall = "timeout" if row["wall_s"] == float("inf") else f"{row['wall_s']:.2f}"
    speed = f"{row['mb_per_s']:.0f}" if row["mb_per_s"] and row["wall_s"] != float("inf") else "-"
    target = row["target_s"]
    memory = max(row["peak_mb"], row["tree_pss_mb"])
    met = "-" if target is None else ("yes" if row["wall_s"] <= target and memory <= TARGET_MB else "NO")
    page = f"; page {row['page_mb']:.2f} MB" if row.get("page_mb") is not None else ""
    return (f"{row['years']:>5}  {row['verb']:<8} {row['index']:<5} {row['input_mb']:>8.1f} {wall:>8} "
            f"{row['cpu_s']:>6.2f} {speed:>7} {row['peak_mb']:>8.0f} {row['tree_pss_mb']:>7.0f} {row['exit']:>4}  "
            f"{met}  (workers {row['read_workers']}; wall {row['wall_min_s']:.2f} to {row['wall_max_s']:.2f}{page})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--years", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--verbs", nargs="+", choices=VERBS, default=list(VERBS))
    ap.add_argument("--template", default="blocking", metavar="blocking|all|RUN.jsonl",
                    help="the run copied into nightlies: blocking (default: the nine blocking benchmarks) or all "
                         "(the whole suite, non-blocking benchmarks and overlap included), run now on 2 ranks "
                         "at 1:1M, or a real run's JSONL file")
    ap.add_argument("--work", type=Path, help="keep the nightlies here (default: a temporary folder)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per verb, the median wall time reported")
    ap.add_argument("--timeout", type=float, default=300, help="seconds before a verb counts as timed out")
    ap.add_argument("--states", nargs="+", choices=("cold", "warm"), default=["cold", "warm"],
                    help="index states to measure (cold only for a microbench without the index)")
    ap.add_argument("--read-workers", nargs="+", default=[""], metavar="N",
                    help="MICROBENCH_READ_WORKERS settings to measure side by side (e.g. 2 1: worker processes "
                         "against one process); default: the reader's own choice")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    tmp = None if args.work else tempfile.TemporaryDirectory()
    work = args.work or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    name = template_name(args.template)
    template = real_run(work, args.template) if args.template in TEMPLATES else Path(args.template)
    before = os.getloadavg()
    print(f"# template {args.template} ({template}); load average before: {before[0]:.2f} {before[1]:.2f} "
          f"{before[2]:.2f} ({os.cpu_count()} CPUs, shared)")
    print("# years  verb     index input_MB   wall_s  cpu_s    MB/s  peak_MB tree_MB exit  "
          "target (see --help; 300 MB)")
    rows = []
    for years in args.years:
        folder = build(template, work, years, name)
        print(f"# {years} year(s): {folder}, records {validate(folder)}", flush=True)
        rows += run_verbs(folder, years, args.verbs, args.repeat, args.timeout, tuple(args.states),
                          tuple(args.read_workers), name)
    after = os.getloadavg()
    print(f"# load average after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"template": args.template, "rows": rows, "load_before": before,
                                         "load_after": after}, indent=1))
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

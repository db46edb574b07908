#!/usr/bin/env python3
"""Mutation testing of the measurement core and the gates, with a score that only goes up (docs/mutation-testing.md).

cosmic-ray (the `mutation` extra: pip install -e '.[mutation]') makes one small change at a time in a target's
modules (scripts/mutation.toml) and runs the target's tests; a change that no test notices survives. It works on a
copy of the tree in a scratch folder (cosmic-ray writes each mutant into the module file), one mutant at a time on
one core.

    python scripts/mutation.py run measure.stats gate.check      # these targets; a report under build/mutation/
    python scripts/mutation.py run --all --sample 0.2             # every target, a seeded fifth of each one's mutants
    python scripts/mutation.py check                              # the targets whose modules differ from main:
                                                                  # exit 1 if a score falls below the baseline
    python scripts/mutation.py run gate.check --update-baseline   # and record the scores as the new baseline

The score of a target is killed / (killed + survived) (a mutant the tests time out on counts as killed); the
baseline (scripts/mutation-baseline.json) holds each target's score and its survivors, which docs/mutation-testing.md
explains one by one (tests/test_mutation_baseline.py holds the two together).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "scripts" / "mutation.toml"
BASELINE = REPO / "scripts" / "mutation-baseline.json"
REPORTS = REPO / "build" / "mutation"
COPIED = ("microbench", "tests", "scripts", "docs", "README.md", "pyproject.toml")
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]


def load_config(path: Path = CONFIG) -> tuple[list[str], list[dict]]:
    """(the operators left out, as regular expressions; the targets) of the config file."""
    config = tomllib.loads(path.read_text())
    return config["operators"]["exclude"], config["target"]


def targets_touching(targets: list[dict], ref: str) -> list[dict]:
    """The targets with a module this checkout changed since it left git ref REF (committed or not): the diff
    from their merge base, so what REF gained since is not counted as this change."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    changed = set(git("diff", "--name-only", git("merge-base", ref, "HEAD").strip(), "--").split())
    return [t for t in targets if changed & set(t["modules"])]


def copy_tree(dest: Path) -> None:
    """The parts of the tree the tests read, copied into DEST (no caches, no build outputs)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".hypothesis")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore, symlinks=True)
        elif src.exists():
            shutil.copy2(src, dest / name)


def line_of(path: Path, line: int) -> str:
    return path.read_text().splitlines()[line - 1].strip()


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where a module's type annotations are: a mutant there changes nothing that runs (the modules use
    ``from __future__ import annotations``), so it is not a mutant worth a run."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text())):
        notes = [getattr(node, "returns", None), getattr(node, "annotation", None)]
        for note in filter(None, notes):
            spans.append(((note.lineno, note.col_offset), (note.end_lineno, note.end_col_offset)))
    return spans


def chosen_by_hash(key: str, sample: float, seed: int) -> bool:
    """Whether a mutant is in the sample: decided by what it changes, so the same code gives the same sample."""
    return sample >= 1 or int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), 16) / 2 ** 256 < sample


def survivor_key(module: str, operator: str, code: str) -> str:
    """A survivor named by what it changed, not by line number (lines move with every edit)."""
    return f"{module} | {operator.removeprefix('core/')} | {code}"


def run_target(target: dict, excluded: list[str], sample: float, seed: int, workdir: Path, env: dict,
               count_only: bool = False) -> dict:
    """One cosmic-ray session over TARGET in the copy WORKDIR; its counts and survivors (COUNT_ONLY: how many
    mutants it would run, none run)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    tests = [*PYTEST, *target["tests"]]
    started = time.monotonic()
    clean = subprocess.run(["true"] if count_only else tests, cwd=workdir, env=env, capture_output=True, text=True)
    clean_s = time.monotonic() - started
    if clean.returncode:
        raise SystemExit(f"{target['name']}: the tests fail on the unmutated tree:\n{clean.stdout[-2000:]}")
    timeout = max(30.0, 5 * clean_s)
    name = target["name"]
    cfg, session = workdir / f"{name}.toml", workdir / f"{name}.sqlite"
    cfg.write_text("[cosmic-ray]\n"
                   f"module-path = {json.dumps(target['modules'])}\n"
                   f"timeout = {timeout:.0f}.0\nexcluded-modules = []\n"
                   f"test-command = {json.dumps(shlex.join(tests))}\n"
                   '[cosmic-ray.distributor]\nname = "local"\n')
    subprocess.run(["cosmic-ray", "init", cfg.name, session.name], cwd=workdir, env=env, check=True)
    drop = re.compile("|".join(f"(?:{e})" for e in excluded))
    spans = {m: annotation_spans(workdir / m) for m in target["modules"]}
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(db.pending_work_items, key=lambda i: [(str(m.module_path), m.start_pos, m.operator_name,
                                                              m.occurrence) for m in i.mutations])
        kept, seen = [], {}
        for item in items:
            m = item.mutations[0]
            module = Path(m.module_path).as_posix()
            if drop.match(m.operator_name) or any(a <= tuple(m.start_pos) < b for a, b in spans.get(module, ())):
                continue
            key = survivor_key(module, m.operator_name, line_of(workdir / module, m.start_pos[0]))
            seen[key] = seen.get(key, 0) + 1
            kept.append((item, f"{key} | {seen[key]}"))
        chosen = {item.job_id for item, key in kept if chosen_by_hash(key, sample, seed)}
        skipped = [i.job_id for i in items if i.job_id not in chosen]
        if skipped:
            db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled"))
    print(f"{name}: {len(items)} mutants, {len(kept)} after the operator filter, {len(chosen)} to run "
          f"(tests {clean_s:.1f} s unmutated, timeout {timeout:.0f} s)", flush=True)
    if count_only:
        return {"mutants": len(kept), "ran": len(chosen)}
    started = time.monotonic()
    subprocess.run(["cosmic-ray", "exec", cfg.name, session.name], cwd=workdir, env=env, check=True)
    seconds = time.monotonic() - started
    killed, survived, incompetent = 0, [], 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == "incompetent":
                incompetent += 1
            elif result.is_killed:
                killed += 1
            else:
                m = item.mutations[0]
                module = Path(m.module_path).as_posix()
                survived.append({"key": survivor_key(module, m.operator_name, line_of(workdir / module, m.start_pos[0])),
                                 "line": m.start_pos[0], "diff": result.diff or ""})
    judged = killed + len(survived)
    return {"mutants": len(kept), "ran": len(chosen), "killed": killed, "survived": len(survived),
            "incompetent": incompetent, "score": round(killed / judged, 4) if judged else None,
            "sample": sample, "seconds": round(seconds), "survivors": sorted(survived, key=lambda s: s["key"])}


def compare(report: dict, baseline: dict) -> list[str]:
    """The targets whose score fell below the baseline's (empty: none did)."""
    out = []
    for name, now in report.items():
        before = baseline.get(name)
        if before and now["score"] is not None and before["score"] is not None and now["score"] < before["score"]:
            new = sorted({s["key"] for s in now["survivors"]} - set(before["survivors"]))
            out.append(f"{name}: score {now['score']:.1%} < baseline {before['score']:.1%}; survivors not in the "
                       "baseline:" + "".join(f"\n    {k}" for k in new))
    return out


def write_baseline(report: dict) -> None:
    """The targets of REPORT written into the committed baseline (the others kept)."""
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    for name, r in report.items():
        baseline[name] = {"score": r["score"], "sample": r["sample"], "mutants": r["mutants"], "ran": r["ran"],
                          "killed": r["killed"], "seconds": r["seconds"],
                          "survivors": [s["key"] for s in r["survivors"]]}
    BASELINE.write_text(json.dumps(dict(sorted(baseline.items())), indent=1) + "\n")
    print(f"baseline written: {BASELINE.relative_to(REPO)} ({', '.join(report)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("verb", choices=["run", "check", "list", "count", "adopt"], help="run targets; check the "
                    "changed ones against the baseline; list the targets; count the mutants a run would make; "
                    "adopt a report (build/mutation/report-*.json, named as the target) as the baseline of its targets")
    ap.add_argument("targets", nargs="*", help="target names (scripts/mutation.toml); none: see --all / check")
    ap.add_argument("--all", action="store_true", help="every target")
    ap.add_argument("--since", default="main", help="check: the git ref changes are counted from (default main)")
    ap.add_argument("--sample", type=float, default=1.0, help="run: the fraction of each target's mutants to run "
                    "(chosen by a hash of what each changes: the same code, the same sample; default 1, all); "
                    "check runs each target at its baseline's fraction")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--update-baseline", action="store_true", help="write the scores as the new baseline")
    a = ap.parse_args()
    excluded, targets = load_config()
    by_name = {t["name"]: t for t in targets}
    if a.verb == "adopt":
        for path in a.targets:
            write_baseline(json.loads(Path(path).read_text()))
        return 0
    if a.verb == "list":
        for t in targets:
            print(f"{t['name']:24} {' '.join(t['modules'])}\n{'':24} tests: {' '.join(t['tests'])}")
        return 0
    if a.verb == "check":
        chosen = targets if a.all else [by_name[n] for n in a.targets] if a.targets else targets_touching(targets, a.since)
        if BASELINE.exists():
            unjudged = [t["name"] for t in chosen if t["name"] not in json.loads(BASELINE.read_text())]
            if unjudged:
                print(f"no baseline to check against (run, explain its survivors in docs/mutation-testing.md and "
                      f"adopt it first): {', '.join(unjudged)}")
            chosen = [t for t in chosen if t["name"] not in unjudged]
        if not chosen:
            print(f"no target with a baseline has a module changed since {a.since}: nothing to check")
            return 0
    else:
        unknown = [n for n in a.targets if n not in by_name]
        if unknown or not (a.targets or a.all):
            ap.error(f"unknown target(s) {unknown}" if unknown else "name targets or pass --all")
        chosen = targets if a.all else [by_name[n] for n in a.targets]
    import os
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    report = {}
    with tempfile.TemporaryDirectory(prefix="microbench-mutation-") as scratch:
        work = Path(scratch)
        copy_tree(work)
        env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
        for target in chosen:
            sample = baseline.get(target["name"], {}).get("sample", 1.0) if a.verb == "check" else a.sample
            report[target["name"]] = result = run_target(target, excluded, sample, a.seed, work, env,
                                                         count_only=a.verb == "count")
            if a.verb == "count":
                continue
            print(f"{target['name']}: {result['killed']} killed, {result['survived']} survived, "
                  f"{result['incompetent']} incompetent of {result['ran']} in {result['seconds']} s; score "
                  f"{result['score']:.1%}" if result["score"] is not None else "no mutant judged", flush=True)
            for s in result["survivors"]:
                print(f"    survived: {s['key']}  (line {s['line']})")
    if a.verb == "count":
        print(f"{sum(r['ran'] for r in report.values())} mutants to run in all")
        return 0
    REPORTS.mkdir(parents=True, exist_ok=True)
    out = REPORTS / f"report-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {out.relative_to(REPO)}")
    if a.update_baseline:
        write_baseline(report)
        return 0
    dropped = compare(report, baseline)
    for line in dropped:
        print(f"FAIL {line}")
    if a.verb == "check":
        print("mutation score: " + ("FALLEN" if dropped else "no target below its baseline"))
    return 1 if dropped else 0


if __name__ == "__main__":
    raise SystemExit(main())

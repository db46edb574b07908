"""Judge results against an acceptance spec (a TOML list of rules): exit 0 all pass, 1 any fails, 2 bad input,
3 an internal error (a bug, never a verdict).

Each rule selects results (benchmark, sizes, filters such as backend or ranks) and states limits:
max_latency_us (judged on p50 unless stat = ...), min_busbw_gbps, min_algbw_gbps, require_check, and
for the pairwise link test (benchmark = "pairs") max_outliers.
Several runs of a configuration are judged by the rule's runs mode: best, median (default) or all.
Fail closed: a rule that no measurement matches fails, as does a listed size nobody measured.
See scripts/specs/ for examples.
"""

from __future__ import annotations

import argparse

from microbench.benchmarks.table import PAIRS
from microbench.errors import UsageError, printable
from microbench.gate import junit
from microbench.gate.check import RuleOutcome, evaluate
from microbench.gate.spec import Spec, load_spec
from microbench.gate.text import num, render
from microbench.records.jsonout import dump_strict
from microbench.results import keys
from microbench.results import selection
from microbench.results.columns import RunInfo
from microbench.results.load import load_table, mpi_library, time_span
from microbench.results import metrics
from microbench.results.metrics import UNITS
from microbench.units import format_size

_CRITERION_LABELS = {"max_latency_us": "latency", "min_busbw_gbps": "busbw", "min_algbw_gbps": "algbw",
                     "max_outliers": "outliers", "max_rank_skew": "skew", "require_check": "check",
                     "min_runs": "runs"}
_MAX_VALUES_SHOWN = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="*", metavar="RESULTS",
                   help="JSONL result files or directories (every *.jsonl below them)")
    p.add_argument("--spec", required=True, metavar="SPEC.toml", help="acceptance spec (TOML list of [[rule]])")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON instead of the table")
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one testcase per rule) for CI systems")
    p.add_argument("--failures-only", action="store_true",
                   help="table: show only the failing rows of each rule (verdict lines stay)")
    p.add_argument("--emit-reframe-references", nargs="?", const="*", metavar="SYSTEM[:PARTITION]",
                   help="print the spec as ReFrame references (JSON, for microbench.reframe tests) under "
                        "this ReFrame scope (default *) and judge nothing; see docs/reframe.md")
    selection.add_arguments(p)


def main(args) -> int:
    spec = load_spec(args.spec)
    if args.emit_reframe_references:
        from microbench.gate.reframe_references import emit

        print(emit(spec, args.emit_reframe_references))
        return 0
    if not args.results:
        raise UsageError("give the RESULTS to judge (JSONL files or directories)")
    if spec.rules:
        table = load_table(args.results, stats=spec_stats(spec), selection=selection.Selection.from_args(args))
        runs = table.runs
        outcomes = evaluate(spec, table)
    else:  # replay rules only: no result records needed
        runs, outcomes = [], []
    replay_outcomes = []
    if spec.replay_rules:
        from microbench.gate import replay_check

        replays = replay_check.read_replays(args.results)
        replay_outcomes = [replay_check.judge(rule, replays) for rule in spec.replay_rules]
    if args.junit:
        junit.write(args.junit, spec, outcomes, {"results": " ".join(args.results), "runs": str(len(runs))})
    if args.json:
        out = as_json(spec, runs, outcomes, args.results)
        if replay_outcomes:
            failed = sum(not o.passed for o in outcomes + replay_outcomes)
            out["replay_rules"] = [o.as_dict() for o in replay_outcomes]
            out["passed"] = failed == 0
            out["summary"] = {"rules": len(outcomes) + len(replay_outcomes),
                              "passed": len(outcomes) + len(replay_outcomes) - failed, "failed": failed}
        dump_strict(out)
    else:
        lines = text_lines(spec, runs, outcomes, args.failures_only)
        if replay_outcomes:
            total = lines.pop()  # the verdict line, recomputed with the replay rules
            assert total.startswith("# ")
            for outcome in replay_outcomes:
                lines += [*outcome.lines(), ""]
            failed = sum(not o.passed for o in outcomes + replay_outcomes)
            n = len(outcomes) + len(replay_outcomes)
            lines.append(f"# {n} rule(s): {n - failed} passed, {failed} failed" + (" -> FAIL" if failed else " -> PASS"))
        print("\n".join(lines))
    return 0 if all(o.passed for o in [*outcomes, *replay_outcomes]) else 1


def spec_stats(spec: Spec) -> list[str]:
    """The latency statistics the rules of ``spec`` read (the only ones loaded)."""
    return sorted({stat for rule in spec.rules for t in rule.thresholds
                   for stat in metrics.latency_stats_read(t.metric, rule.stat_for(t.metric))}) or ["p50"]


def as_json(spec: Spec, runs: list[RunInfo], outcomes: list[RuleOutcome], files: list[str]) -> dict:
    failed = sum(not o.passed for o in outcomes)
    return {
        "spec": spec.path, "description": spec.description, "files": list(files),
        "runs": [{"run_id": r.run_id, "time_utc": r.meta.get("time_utc"), "source": r.source,
                  "status": (r.end or {}).get("status")} for r in runs],
        "passed": failed == 0,
        "summary": {"rules": len(outcomes), "passed": len(outcomes) - failed, "failed": failed},
        "rules": [o.as_dict() for o in outcomes],
    }


def text_lines(spec: Spec, runs: list[RunInfo], outcomes: list[RuleOutcome], failures_only: bool = False
                 ) -> list[str]:
    libs = sorted({mpi_library(r) for r in runs})
    lines = [f"# microbench check: spec {printable(spec.path)}"
             + (f" ({printable(spec.description)})" if spec.description else ""),
             f"# {len(runs)} run(s), {time_span(runs)}, {', '.join(libs)}"]
    for r in runs:
        status = (r.end or {}).get("status", "no end line")
        if status != "complete":
            lines.append(f"# note: run {r.run_id} ended {status}; its finished sizes are judged")
    lines += ["# latency (us): the run's latency_us[stat], stat p50 (of all samples) unless the rule says; "
              "bandwidth (GB/s): S [x busbw factor] / latency[stat], stat avg (the recorded value) unless the rule says",
              "# runs=best: the best run is judged; median: the median over runs; all: the worst run (every run must pass)",
              "# allowed = limit x (1 + tolerance) for latency, limit x (1 - tolerance) for bandwidth"]
    if any(PAIRS in o.rule.benchmarks for o in outcomes):
        lines.append("# pairs: statistics are over the links, each the p50 of its iterations (max latency = the "
                     "slowest link); outliers: the links and nodes the run flagged (modified z-score over the "
                     "links, and over each node's row median)")
    for outcome in outcomes:
        lines.append("")
        lines.extend(rule_lines(outcome, failures_only))
    failed = sum(not o.passed for o in outcomes)
    lines.append("")
    lines.append(f"# {len(outcomes)} rule(s): {len(outcomes) - failed} passed, {failed} failed"
                 + ("" if failed else " -> PASS") + (" -> FAIL" if failed else ""))
    return lines


def rule_lines(outcome: RuleOutcome, failures_only: bool = False) -> list[str]:
    """The rule's verdict line, its fail-closed problems, and a row per configuration and criterion."""
    rule = outcome.rule
    verdict = "PASS" if outcome.passed else "FAIL"
    lines = [f"rule {rule.index} {verdict}: {printable(rule.title())} [{rule.judging_text()}]"]
    lines += [f"  FAIL  {p}" for p in outcome.problems]
    judgements = [j for j in outcome.judgements if not (failures_only and j.passed)]
    if not judgements:
        return lines
    shown = keys.varying_options(j.key for j in judgements)
    several = len({j.key.benchmark for j in judgements}) > 1
    headers = [*(["benchmark"] if several else []), "size", "ranks", "backend",
               *(["options"] if set(shown) - {"ranks", "backend"} else []),
               "criterion", "runs", "per-run values", "judged", "allowed", "result"]
    rows = []
    for j in judgements:
        extra = [keys.describe_options(j.key, [n for n in shown if n not in ("ranks", "backend")])] \
            if "options" in headers else []
        label = _CRITERION_LABELS.get(j.criterion, j.criterion)
        if j.metric:
            label = f"{j.stat} {label}" if j.metric == "latency" else f"{label} ({j.stat})" if j.stat else label
            unit = UNITS[j.metric]
            op = "<=" if j.criterion.startswith("max") else ">="
            values = ", ".join(num(v) for v in j.values[:_MAX_VALUES_SHOWN]) + \
                (" ..." if len(j.values) > _MAX_VALUES_SHOWN else "")
            judged = f"{num(j.value)} {unit}" if j.value is not None else "-"
            allowed = f"{op} {num(j.allowed)}"
        elif j.criterion == "require_check":
            values = ", ".join(str(s or "off") for s in j.values[:_MAX_VALUES_SHOWN]) + \
                (" ..." if len(j.values) > _MAX_VALUES_SHOWN else "")
            judged, allowed = "-", "pass"
        else:  # min_runs
            values, judged, allowed = "-", str(j.value), f">= {j.limit}"
        rows.append([*([j.key.benchmark] if several else []), format_size(j.key.size_bytes),
                     str(j.key.get("ranks")), str(j.key.get("backend")), *extra,
                     label, str(len(j.run_ids)), values, judged, allowed, "pass" if j.passed else "FAIL"])
    left = {headers.index(h) for h in ("benchmark", "backend", "options", "criterion", "per-run values")
            if h in headers}
    lines += render(headers, rows, left=sorted(left), indent="  ")
    bound = list(dict.fromkeys(j.where() for j in judgements if j.launch_bound_runs))
    if bound:
        lines.append(f"  note  {metrics.LAUNCH_BOUND_ADVICE_SHORT}: {', '.join(bound[:8])}"
                     f"{' ...' if len(bound) > 8 else ''}")
    # max_rank_skew and max_outliers: a failure names the ranks, hosts, links and nodes that stood out
    lines += [f"  FAIL  {j.message()}" for j in judgements
              if j.criterion in ("max_rank_skew", "max_outliers") and not j.passed]
    return lines

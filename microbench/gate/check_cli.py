"""Judge results against an acceptance spec (a TOML list of rules).

Three outcomes: FAIL (exit 1) when a rule fails (a limit broken on the runs it asks for, a data check failed,
nothing to judge: fail closed); INCONCLUSIVE (exit 4, or what --inconclusive-exit says) when no rule failed but
some configuration had fewer runs than its rule's min_runs (what those runs showed is printed: "repeat before
acting"); PASS (exit 0) otherwise. Results that no rule judges are listed ("not judged"); --strict fails on
them. 2 is bad input, 3 an internal error (a bug, never a verdict).

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
from microbench.gate.outcome import FAIL, INCONCLUSIVE, PASS, add_argument as add_outcome_argument, combine, exit_status
from microbench.gate.check import RuleOutcome, evaluate, unjudged
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
    p.add_argument("--strict", action="store_true",
                   help="FAIL when results were measured that no rule judges (they are listed either way)")
    add_outcome_argument(p)
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
    missing: list[dict] = []
    if spec.rules:
        table = load_table(args.results, stats=spec_stats(spec), selection=selection.Selection.from_args(args))
        runs = table.runs
        outcomes = evaluate(spec, table)
        missing = unjudged(spec, table)
    else:  # replay rules only: no result records needed
        runs, outcomes = [], []
    replay_outcomes = []
    if spec.replay_rules:
        from microbench.gate import replay_check

        replays = replay_check.read_replays(args.results)
        replay_outcomes = [replay_check.judge(rule, replays) for rule in spec.replay_rules]
    strict = getattr(args, "strict", False)
    word = verdict(outcomes, replay_outcomes, missing, strict)
    code = exit_status(word, getattr(args, "inconclusive_exit", 4))
    if args.junit:
        junit.write(args.junit, spec, outcomes, {"results": " ".join(args.results), "runs": str(len(runs)),
                                                 "outcome": word, "not_judged": unjudged_text(missing)},
                    unjudged=unjudged_text(missing) if strict and missing else None,
                    inconclusive_fails=code != 0)
    if args.json:
        out = as_json(spec, runs, outcomes, args.results)
        if replay_outcomes:
            failed = sum(not o.passed for o in outcomes + replay_outcomes)
            out["replay_rules"] = [o.as_dict() for o in replay_outcomes]
            out["passed"] = failed == 0
            out["summary"] = {"rules": len(outcomes) + len(replay_outcomes),
                              "passed": len(outcomes) + len(replay_outcomes) - failed, "failed": failed}
        out.update({"outcome": word, "exit_status": code, "strict": strict, "not_judged": missing})
        out["passed"] = word == PASS
        dump_strict(out)
    else:
        lines = text_lines(spec, runs, outcomes, args.failures_only)
        total = lines.pop()  # the verdict line, recomputed with the replay rules and what was not judged
        assert total.startswith("# ")
        for replay in replay_outcomes:
            lines += [*replay.lines(), ""]
        if missing:
            lines.append(f"# not judged: {unjudged_text(missing)}"
                         + (" -> FAIL (--strict)" if strict else " (--strict fails on them)"))
        lines.append(summary_line(outcomes, replay_outcomes, word))
        print("\n".join(lines))
    return code


def verdict(outcomes: list[RuleOutcome], replay_outcomes: list, missing: list[dict], strict: bool) -> str:
    """The check's outcome: FAIL, INCONCLUSIVE or PASS over every rule, FAIL with --strict and unjudged results."""
    word = combine([o.outcome for o in outcomes] + ["PASS" if o.passed else "FAIL" for o in replay_outcomes])
    return FAIL if strict and missing else word


def summary_line(outcomes: list[RuleOutcome], replay_outcomes: list, word: str) -> str:
    states = [o.outcome for o in outcomes] + ["PASS" if o.passed else "FAIL" for o in replay_outcomes]
    n, failed, unsure = len(states), states.count(FAIL), states.count(INCONCLUSIVE)
    return (f"# {n} rule(s): {n - failed - unsure} passed, {failed} failed"
            + (f", {unsure} inconclusive (fewer runs than the rule asks for)" if unsure else "") + f" -> {word}")


def unjudged_text(missing: list[dict]) -> str:
    """``latency at 8..1K (8 sizes), bw at 8 (1 size)``: what no rule judged."""
    parts = []
    for e in missing:
        sizes = e["sizes"]
        where = (f"{format_size(sizes[0])}..{format_size(sizes[-1])} ({len(sizes)} sizes)" if len(sizes) > 1
                 else format_size(sizes[0]) if sizes else "no size")
        extra = f", {e['configurations']} configurations" if e["configurations"] > len(sizes) else ""
        parts.append(f"{e['benchmark']} at {where}{extra}")
    return "; ".join(parts)


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
    lines.append("")
    lines.append(summary_line(outcomes, [], combine([o.outcome for o in outcomes])))
    return lines


def rule_lines(outcome: RuleOutcome, failures_only: bool = False) -> list[str]:
    """The rule's verdict line, its fail-closed problems, and a row per configuration and criterion."""
    rule = outcome.rule
    lines = [f"rule {rule.index} {outcome.outcome}: {printable(rule.title())} [{rule.judging_text()}]"]
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
                     label, str(len(j.run_ids)), values, judged, allowed, j.state])
    left = {headers.index(h) for h in ("benchmark", "backend", "options", "criterion", "per-run values")
            if h in headers}
    lines += render(headers, rows, left=sorted(left), indent="  ")
    bound = list(dict.fromkeys(j.where() for j in judgements if j.launch_bound_runs))
    if bound:
        lines.append(f"  note  {metrics.LAUNCH_BOUND_ADVICE_SHORT}: {', '.join(bound[:8])}"
                     f"{' ...' if len(bound) > 8 else ''}")
    # max_rank_skew and max_outliers: a failure names the ranks, hosts, links and nodes that stood out
    lines += [f"  {'FAIL' if j.state == 'FAIL' else 'INCONCLUSIVE'}  {j.message()}"
              + (f" ({len(j.run_ids)} run(s): repeat before acting)" if j.short else "") for j in judgements
              if j.criterion in ("max_rank_skew", "max_outliers") and not j.passed]
    if outcome.outcome == "INCONCLUSIVE":
        lines += [f"  INCONCLUSIVE  {j.message()}" for j in outcome.judgements
                  if j.criterion == "min_runs" and j.short][:8]
    return lines

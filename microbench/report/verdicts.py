"""Verdicts: ``microbench check`` per rule with its reasons, ``microbench compare`` with its intervals.

Both come from the gate itself (``gate.check.evaluate``, ``gate.compare.compare``, on the gate's table);
this module only lays them out. The interval glyph of a compare row draws, on a log axis shared by the table: the band
1 +- threshold (grey), 1 (a line), the confidence interval of the ratio (a bar) and the ratio (a dot).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from microbench.gate.check import Judgement, RuleOutcome
from microbench.gate.compare import IMPROVED, IMPROVED_UNCONFIRMED, NOISE, OK, REGRESSION, UNCONFIRMED, Comparison
from microbench.gate.compare_outcome import decide
from microbench.gate.compare_text import final_word
from microbench.gate.spec import Spec
from microbench.report.markup import Section, badge, details, el, esc, notes, num, svg_root, table, text_el
from microbench.results import keys, metrics
from microbench.results.metrics import UNITS, explain
from microbench.units import format_size

_VERDICT_TEXT = {REGRESSION: "REGRESSION", UNCONFIRMED: "regression?", NOISE: "noise", OK: "ok"}
_BAD = {REGRESSION, UNCONFIRMED}
_GLYPH_W, _GLYPH_H = 180, 16
SHOW_ALL = 20  #: a rule with more rows than this shows its failures and folds its passes
MAX_VALUES = 12  #: per-run values listed in a row; more are summarised


def _criterion(j: Judgement) -> str:
    if j.metric == "latency":
        return f"{j.stat} latency"
    if j.metric:
        return j.metric if j.stat is None else f"{j.metric} (from {j.stat})"
    return {"require_check": "data check", "min_runs": "runs"}.get(j.criterion, j.criterion)


def _values_text(j: Judgement) -> str:
    """The per-run values of a judgement; past ``MAX_VALUES`` runs counted (check states) or summarised
    (smallest, median, largest) with the last ``MAX_VALUES`` in run order, so that a row does not grow with
    the runs."""
    if j.criterion == "require_check":
        texts = [str(v or "off") for v in j.values]
        if len(texts) <= MAX_VALUES:
            return ", ".join(texts)
        return f"{len(texts)} runs: " + ", ".join(f"{n} {v}" for v, n in Counter(texts).most_common())
    texts = [num(v) if isinstance(v, (int, float)) or v is None else str(v) for v in j.values]
    numbers = sorted(v for v in j.values if isinstance(v, (int, float)) and v == v)
    if len(texts) <= MAX_VALUES or not numbers:
        return ", ".join(texts) or "-"
    return (f"{len(texts)} runs: smallest {num(numbers[0])}, median {num(statistics.median(numbers))}, largest "
            f"{num(numbers[-1])}; the last {MAX_VALUES}: " + ", ".join(texts[-MAX_VALUES:]))


def _judgement_row(j: Judgement, shown: list[str]) -> list[str]:
    k = j.key
    unit = f" {UNITS[j.metric]}" if j.metric else ""
    op = "<=" if j.criterion.startswith("max") else ">="
    allowed = f"{op} {num(j.allowed)}{unit}" if j.allowed is not None else (
        "pass" if j.criterion == "require_check" else f">= {j.limit}" if j.limit is not None else "-")
    values = _values_text(j)
    return [esc(k.benchmark), esc(format_size(k.size_bytes) if k.size_bytes else "-"), esc(k.get("ranks")),
            esc(k.get("backend")), esc(keys.describe_options(k, shown)), esc(_criterion(j)), esc(len(j.run_ids)),
            esc(values), esc(f"{num(j.value)}{unit}" if j.value is not None else "-"), esc(allowed),
            badge(j.state, True if j.passed else None if j.state == "inconclusive" else False), esc(j.detail)]


def _rule_block(outcome: RuleOutcome) -> str:
    rule = outcome.rule
    head = el("h3", badge(outcome.outcome, _good(outcome.outcome))
              + esc(f" rule {rule.index}: {rule.title()}") + text_el("span", f" [{rule.judging_text()}]", class_="dim"))
    body = notes([f"FAIL: {p}" for p in outcome.problems], class_="problems")
    if not outcome.judgements:
        return el("div", head + body, class_="rule")
    shown = [n for n in keys.varying_options(j.key for j in outcome.judgements) if n not in ("ranks", "backend")]
    failed = [j for j in outcome.judgements if not j.passed]
    passed = [j for j in outcome.judgements if j.passed]
    if len(outcome.judgements) <= SHOW_ALL or not failed or not passed:
        body += _judgements(outcome.judgements, shown)
    else:  # a long rule: its failures first, its passes folded
        body += _judgements(failed, shown) + details(f"{len(passed)} passing row(s)", _judgements(passed, shown))
    return el("div", head + body, class_="rule")


def _judgements(judgements: list[Judgement], shown: list[str]) -> str:
    rows = [_judgement_row(j, shown) for j in judgements]
    return table(["benchmark", "size", "ranks", "backend", "options", "criterion", "runs", "per-run values",
                  "judged", "allowed", "result", "reason"], rows, numeric=[2, 6, 8],
                 row_classes=[None if j.passed else "bad" for j in judgements])


def _good(word: str) -> bool | None:
    """PASS: good; FAIL: bad; INCONCLUSIVE: neither."""
    return True if word == "PASS" else False if word == "FAIL" else None


def check_section(spec: Spec, outcomes: list[RuleOutcome]) -> Section:
    states = [o.outcome for o in outcomes]
    failed, unsure = states.count("FAIL"), states.count("INCONCLUSIVE")
    word = "FAIL" if failed else "INCONCLUSIVE" if unsure else "PASS"
    intro = text_el("p", f"Spec {spec.path}" + (f": {spec.description}" if spec.description else "") + ". "
                    "latency: the statistic the rule names (p50 unless it says); bandwidth: S [x busbw factor] / "
                    "latency[stat] (avg unless it says); runs=median judges the median run, best the best, all the "
                    "worst; allowed = limit loosened by the tolerance. Fail closed: a rule nothing matches fails. "
                    "INCONCLUSIVE: judged on fewer runs than the rule's min_runs (repeat before acting).",
                    class_="how")
    summary = el("p", badge(word, _good(word))
                 + esc(f" {len(outcomes)} rule(s): {len(outcomes) - failed - unsure} passed, {failed} failed"
                       + (f", {unsure} inconclusive" if unsure else "")))
    html = summary + intro + "".join(_rule_block(o) for o in outcomes)
    return Section("check", "Acceptance check", html, f"{word}: "
                   f"{len(outcomes) - failed - unsure} of {len(outcomes)} rules pass", _good(word))


def _glyph_scale(result: Comparison) -> tuple[float, float]:
    values = [1 - result.threshold, 1 + result.threshold]
    for r in result.rows:
        values += [r.ratio] + (list(r.interval) if r.interval else [])
    values = [v for v in values if 0 < v < math.inf]  # an interval's end may be 0 or inf (values near 1e308)
    return math.log(min(values)) - 0.05, math.log(max(values)) + 0.05


def interval_glyph(ratio: float, low: float | None, high: float | None, threshold: float, verdict: str,
                   domain: tuple[float, float], tip: str) -> str:
    """A small SVG: threshold band, 1, the interval and the ratio on a log axis over ``domain`` (log values)."""
    a, b = domain

    def x(v: float) -> float:  # an end at 0 or inf (an interval past the floats) is drawn at the edge
        at = a if not v > 0 else b if v == math.inf else min(max(math.log(v), a), b)
        return 4 + (at - a) / (b - a) * (_GLYPH_W - 8)

    colour = "#c62828" if verdict in _BAD else "#2e7d32" if verdict.startswith("improved") else "#555"
    parts = [f'<rect x="{x(1 - threshold):.1f}" y="2" width="{x(1 + threshold) - x(1 - threshold):.1f}" '
             f'height="{_GLYPH_H - 4}" fill="#e6e6e6"/>',
             f'<line x1="{x(1):.1f}" x2="{x(1):.1f}" y1="0" y2="{_GLYPH_H}" stroke="#888"/>']
    if low is not None and high is not None:
        parts.append(f'<line x1="{x(low):.1f}" x2="{x(high):.1f}" y1="{_GLYPH_H / 2}" y2="{_GLYPH_H / 2}" '
                     f'stroke="{colour}" stroke-width="3"/>')
    parts.append(f'<circle cx="{x(ratio):.1f}" cy="{_GLYPH_H / 2}" r="4" fill="{colour}"/>')
    return svg_root("".join(parts), _GLYPH_W, _GLYPH_H, class_="glyph", data_tip=tip)


def _ratio(value: float) -> str:
    """A ratio to 3 decimals; past a million (an interval on values near 1e308) to 3 significant digits."""
    return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.3g}"


def _compare_rows(result: Comparison) -> tuple[list[list[str]], list[str | None]]:
    shown = [n for n in keys.varying_options(r.key for r in result.rows) if n not in ("ranks", "backend")]
    domain = _glyph_scale(result)
    rows, classes = [], []
    for r in result.rows:
        low, high = r.interval if r.interval else (None, None)
        verdict = _VERDICT_TEXT.get(r.verdict, r.verdict)
        ci = f"[{_ratio(low)}, {_ratio(high)}]" if r.interval else "too few runs"
        p = "-" if r.p_adjusted is None else f"{r.p_adjusted:.3g}"
        tip = f"ratio {r.ratio:.4f}, interval {ci}, adjusted p {p}, {verdict}"
        rows.append([esc(format_size(r.key.size_bytes) + ("*" if r.launch_bound else "")), esc(r.key.benchmark), esc(r.key.get("ranks")),
                     esc(r.key.get("backend")), esc(keys.describe_options(r.key, shown)), esc(num(r.baseline_median)),
                     esc(len(r.baseline)), esc(num(r.new_median)), esc(len(r.new)), esc(_ratio(r.ratio)), esc(ci),
                     esc(p), interval_glyph(r.ratio, low, high, result.threshold, r.verdict, domain, tip),
                     badge(verdict, None if r.verdict in (OK, NOISE) else r.verdict not in _BAD)])
        classes.append("bad" if r.verdict in _BAD else None)
    return rows, classes


def compare_section(result: Comparison, baseline_runs: int, new_runs: int) -> Section:
    unit = UNITS[result.metric]
    level = f"{result.interval_confidence * 100:.4g} %"
    how = text_el("p", f"Baseline: {baseline_runs} run(s); new: the {new_runs} run(s) of this report. Per-run "
                  f"value: {explain(result.metric, result.stat)}. ratio = median(new) / median(baseline); microbench "
                  "compare's test of no change on the runs' log values (Welch t with variances inflated for "
                  "back-to-back runs, or paired when the sides alternate in time), p-values Holm-adjusted over "
                  f"the table; the interval is for the ratio of geometric means at {level} (all hold together at "
                  f"{result.confidence * 100:g} %). REGRESSION: worse by more than {result.threshold * 100:g} % and "
                  f"adjusted p <= {result.alpha:.3g}; regression?: beyond the threshold with too few runs to test; "
                  f"noise: beyond it, not significant. PASS needs every row able to see a {result.must_see * 100:g} % "
                  "change (90 %); else INCONCLUSIVE, as when the machine's state changed with a regression. The glyph: grey band 1 +- threshold, line at 1, bar the "
                  "interval, dot the ratio (log axis).", class_="how")
    if not result.rows:
        return Section("compare", "Compare with the baseline",
                       how + text_el("p", "Nothing to compare: no configuration was measured on both sides."),
                       "nothing compared", None)
    rows, classes = _compare_rows(result)
    html = how + table(["size", "benchmark", "ranks", "backend", "options", f"baseline ({unit})", "runs",
                        f"new ({unit})", "runs", "ratio", f"{level} interval", "adjusted p", "interval",
                        "verdict"], rows, numeric=[0, 2, 5, 6, 7, 8, 9, 11], row_classes=classes)
    only = [f"{len(keys_)} configuration(s) only in {side}: " + ", ".join(
        f"{k.benchmark} {format_size(k.size_bytes)}" for k in keys_[:10]) + (" ..." if len(keys_) > 10 else "")
        for side, keys_ in (("the baseline", result.only_baseline), ("the new runs", result.only_new)) if keys_]
    bound = [f"{r.key.benchmark} {format_size(r.key.size_bytes)}" for r in result.rows if r.launch_bound]
    only += [f"* {metrics.LAUNCH_BOUND_ADVICE_SHORT}: {', '.join(bound[:10])}{' ...' if len(bound) > 10 else ''}"
             ] if bound else []
    decision = decide(result)
    machine = [f"Machine: baseline {result.machine['baseline']}; new {result.machine['new']}: the machine's state "
               "changed between the sides"] if result.machine.get("change") or result.machine.get("other_way") else []
    html += notes(only + machine + [f"Outcome: {final_word(result, 1 if decision.outcome == 'FAIL' else 4)}"])
    counts = ", ".join(f"{result.count(v)} {_VERDICT_TEXT.get(v, v)}" for v in
                       (REGRESSION, UNCONFIRMED, NOISE, OK, IMPROVED, IMPROVED_UNCONFIRMED) if result.count(v))
    return Section("compare", "Compare with the baseline", html,
                   f"{decision.outcome}: {len(result.rows)} compared: {counts}", _good(decision.outcome))

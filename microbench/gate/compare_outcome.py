"""A comparison's outcome (``gate/outcome.py``'s three): FAIL, INCONCLUSIVE or PASS, and the words that say why.

- FAIL: a configuration judged REGRESSION by a test of two batches of runs (or days), and the machine's state
  did not change with it.
- INCONCLUSIVE, either
  - the REGRESSIONs rest on one run (one run against 3 or more: the prediction test): one run cannot rule out a
    rare mode of the machine (on the real-launch corpus, one same-code run against 8 had a configuration beyond
    the 8's spread in 23 of 100 draws, mostly sizes that are bimodal between launches); rerun to confirm;
  - REGRESSIONs came with a change of the machine's state in the direction that would explain them (the new
    runs' contention higher by a factor of ``conditions.MACHINE_STEP`` or more): no test on these runs
    can tell the machine from the code, so the gate neither fails nor passes; or
  - no REGRESSION, but some configuration could not have seen a change of ``must_see``: no test at all (one run
    a side, or one against two), or its 90 % detectable change (``compare_power``) above ``must_see``. The text
    says what the comparison could see and about how many runs a side would see ``must_see``.
- PASS: no REGRESSION, and every configuration would have flagged a change of ``must_see`` with 90 %
  probability.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from microbench.gate import compare_power as power
from microbench.gate.compare import REGRESSION, UNCONFIRMED, Comparison, Row, untested_remedy
from microbench.gate.outcome import FAIL, INCONCLUSIVE, PASS
from microbench.results.metrics import higher_is_better


@dataclass
class Decision:
    outcome: str  #: PASS, FAIL or INCONCLUSIVE
    text: str  #: what follows "->" on the last line
    blind: list[Row] = field(default_factory=list)  #: rows that could not have seen must_see
    runs_needed: tuple[int | None, int | None] | None = None  #: runs a side for must_see: median row, worst row
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        median, worst = self.runs_needed or (None, None)
        return {"outcome": self.outcome, "outcome_text": self.text, "blind_rows": len(self.blind),
                "must_see_runs_per_side_median": median, "must_see_runs_per_side_worst": worst,
                "reasons": self.reasons}


def decide(result: Comparison) -> Decision:
    """The comparison's outcome and its words."""
    regressions = result.count(REGRESSION)
    change = result.machine.get("change")
    if regressions and change:
        reason = (f"{regressions} REGRESSION row(s), but the machine's state changed with them ({change}): "
                  "rerun both sides on a steady machine, or interleave them")
        return Decision(INCONCLUSIVE, f"INCONCLUSIVE: {reason}", reasons=[reason])
    single = [r for r in result.rows if r.verdict == REGRESSION and r.test is not None and r.test.method == "prediction"]
    if regressions and len(single) == regressions:
        reason = (f"{regressions} configuration(s) of the one run lie beyond the other side's spread (REGRESSION row "
                  "by row), but one run cannot rule out a rare mode of the machine: rerun it (2 or more runs a side "
                  "give a FAIL with a stated error rate)")
        return Decision(INCONCLUSIVE, f"INCONCLUSIVE: {reason}", reasons=[reason])
    if regressions:
        extra = _untested_text(result)
        return Decision(FAIL, "FAIL" + (f"; also {extra}" if extra else ""))
    blind = [r for r in result.rows if r.blind]
    if not blind:
        return Decision(PASS, f"PASS (each configuration would have seen a {_pct(result.must_see)} "
                              f"{_bad(result)} with {power.POWER * 100:g} % probability)")
    needed = _runs_needed(result, blind)
    reason = _blind_text(result, blind, needed)
    return Decision(INCONCLUSIVE, f"INCONCLUSIVE: {reason}", blind, needed, [reason])


def _bad(result: Comparison) -> str:
    return "fall" if higher_is_better(result.metric) else "rise"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def _untested_text(result: Comparison) -> str:
    rows = result.untested
    if not rows:
        return ""
    worse = sum(r.verdict == UNCONFIRMED for r in rows)
    return (f"{len(rows)} change(s) beyond {_pct(result.threshold)} could not be tested ({worse} worse, "
            f"{len(rows) - worse} better): {untested_remedy(result)}")


def _blind_text(result: Comparison, blind: list[Row], needed: tuple[int | None, int | None] | None) -> str:
    seen = sorted(r.detectable for r in result.rows if r.detectable is not None)
    could = (f"it could see a {_bad(result)} of {power.percent(statistics.median(seen))} (median configuration) / "
             f"{power.percent(seen[-1])} (worst)" if seen else "no configuration had the runs for a test")
    text = (f"no regression seen, but {len(blind)} of {len(result.rows)} configuration(s) could not have seen a "
            f"{_pct(result.must_see)} {_bad(result)}: {could}")
    untested = [r for r in blind if r.test is None]
    if untested:
        text += f"; {len(untested)} had no test ({untested_remedy(result)})"
    if needed is not None:
        median, worst = needed
        if median is None:
            text += f"; more than {power.MAX_PLAN_RUNS} runs a side would be needed at this spread"
        else:
            text += (f"; about {median} runs a side would see it (median configuration, from these runs' spread)"
                     + (f", {worst} the worst" if worst and worst != median else
                        f", more than {power.MAX_PLAN_RUNS} the worst" if worst is None else ""))
    else:
        text += "; the spread is unknown (fewer than 3 runs in all): run 3 or more a side, then see --plan"
    return text


def _runs_needed(result: Comparison, blind: list[Row]) -> tuple[int | None, int | None] | None:
    """Runs a side for ``must_see`` at the median and the largest spread among the blind rows (None: no spread)."""
    higher = higher_is_better(result.metric)
    spreads = sorted(sd for sd in (power.pooled_log_sd(r.baseline, r.new) for r in blind) if sd is not None)
    if not spreads:
        return None
    log_thr = power.log_threshold(result.threshold, higher)
    goal = power.from_fraction(result.must_see, higher)
    tested = max(result.tested, len(result.rows))

    def runs(sd: float) -> int | None:
        return power.runs_needed(sd, result.rho, tested, result.alpha, log_thr, goal)
    median_sd = spreads[(len(spreads) - 1) // 2]
    return runs(median_sd), runs(spreads[-1]) if spreads[-1] != median_sd else runs(median_sd)

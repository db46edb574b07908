"""The model's messages beside a real job's: matched by (collective, bytes), every difference named or flagged.

A *named difference* is a rule that says how the backend the job ran on turns a modelled call into the call
its trace records, with the source that shows it. What no rule explains is reported as unexplained.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: gloo has no reduce-scatter algorithm of its own: ProcessGroupGloo's _reduce_scatter_base (torch 2.13,
#: ProcessGroupGloo.hpp) allreduces the whole input and keeps the rank's slice. The profiler shows the
#: c10d::_reduce_scatter_base_ op (input: the full tensor) around a gloo:all_reduce of the same tensor.
GLOO_REDUCE_SCATTER = ("gloo runs reduce_scatter_tensor as an allreduce of the whole input (ProcessGroupGloo::"
                       "_reduce_scatter_base; the trace shows c10d::_reduce_scatter_base_ around a gloo:all_reduce "
                       "of the same tensor): on NCCL it is a reduce_scatter of these bytes")


@dataclass(frozen=True)
class Row:
    """One (collective, bytes) of either side: calls per rank per iteration, and why they differ."""

    collective: str
    bytes: int
    model_collective: str
    model_calls: float
    real_calls: float
    difference: str


def per_iteration(messages: list[dict], leave_out: frozenset = frozenset()) -> Counter:
    """Calls per iteration by (collective, bytes), the setup phase and the phases ``leave_out`` left out."""
    out: Counter = Counter()
    for m in messages:
        if m.get("phase") != "setup" and m.get("phase") not in leave_out:
            out[(m["collective"], m["bytes"])] += m["count"]
    return out


def as_recorded(collective: str, nbytes: int, backend: str) -> tuple[tuple[str, int], str]:
    """A modelled call as the backend records it, and the rule that says so ("" when unchanged)."""
    if backend == "gloo" and collective == "reduce_scatter":
        return ("allreduce", nbytes), GLOO_REDUCE_SCATTER
    return (collective, nbytes), ""


def compare(model_messages: list[dict], real_messages: list[dict], backend: str = "gloo",
            not_in_job: dict[str, str] | None = None) -> list[Row]:
    """Rows for every (collective, bytes) of the model or the real job; ``difference`` is empty on a match.

    ``not_in_job`` maps a modelled phase the job does not run (a framework option the model assumes on) to
    the reason: its calls are expected absent, and that is named where it changes a row.
    """
    not_in_job = not_in_job or {}
    model = per_iteration(model_messages)
    kept = per_iteration(model_messages, frozenset(not_in_job))
    dropped = {key for key in model if model[key] != kept.get(key, 0)}
    real = per_iteration(real_messages)
    expected: Counter = Counter()
    origin: dict[tuple, tuple[str, set]] = {}
    for key in model:
        seen, rule = as_recorded(*key, backend)
        expected[seen] += kept.get(key, 0)
        why = origin.setdefault(seen, (key[0], set()))[1]
        if rule:
            why.add(rule)
        if key in dropped:
            why.update(f"{phase}: {reason}" for phase, reason in not_in_job.items()
                       if any(m["phase"] == phase and (m["collective"], m["bytes"]) == key for m in model_messages))
    rows = []
    for key in sorted(set(expected) | set(real)):
        model_collective, why = origin.get(key, (key[0], set()))
        want, got = expected.get(key, 0), real.get(key, 0)
        if abs(want - got) > 1e-9:
            text = ("unexplained: only in the model" if not got else "unexplained: only in the real job" if not want
                    else f"unexplained: {want:g} calls expected, {got:g} recorded")
        else:
            text = "; ".join(sorted(why))
        rows.append(Row(key[0], key[1], model_collective, model.get((model_collective, key[1]), 0), got, text))
    return rows


def unexplained(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.difference.startswith("unexplained")]

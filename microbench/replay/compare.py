"""Predicted against replayed, row by row, and what the replay's own measurements attribute a gap to.

Rows: the iteration (``total``), with compute the exposed communication, each collective kind, each group
kind, and the first (cold) iteration. ratio = replayed / predicted. A row off by more than the threshold
gets every attribution the launch measured that bears on it:

- calls priced outside the curve's measured sizes (``--results``: extrapolated), as a share of the row's
  predicted time;
- contention among groups of one kind: the same launch's per-call latency with every group of the kind at
  once against one group at a time, weighted by the row's calls;
- overlapped calls of another group in flight at the same time (the layout and the schedule say which);
- calls the replay posts non-blocking: the same launch's non-blocking call (posted and waited at once)
  against the blocking one, and several such calls in flight together (the latencies were measured one at
  a time);
- overlapped calls hiding behind compute (their replayed time is their post and their wait, not their
  duration);
- with compute, blocking calls waiting for peers still computing (skew between ranks);
- compute of more ranks than the host has cores;
- for the first iteration, the first calls of each size (connection setup, first touch of the pool).
"""

from __future__ import annotations

from microbench.replay.schedule import RECEIVE_TWINS

THRESHOLD = 0.25  #: |ratio - 1| above which a row's gap is attributed


def _row(what: str, predicted: float, replayed: float | None) -> dict:
    r = replayed / predicted if replayed is not None and predicted > 0 else None
    return {"what": what, "predicted_s": predicted, "replayed_s": replayed, "ratio": r, "explained_by": []}


def _weighted(per_call: list[dict], keep, field: str, base: str = "isolated_s_per_call") -> float | None:
    """``field`` over ``base`` seconds of the calls ``keep`` selects, weighted by their counts."""
    calls = [c for c in per_call if keep(c) and c.get(base) and c.get(field)]
    below = sum(c["calls"] * c[base] for c in calls)
    return sum(c["calls"] * c[field] for c in calls) / below if below > 0 else None


def comparison(predicted: dict, measured: dict, context: dict, threshold: float = THRESHOLD) -> list[dict]:
    """The rows (see the module docstring). ``predicted``: the slowest rank's ``Prediction`` figures as a dict;
    ``measured``: the replay summary; ``context``: ``overlapped_groups`` (group kinds with overlapped calls),
    ``groups`` (group kinds used), ``group_counts`` (groups of each kind), ``compute`` (bool), ``ranks_per_host``,
    ``cores``."""
    rows = _rows(predicted, measured, context)
    for row in rows:
        if row["ratio"] is None or abs(row["ratio"] - 1) <= threshold:
            continue
        if row["what"] == "first iteration":
            extra = measured["first_iteration_s"] - measured["wall_s"]
            row["explained_by"].append(f"first calls of each size (connection setup, first touch of the pool): the "
                                       f"first iteration took {extra * 1e3:+.3f} ms over a warm one")
            continue
        row["explained_by"] += (_attributions(row, predicted, measured.get("per_call", []), context, threshold)
                                or ["not explained by what the replay measures"])
    return rows


def _rows(predicted: dict, measured: dict, context: dict) -> list[dict]:
    """Predicted against replayed: the iteration, the exposed communication (with compute), each collective kind,
    each group kind, the first iteration."""
    rows = [_row("total", predicted["iteration_s"], measured["wall_s"])]
    if context["compute"]:
        rows.append(_row("exposed", predicted["exposed_s"], measured["exposed_communication_s"]))
    rows += [_row(k, v, measured["per_collective_s"].get(k)) for k, v in predicted["per_collective_s"].items()
             if k not in RECEIVE_TWINS]  # a recv twin issues nothing: its send carries the transfer
    rows += [_row(f"group {g}", v, measured["per_group_s"].get(g)) for g, v in predicted["per_group_s"].items()]
    rows.append(_row("first iteration", predicted["iteration_s"], measured["first_iteration_s"]))
    return rows


def _calls_of(what: str):
    """Which per-call rows a comparison row covers."""
    if what.startswith("group "):
        return lambda c, g=what[6:]: c["group"] == g
    if what in ("total", "exposed"):
        return lambda c: True
    return lambda c, k=what: c["collective"] == k


def _attributions(row: dict, predicted: dict, per_call: list[dict], context: dict, threshold: float) -> list[str]:
    """What the launch measured that bears on a row off by more than the threshold (see the module docstring)."""
    what, why, keep = row["what"], [], _calls_of(row["what"])
    outside = predicted.get("outside_s", {}).get("total" if what == "exposed" else what, 0.0)
    if outside > 0 and row["predicted_s"] > 0:
        why.append(f"{outside / row['predicted_s']:.0%} of its predicted time priced outside the curve's "
                   "measured sizes (extrapolated)")
    row_groups = {c["group"] for c in per_call if keep(c)}
    others = ([g for g in context["overlapped_groups"] if g not in row_groups] if what not in ("total", "exposed")
              else list(context["overlapped_groups"]))
    several = [g for g in row_groups if context.get("group_counts", {}).get(g, 1) > 1]
    factor = _weighted(per_call, lambda c: keep(c) and c["group"] in several, "concurrent_s_per_call")
    if factor is not None and factor - 1 > threshold / 2:
        why.append(f"groups of one kind at once: {factor:.2f}x per call against one group at a time (same launch)")
    if others and len(context["groups"]) > 1:
        why.append(f"overlapped calls of the {', '.join(others)} group(s) in flight at the same time")
    return why + _posted_and_compute(row, per_call, keep, context, threshold)


def _posted_and_compute(row: dict, per_call: list[dict], keep, context: dict, threshold: float) -> list[str]:
    """The attributions of calls posted non-blocking and of compute between the calls."""
    why = []
    posted = [c for c in per_call if keep(c) and c.get("overlapped")]
    nonblocking = _weighted(per_call, lambda c: keep(c) and c.get("overlapped"), "nonblocking_s_per_call",
                            "concurrent_s_per_call")
    if nonblocking is not None and abs(nonblocking - 1) > threshold / 2:
        why.append(f"posted non-blocking and waited at once its calls take {nonblocking:.2f}x the blocking "
                   "call's time (same launch: the library's non-blocking algorithm differs)")
    if posted and not context["compute"]:
        in_flight = sum(c["calls"] for c in posted)
        why.append(f"{in_flight} call(s) posted non-blocking and in flight together before their wait (the "
                   "latencies were measured blocking, one call at a time)")
    if context["compute"] and context["overlapped_groups"] and row["ratio"] < 1:
        why.append("overlapped calls hide behind compute: their replayed time is their post and wait only")
    if context["compute"] and row["ratio"] > 1 and any(not c.get("overlapped") for c in per_call if keep(c)):
        why.append("with compute, a blocking call's time includes waiting for peers still in their compute "
                   "(skew between ranks)")
    if context["compute"] and context["ranks_per_host"] > context["cores"]:
        why.append(f"compute of {context['ranks_per_host']} ranks on {context['cores']} cores slows the calls' "
                   "progress")
    return why

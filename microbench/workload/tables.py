"""Readable tables of a workload: '#' lines say what and how; other lines are one row each."""

from __future__ import annotations

from fractions import Fraction

from microbench.units import format_bytes
from microbench.workload.distribution import Distribution
from microbench.workload.messages import Message, message_wire, total_wire
from microbench.workload.traces import TraceTally


def number(x):
    """A Fraction or float as JSON wants it: an int when whole, else a float."""
    if isinstance(x, Fraction):
        return int(x) if x.denominator == 1 else float(x)
    return x


def _count(count: float, phase: str) -> str:
    text = f"{count:g}" if float(count).is_integer() else f"{count:.3f}"
    return text + ("/run" if phase == "setup" else "")


def message_table(messages: list[Message]) -> list[str]:
    """One row per message; Share is of the wire bytes of one iteration (setup excluded)."""
    per_iteration = total_wire([m for m in messages if m.phase != "setup" and m.group_size])
    extra = any(m.dimension or m.splits for m in messages)  # issue 42: the group's dimension and the split
    lines = [f"#{'Phase':>17} {'Collective':>14} {'Size(B)':>13} {'Size':>10} {'Group':>6} {'Count':>10} "
             f"{'Wire':>10} {'Share':>6}" + (f" {'Dim':>4} Splits" if extra else "")]
    for m in messages:
        wire = message_wire(m) * Fraction(m.count) if m.group_size else None
        share = (f"{float(100 * wire / per_iteration):5.1f}%" if wire is not None and per_iteration and m.phase != "setup"
                 else "-")
        lines.append(f" {m.phase:>17} {m.collective:>14} {m.bytes:>13} {format_bytes(m.bytes):>10} "
                     f"{m.group_size if m.group_size else '?':>6} {_count(m.count, m.phase):>10} "
                     f"{format_bytes(float(wire)) if wire is not None else '?':>10} {share:>6}"
                     + (f" {m.dimension or '-':>4} {m.splits or '-'}" if extra else ""))
    return lines


def distribution_lines(dist: Distribution) -> list[str]:
    w, check = dist.workload, dist.check()
    counted = "(Eq. 1)" if w.model.family == "gpt-neox" else "(the sum of its tensors)"
    extra = ""
    if w.scheme in ("moe", "cp"):
        extra = f" c={w.cp}" + (f" ({w.cp_comm})" if w.cp > 1 else "")
        if w.model.experts:
            extra += (f" e={w.ep} etp={w.expert_tp} (expert data-parallel {w.expert_dp}), routing {w.routing.text}"
                      + (f", capacity factor {w.capacity_factor:g}" if w.capacity_factor is not None else ""))
    lines = [
        f"# workload: {w.model.describe()}; {w.params} parameters {counted}",
        f"# scheme {w.scheme}: d={w.dp} t={w.tp} p={w.pp}{extra}, micro-batch {w.micro_batch}, "
        f"{w.microbatches} microbatch(es) per iteration, {w.dtype} ({w.element_bytes} B per element)",
        f"# volume per rank per iteration, {dist.equation}: {float(dist.volume_elements):.6g} elements, "
        f"{format_bytes(float(dist.volume_bytes))}",
        "# Wire: bytes one rank moves per iteration for the row (factors under assumptions); Share: of the "
        "iteration's wire bytes",
    ]
    lines += message_table(dist.messages)
    lines.append(f"# check: the messages of the equation's phases move {format_bytes(float(check['message_bytes']))}"
                 f" per rank per iteration; the equation gives {format_bytes(float(check['equation_bytes']))}; "
                 f"unexplained difference {float(check['residual_bytes']):.6g} B")
    for d in check["departures"]:
        lines.append(f"#   departure {float(d['bytes']):+.6g} B: {d['reason']}")
    for phase, wire in check["excluded_phases"].items():
        when = "once per training run" if phase == "setup" else "per iteration"
        lines.append(f"#   outside the equation: {phase} moves {format_bytes(float(wire))} {when}")
    return lines


def _rank_list(per_rank: dict, shown: int = 6) -> str:
    names = sorted(per_rank)
    listed = ", ".join(f"{name} {per_rank[name]}" for name in names[:shown])
    return listed + (f", ... ({len(names) - shown} more)" if len(names) > shown else "")


def trace_lines(tally: TraceTally, messages: list[Message], iterations: int) -> list[str]:
    """What the trace held: ranks and their call counts, and every call not in the table, with the reason."""
    s = tally.summary()
    spread = s["calls_per_rank"]
    lines = [
        f"# trace {s['file']} read as {s['format']}: {s['entries']} {s['entries_are']}, {s['calls']} collective "
        f"calls from {s['ranks']} rank(s), {s['unreadable']} unreadable",
        f"# calls per rank: min {spread['min']:g}, median {spread['median']:g}, max {spread['max']:g} "
        f"({_rank_list(s['rank_calls'])})" + (f"; {s['communicator_ranks']} communicator rank(s)"
                                               if s["communicator_ranks"] else ""),
    ]
    if s["unattributed_calls"]:
        lines.append(f"# unattributed: {s['unattributed_calls']} call(s) no rank could be credited with "
                     "(not in the counts)")
    if s["uncurved"]:
        lines.append("# uncurved collectives (no measured curve, not priced), calls: "
                     + ", ".join(f"{name} {n}" for name, n in s["uncurved"].items()))
    if s["alltoallv_splits"]:  # issue 42: all-to-all-v tallied by split pattern
        lines.append("# all-to-all-v calls by split pattern (the peak-to-mean of their per-peer sizes as hot:K): "
                     + ", ".join(f"{name} {n}" for name, n in s["alltoallv_splits"].items()))
    skipped = ", ".join(f"{n} {why}" for why, n in s["skipped"].items()) or "none"
    lines += [f"# left out: {skipped}",
              f"# Count: calls per rank (mean over the trace's ranks) divided by --trace-iterations ({iterations})"]
    return lines + message_table(messages)


def sweep_lines(points: list[dict]) -> list[str]:
    """Wire bytes per collective at each sequence length, and how each collective and each parallel dimension
    (dp, tp, pp) grows from the first length to the last. recv has no column: its send carries its bytes."""
    collectives = sorted({c for p in points for c in p["by_collective"]} - {"recv"})
    head = "".join(f"{c:>16}" for c in collectives)
    lines = ["# sequence-length sweep: wire bytes per rank per iteration by collective (setup excluded; a recv's "
             "bytes are its send's)",
             f"#{'Seq':>7}{'Params':>14}{head}{'Equation':>16}"]
    for p in points:
        cells = "".join(f"{format_bytes(p['by_collective'].get(c, 0)):>16}" for c in collectives)
        lines.append(f" {p['seq']:>7}{p['params']:>14}{cells}{format_bytes(p['volume']['bytes']):>16}")
    first, last = points[0], points[-1]
    ratio = last["seq"] / first["seq"]

    def growth(key: str, names) -> str:
        parts = []
        for name in names:
            a, b = first[key].get(name, 0), last[key].get(name, 0)
            parts.append(f"{name} x{b / a:.3g}" if a else f"{name} from 0")
        return ", ".join(parts)

    dims = [d for d in ("dp", "tp", "pp", "cp", "ep", "tp_ep", "etp", "edp", "dp_cp")
            if any(d in p["by_dimension"] for p in points)]
    lines.append(f"# from s={first['seq']} to s={last['seq']} (x{ratio:g}): {growth('by_collective', collectives)}; "
                 f"by parallel dimension: {growth('by_dimension', dims)} (flat = x1, linear in s = x{ratio:g})")
    return lines


def weighting_lines(wt: dict, sources: str) -> list[str]:
    lines = [f"# predicted communication on {sources}", f"# method: {wt['method']}",
             f"#{'Collective':>15} {'Calls':>10} {'Bytes':>12} {'Time(us)':>14} {'Share':>7}"]
    for name, slot in sorted(wt["collectives"].items()):
        lines.append(f" {name:>15} {slot['calls']:>10g} {format_bytes(slot['bytes']):>12} "
                     f"{slot['time_us']:>14.6g} {100 * slot['time_share']:>6.1f}%")
    lines.append(f"# total {wt['time_per_iteration_us']:.6g} us per iteration"
                 + (f"; effective bandwidth {wt['effective_gbps']:.4g} GB/s (message bytes / predicted time)"
                    if wt["effective_gbps"] else "")
                 + (f", {wt['effective_wire_gbps']:.4g} GB/s counting wire bytes" if wt["effective_wire_gbps"] else ""))
    if wt["setup_time_us"]:
        lines.append(f"# setup (once per run): {wt['setup_time_us']:.6g} us")
    lines.append(f"#{'From(B)':>13} {'To(B)':>13} {'Calls':>7} {'Bytes':>7} {'Time':>7}   (share of each size bin)")
    for b in wt["bins"]:
        lines.append(f" {b['from_bytes']:>13} {b['to_bytes']:>13} {100 * b['calls_share']:>6.1f}% "
                     f"{100 * b['bytes_share']:>6.1f}% {100 * b['time_share']:>6.1f}%")
    for e in wt["extrapolated"]:
        lines.append(f"# flag: {e['collective']} at {e['bytes']} B is {e['how']} the measured sizes (extrapolated)")
    for name in wt["unpriced"]:
        lines.append(f"# flag: no measured {name} curve: those messages are not priced")
    lines += overlap_lines(wt)
    lines += [f"# note: {n}" for n in wt["notes"]]
    return lines


def overlap_lines(wt: dict) -> list[str]:
    """Exposed communication per collective with the measured overlap, and its flags (none without it)."""
    ov = wt.get("overlap")
    if ov is None:
        return []
    lines = [f"#{'Collective':>15} {'Time(us)':>14} {'Overlap':>8} {'Exposed(us)':>14}   (measured overlap, "
             f"time-weighted)"]
    for name in sorted(wt["collectives"]):
        rows = [r for r in wt["messages"] if r["collective"] == name and r["phase"] != "setup"]
        time_us, exposed = sum(r["time_us"] for r in rows), sum(r["exposed_us"] for r in rows)
        hidden = 100 * (1 - exposed / time_us) if time_us else 0.0
        lines.append(f" {name:>15} {time_us:>14.6g} {hidden:>7.1f}% {exposed:>14.6g}")
    lines.append(f"# exposed communication {wt['exposed_per_iteration_us']:.6g} us per iteration of "
                 f"{wt['time_per_iteration_us']:.6g} us")
    lines += [f"# flag: no measured overlap of {c}: exposed whole" for c in ov["not_measured"]]
    lines += [f"# flag: overlap of {e['collective']} at {e['bytes']} B is {e['how']} the measured sizes"
              for e in ov["extrapolated"]]
    return lines


def compute_lines(c: dict) -> list[str]:
    lines = [
        f"# compute against communication at {c['tflops_per_device']:g} TFLOP/s achieved per device: compute "
        f"{c['compute_s']:.4g} s, communication {c['communication_s']:.4g} s per iteration of one device",
        f"# communication's share of the iteration: {100 * c['share_no_overlap']:.1f}% without overlap, "
        f"{100 * c['share_perfect_overlap']:.1f}% with perfect overlap",
    ]
    if "share_measured_overlap" in c:
        lines.append(f"# with the measured overlap: exposed communication {c['exposed_measured_overlap_s']:.4g} s per "
                     f"iteration (bounds: {c['exposed_perfect_overlap_s']:.4g} s perfect, "
                     f"{c['exposed_no_overlap_s']:.4g} s none), {100 * c['share_measured_overlap']:.1f}% of the "
                     f"iteration")
    return lines


def assumption_lines(assumptions: list[str]) -> list[str]:
    return ["# assumptions:"] + [f"#  - {a}" for a in assumptions]

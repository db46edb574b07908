"""The table's lines for the diagnostics' records: a soak cycle's end, the soak summary, a bisection."""

from __future__ import annotations

from microbench.units import format_size


def cycle_lines(rec: dict) -> list[str]:
    """``# cycle 3 ended ...``: its span, results and failed checks."""
    checked = "checked" if rec["checked"] else "unchecked"
    failed = rec["check_failed"]
    verdict = "; check FAILED at " + "; ".join(_failure(f) for f in failed) if failed else \
        ("; check passed" if rec["checked"] else "")
    return [f"# cycle {rec['cycle']} ended {rec['ended_utc']} ({rec['wall_s']:.1f} s, {rec['results']} results, "
            f"{checked}){verdict}"]


def _failure(f: dict) -> str:
    what = f"{f['benchmark']}{' ' + f['metric'] if f.get('metric') else ''} {format_size(f['size_bytes'])}"
    return what + (f" ({', '.join(f['at'])})" if f["at"] else "")


def soak_lines(rec: dict) -> list[str]:
    """Per configuration across cycles: the average latency's and busbw's min/median/max, failed cycles."""
    cycles = rec["cycles"]
    lines = ["", f"# soak summary over {len(cycles)} finished cycle(s); avg latency (us) and busbw (GB/s) "
                 f"across cycles as min / median / max",
             "#" + "benchmark".rjust(21)[1:] + "size".rjust(10) + "cycles".rjust(8) + "avg latency (us)".rjust(30)
             + "busbw (GB/s)".rjust(30) + "  failed cycles"]
    for c in rec["configurations"]:
        name = c["benchmark"] + (f" {c['metric']}" if c.get("metric") else "") + \
            (f" {c['cache']}" if c.get("cache") not in (None, "warm") else "")
        lat, bw = c["avg_latency_us"], c["busbw_gbps"]
        failed = ", ".join(str(f["cycle"]) + (f" ({', '.join(f['at'])})" if f["at"] else "")
                           for f in c["failed_cycles"])
        lines.append(name.rjust(21) + format_size(c["size_bytes"]).rjust(10) + str(c["cycles"]).rjust(8)
                     + _spread(lat, 2).rjust(30) + _spread(bw, 4).rjust(30) + "  " + (failed or "-"))
    return lines


def _spread(s: dict, digits: int) -> str:
    return f"{s['min']:.{digits}f} / {s['median']:.{digits}f} / {s['max']:.{digits}f}"


def bisect_lines(rec: dict) -> list[str]:
    """The search's path, one line per round, then the suspects."""
    lines = ["", f"# bisect: {rec['benchmark']} at {format_size(rec['size_bytes'])} over {rec['nodes']} "
                 f"{rec['unit']}s; each round measures two halves at once (group time per iteration: its slowest "
                 f"rank); a half stands out at z > {rec['rule']['z_limit']}"]
    for r in rec["rounds"]:
        parts = []
        for k, g in enumerate(r["groups"]):
            pad = f" + {', '.join(g['padded_with'])} (cleared)" if g["padded_with"] else ""
            parts.append(f"[{_names(g['labels'])}{pad}] p50 {r['p50_us'][k]:.2f} us")
        out = "neither stands out" if r["stands_out"] is None else \
            f"{'first' if r['stands_out'] == 0 else 'second'} half stands out"
        lines.append(f"# round {r['round']}: {' vs '.join(parts)}: {out} (z {r['z']})")
    suspects = ", ".join(f"{s['label']} (rank {s['rank']})" if rec["unit"] == "host" else s["label"]
                         for s in rec["suspects"])
    verdict = {"found": f"suspect: {suspects}", "group": f"suspects (slow only together): {suspects}",
               "none": "no half stood out: no suspect at this size"}[rec["verdict"]]
    lines.append(f"# bisect {verdict} after {len(rec['rounds'])} round(s)")
    return lines


def _names(labels: list[str]) -> str:
    return ", ".join(labels) if len(labels) <= 4 else f"{labels[0]} ... {labels[-1]} ({len(labels)})"


DIAGNOSTIC_LINES = {"cycle": cycle_lines, "soak": soak_lines, "bisect": bisect_lines}

"""What the doctor prints: one line per layer as it is judged, what failed under it, what to check next, and the
verdict in one line."""

from __future__ import annotations

from microbench.doctor.layers import LayerResult

STATUS = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP", "not_run": "----"}
SHOWN = 8  #: failures listed under a layer (the record holds every one)


def layer_lines(result: LayerResult) -> list[str]:
    seconds = f"{result.seconds:6.1f} s" if result.seconds is not None else " " * 8
    lines = [f"{result.layer.number} {result.layer.name:<9} {STATUS[result.status]} {seconds}  {result.summary}"]
    if result.status != "fail":
        notes = [f for f in result.findings if f.note]
        lines += [f"   note: {f.what}" for f in notes[:4]]
        return lines
    failures = result.failures
    listed = failures[1:SHOWN] if failures and failures[0].what == result.summary.split(" (and ")[0] else failures[:SHOWN]
    lines += [f"   - {f.what}" for f in listed]
    if len(failures) > SHOWN:
        lines.append(f"   ... and {len(failures) - SHOWN} more (every one is in the record: --out)")
    lines += [f"   note: {f.what}" for f in result.findings if f.note][:4]
    if result.next:
        lines.append(f"   next: check {result.next}")
    return lines


def final_line(failed: LayerResult | None, wall_s: float) -> str:
    if failed is None:
        return f"doctor: PASS: every layer passed ({wall_s:.1f} s)"
    return f"doctor: FAIL at layer {failed.layer.number} ({failed.layer.name}): {failed.summary} ({wall_s:.1f} s)"

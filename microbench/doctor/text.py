"""What the doctor prints: one line per layer as it is judged, what failed under it, what to check next, and the
verdict in one line."""

from __future__ import annotations

from microbench.doctor.layers import LayerResult

STATUS = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP", "not_run": "----"}
SHOWN = 8  #: failures listed under a layer (the record holds every one)
HOSTS_SHOWN = 4  #: hosts named on one line before "and N more"


def layer_lines(result: LayerResult) -> list[str]:
    seconds = f"{result.seconds:6.1f} s" if result.seconds is not None else " " * 8
    lines = [f"{result.layer.number} {result.layer.name:<9} {STATUS[result.status]} {seconds}  {summary(result)}"]
    notes = grouped([f.what for f in result.findings if f.note])
    if result.status != "fail":
        return lines + [f"   note: {n}" for n in notes[:4]]
    failures = grouped([f.what for f in result.failures])
    shown = failures[1:SHOWN] if _leads(result) else failures[:SHOWN]  # the summary said the first
    lines += [f"   - {f}" for f in shown]
    if len(failures) > SHOWN:
        lines.append(f"   ... and {len(failures) - SHOWN} more (every one is in the record: --out)")
    lines += [f"   note: {n}" for n in notes[:4]]
    if result.next:
        lines.append(f"   next: check {result.next}")
    return lines


def _leads(result: LayerResult) -> bool:
    """Whether the layer's summary is its first failure (as the judges make it)."""
    return bool(result.failures) and result.summary.startswith(result.failures[0].what)


def summary(result: LayerResult) -> str:
    """The layer's summary as shown: its first failure said once for every host it happened on."""
    if result.status != "fail" or not _leads(result):
        return result.summary
    failures = grouped([f.what for f in result.failures])
    return failures[0] + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "")


def grouped(lines: list[str]) -> list[str]:
    """``HOST: the same words`` on several hosts said once, hosts listed (``node0, node1 and 62 more: ...``), in
    the order each is first met; other lines as they are."""
    order: list[str] = []
    hosts: dict[str, list[str]] = {}
    for line in lines:
        host, sep, rest = line.partition(": ")
        if not sep or " " in host:
            rest, host = line, ""
        if rest not in hosts:
            order.append(rest)
            hosts[rest] = []
        if host:
            hosts[rest].append(host)
    out = []
    for rest in order:
        names = hosts[rest]
        if not names:
            out.append(rest)
            continue
        shown = ", ".join(names[:HOSTS_SHOWN]) + (f" and {len(names) - HOSTS_SHOWN} more" if len(names) > HOSTS_SHOWN
                                                  else "")
        out.append(f"{shown}: {rest}")
    return out


def final_line(failed: LayerResult | None, wall_s: float, skipped: int = 0, interrupted: str | None = None) -> str:
    if interrupted:
        where = f" during layer {failed.layer.number} ({failed.layer.name})" if failed else ""
        return f"doctor: INTERRUPTED by {interrupted}{where}: {summary(failed) if failed else ''} ({wall_s:.1f} s)"
    if failed is None and skipped:
        return f"doctor: PASS: every layer that ran passed ({skipped} skipped; {wall_s:.1f} s)"
    if failed is None:
        return f"doctor: PASS: every layer passed ({wall_s:.1f} s)"
    return f"doctor: FAIL at layer {failed.layer.number} ({failed.layer.name}): {summary(failed)} ({wall_s:.1f} s)"

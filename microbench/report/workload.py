"""Workload pricing: the JSON of ``microbench workload ... --results RUN.jsonl --json`` laid out.

Nothing is recomputed: the predicted time per iteration, the per-collective and per-size-bin shares, the
flags (extrapolated sizes, unpriced collectives) and compute against communication are the workload
command's own figures (``workload.weighting.weigh``, ``workload.compute``), whose method the JSON states.
"""

from __future__ import annotations

import json
from pathlib import Path

from microbench.errors import UsageError
from microbench.report.markup import Section, details, el, empty, esc, notes, num, svg_root, table, text_el
from microbench.units import format_bytes, format_size

_BARS = (("calls_share", "calls", "#1f77b4"), ("bytes_share", "bytes", "#ff7f0e"), ("time_share", "time", "#d62728"))
_NEEDED = ("time_per_iteration_us", "collectives", "bins")


def load(path: str) -> dict:
    """The workload JSON, which must hold a pricing (``weighting``); else one UsageError line."""
    hint = "make it with: microbench workload ... --results RUN.jsonl --json > W.json"
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"cannot read --workload {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--workload {path} is not JSON ({exc}); {hint}") from None
    weighting = data.get("weighting") if isinstance(data, dict) else None
    if not isinstance(weighting, dict) or any(k not in weighting for k in _NEEDED):
        raise UsageError(f"--workload {path} holds no pricing ('weighting' with {', '.join(_NEEDED)}); {hint}")
    return data


def _what(data: dict) -> str:
    if isinstance(data.get("trace"), dict):
        t = data["trace"]
        return (f"trace {t.get('file')} ({t.get('format')}): {t.get('calls')} calls from "
                f"{t.get('processes')} process(es)")
    m, p = data.get("model") or {}, data.get("parallel") or {}
    return (f"model {m.get('name') or 'custom'} (L={m.get('layers')}, h={m.get('hidden')}, a={m.get('heads')}, "
            f"s={m.get('seq')}), {data.get('params')} parameters; scheme {data.get('scheme')}: d={p.get('dp')} "
            f"t={p.get('tp')} p={p.get('pp')}, micro-batch {data.get('micro_batch')}, {data.get('microbatches')} "
            f"microbatch(es), {data.get('dtype')}")


def bins_chart(bins: list[dict]) -> str:
    """Grouped bars: each size bin's share of calls, bytes and time (percent)."""
    width, height, left, bottom, top = max(360, 60 + 54 * len(bins)), 280, 44, 56, 30
    slot = (width - left - 10) / max(len(bins), 1)
    bar = slot / (len(_BARS) + 1)
    plot_h = height - bottom - top
    parts = [f'<rect class="plot" x="{left}" y="{top}" width="{width - left - 10}" height="{plot_h}"/>']
    for pct in (0, 25, 50, 75, 100):
        y = top + plot_h * (1 - pct / 100)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')
    for n, b in enumerate(bins):
        x0 = left + n * slot + bar / 2
        span = f"{format_size(b['from_bytes'])}..{format_size(b['to_bytes'])}"
        for k, (field, name, colour) in enumerate(_BARS):
            share = float(b.get(field) or 0)
            h = plot_h * share
            tip = f"{span}: {100 * share:.1f}% of {name}"
            parts.append(empty("rect", class_="bar", x=f"{x0 + k * bar:.1f}", y=f"{top + plot_h - h:.1f}",
                               width=f"{bar:.1f}", height=f"{h:.1f}", fill=colour, data_tip=tip))
        parts.append(f'<text class="tick" transform="translate({x0 + slot / 2 - bar / 2:.1f} {height - bottom + 12}) '
                     f'rotate(30)">{esc(span)}</text>')
    key = "".join(f'<rect x="{left + 8 + 100 * k}" y="8" width="10" height="10" fill="{c}"/>'
                  f'<text class="tick" x="{left + 22 + 100 * k}" y="17">share of {name}</text>'
                  for k, (_, name, c) in enumerate(_BARS))
    return svg_root("".join(parts) + key, width, height, class_="chart bars",
                    aria_label="share of calls, bytes and time per size bin")


def _collectives(wt: dict) -> str:
    rows = []
    for name, slot in sorted(wt["collectives"].items()):
        share = float(slot.get("time_share") or 0)
        meter = f'<span class="meter"><i style="width:{100 * share:.1f}%"></i></span>'
        rows.append([esc(name), esc(f"{slot['calls']:g}"), esc(format_bytes(slot["bytes"])),
                     esc(num(slot["time_us"], 6)), meter + esc(f" {100 * share:.1f}%")])
    return table(["collective", "calls", "bytes", "time (us)", "share of time"], rows, numeric=[1, 2, 3])


def _messages(wt: dict) -> str:
    rows = [[esc(m.get("phase")), esc(m.get("collective")), esc(m.get("bytes")), esc(m.get("group_size") or "?"),
             esc(f"{m.get('count'):g}"), esc(f"{m.get('benchmark')} @ {m.get('measured_ranks')} ranks"),
             esc(num(m.get("latency_us"))), esc(m.get("how")), esc(num(m.get("time_us"), 6))]
            for m in wt.get("messages") or []]
    return table(["phase", "collective", "bytes", "group", "count", "priced on", "latency (us)", "how", "time (us)"],
                 rows, numeric=[2, 3, 4, 6, 8])


def _flags(wt: dict) -> list[str]:
    out = [f"{e['collective']} at {e['bytes']} B is {e['how']} the measured sizes (extrapolated)"
           for e in wt.get("extrapolated") or []]
    out += [f"no measured {name} curve: those messages are not priced" for name in wt.get("unpriced") or []]
    return out + list(wt.get("notes") or [])


def section(data: dict, path: str) -> Section:
    wt = data["weighting"]
    total = wt["time_per_iteration_us"]
    lines = [f"predicted communication per iteration: {num(total, 6)} us"]
    if wt.get("effective_gbps"):
        lines.append(f"effective bandwidth {num(wt['effective_gbps'])} GB/s (message bytes / predicted time)"
                     + (f", {num(wt['effective_wire_gbps'])} GB/s counting wire bytes"
                        if wt.get("effective_wire_gbps") else ""))
    if wt.get("setup_time_us"):
        lines.append(f"setup (once per run): {num(wt['setup_time_us'], 6)} us")
    comp = data.get("compute")
    if isinstance(comp, dict):
        lines.append(f"at {comp.get('tflops_per_device'):g} TFLOP/s per device: compute {num(comp['compute_s'])} s, "
                     f"communication {num(comp['communication_s'])} s per iteration; communication's share "
                     f"{100 * comp['share_no_overlap']:.1f}% without overlap, "
                     f"{100 * comp['share_perfect_overlap']:.1f}% with perfect overlap")
    flags = _flags(wt)
    html = (text_el("p", f"From {path}: {_what(data)}.") + text_el("p", f"Method: {wt.get('method')}", class_="how")
            + notes(lines, class_="facts") + _collectives(wt))
    if wt.get("bins"):
        html += el("figure", bins_chart(wt["bins"]))
    html += (text_el("h3", "Flags") + notes(flags) if flags else "")
    html += details(f"every priced message ({len(wt.get('messages') or [])})", _messages(wt))
    html += details("assumptions", notes(data.get("assumptions") or []))
    return Section("workload", "Workload pricing", html, f"{num(total, 4)} us per iteration"
                   + (f", {len(flags)} flag(s)" if flags else ""), None)

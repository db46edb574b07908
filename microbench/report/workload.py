"""Workload pricing: the JSON of ``microbench workload ... --results RUN.jsonl --json`` laid out.

Nothing is recomputed: the predicted time per iteration, the per-collective and per-size-bin shares, the
flags (extrapolated sizes, unpriced collectives) and compute against communication are the workload
command's own figures (``workload.weighting.weigh``, ``workload.compute``), whose method the JSON states.
"""

from __future__ import annotations

import json
import math
import os
import stat

from microbench.errors import UsageError, printable
from microbench.report.markup import Section, details, el, empty, esc, notes, num, svg_root, table, text_el
from microbench.units import format_bytes, format_size

_BARS = (("calls_share", "calls", "#1f77b4"), ("bytes_share", "bytes", "#ff7f0e"), ("time_share", "time", "#d62728"))
_NEEDED = ("time_per_iteration_us", "collectives", "bins")


MAX_WORKLOAD_BYTES = 64 << 20  #: a larger --workload file is refused (a pricing is a few KB to a few MB)
_HINT = "make it with: microbench workload ... --results RUN.jsonl --json > W.json"


def _read(path: str) -> bytes:
    """The file's bytes: a regular file of at most MAX_WORKLOAD_BYTES (sized before reading), else one line."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"cannot read --workload {printable(path)}: not a regular file")
            if info.st_size > MAX_WORKLOAD_BYTES:
                raise UsageError(f"{printable(path)}: larger than {MAX_WORKLOAD_BYTES} bytes, the most --workload "
                                 "reads (a pricing is a few KB to a few MB)")
            data = f.read(MAX_WORKLOAD_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read --workload {printable(path)}: {exc.strerror or exc}") from None
    if len(data) > MAX_WORKLOAD_BYTES:  # it grew while read
        raise UsageError(f"{printable(path)}: larger than {MAX_WORKLOAD_BYTES} bytes, the most --workload reads "
                         "(a pricing is a few KB to a few MB)")
    return data


def _not_finite(text: str):
    raise ValueError(f"{text} is not a number JSON allows")


def load(path: str) -> dict:
    """The workload JSON, which must hold a pricing (``weighting``) of the shape ``section`` lays out; else one
    UsageError line naming the file and the field."""
    try:
        data = json.loads(_read(path), parse_constant=_not_finite)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise UsageError(f"--workload {printable(path)} is not JSON ({printable(str(exc))[:200]}); {_HINT}") from None
    except RecursionError:
        raise UsageError(f"--workload {printable(path)} is not JSON (nested too deeply); {_HINT}") from None
    weighting = data.get("weighting") if isinstance(data, dict) else None
    if not isinstance(weighting, dict) or any(k not in weighting for k in _NEEDED):
        raise UsageError(f"--workload {printable(path)} holds no pricing ('weighting' with {', '.join(_NEEDED)}); "
                         f"{_HINT}")
    problem = _shape_problem(data)
    if problem:
        raise UsageError(f"{printable(path)}: {problem} (--workload takes a pricing; {_HINT})")
    return data


def _is_number(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        return False


def _shown(value) -> str:
    return printable(json.dumps(value)[:40]) if not isinstance(value, (dict, list)) else type(value).__name__


def _shape_problem(data: dict) -> str | None:
    """The first field ``section`` reads that is not of the type it needs (``where: what``), or None."""
    def number(value, where: str, optional: bool = False) -> str | None:
        if (optional and value is None) or _is_number(value):
            return None
        return f"{where}: {_shown(value)} is not a finite number"

    def table(value, where: str, kind: type, optional: bool = True) -> str | None:
        if (optional and value is None) or isinstance(value, kind):
            return None
        return f"{where}: {_shown(value)} is not {'an object' if kind is dict else 'a list'}"

    wt = data["weighting"]
    problems = [number(wt["time_per_iteration_us"], "weighting.time_per_iteration_us"),
                table(wt["collectives"], "weighting.collectives", dict, optional=False),
                table(wt["bins"], "weighting.bins", list, optional=False),
                *(number(wt.get(k), f"weighting.{k}", optional=True)
                  for k in ("effective_gbps", "effective_wire_gbps", "setup_time_us")),
                *(table(wt.get(k), f"weighting.{k}", list) for k in ("messages", "extrapolated", "unpriced", "notes")),
                *(table(data.get(k), k, dict) for k in ("model", "parallel", "compute")),
                table(data.get("assumptions"), "assumptions", list)]
    problems += _rows(wt, number, table)
    if isinstance(data.get("compute"), dict):
        problems += [number(data["compute"].get(k), f"compute.{k}") for k in
                     ("tflops_per_device", "compute_s", "communication_s", "share_no_overlap", "share_perfect_overlap")]
    return next((p for p in problems if p), None)


def _rows(wt: dict, number, table) -> list[str | None]:
    """The problems of the collectives, bins, messages and flags rows (their containers already checked)."""
    out = []
    if isinstance(wt["collectives"], dict):
        for name, slot in wt["collectives"].items():
            where = f"weighting.collectives.{printable(name)[:40]}"
            out.append(table(slot, where, dict, optional=False))
            if isinstance(slot, dict):
                out += [number(slot.get(k), f"{where}.{k}") for k in ("calls", "bytes", "time_us")]
                out.append(number(slot.get("time_share"), f"{where}.time_share", optional=True))
    for i, b in enumerate(wt["bins"] if isinstance(wt["bins"], list) else ()):
        out.append(table(b, f"weighting.bins[{i}]", dict, optional=False))
        if isinstance(b, dict):
            out += [None if isinstance(b.get(k), int) and not isinstance(b.get(k), bool) and 0 <= b[k] <= 2 ** 62
                    else f"weighting.bins[{i}].{k}: {_shown(b.get(k))} is not a size in bytes"
                    for k in ("from_bytes", "to_bytes")]
            out += [number(b.get(k), f"weighting.bins[{i}].{k}", optional=True) for k, _, _ in _BARS]
    for i, m in enumerate(wt.get("messages") if isinstance(wt.get("messages"), list) else ()):
        out.append(table(m, f"weighting.messages[{i}]", dict, optional=False))
        if isinstance(m, dict):
            out += [number(m.get("count"), f"weighting.messages[{i}].count"),
                    *(number(m.get(k), f"weighting.messages[{i}].{k}", optional=True)
                      for k in ("latency_us", "time_us"))]
    for i, e in enumerate(wt.get("extrapolated") if isinstance(wt.get("extrapolated"), list) else ()):
        if not isinstance(e, dict) or any(k not in e for k in ("collective", "bytes", "how")):
            out.append(f"weighting.extrapolated[{i}]: not an object with collective, bytes and how")
    return out


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
             esc(f"{m.get('count'):g}"), esc(f"{m.get('curve') or m.get('benchmark')} @ {m.get('measured_ranks')} ranks"),
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

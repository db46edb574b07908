"""The runs read: who measured what, where and under which conditions, and what their records lack."""

from __future__ import annotations

import json

from microbench.benchmarks.table import PAIRS
from microbench.records import Run
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, details, el, esc, notes, table, text_el
from microbench.results.load import mpi_library

#: Latency statistics and bandwidths whose absence the report states (imported logs often lack them).
EXPECTED = (("latency_us.p50", "p50 latency"), ("latency_us.p99", "p99 latency"), ("latency_us.avg", "avg latency"),
            ("busbw_gbps", "busbw"), ("algbw_gbps", "algbw"))


def source_tool(run: Run) -> str:
    """``microbench 0.1.0``, or the tool an imported run came from (``omb 7.4 (imported)``)."""
    src = run.meta.get("source")
    if isinstance(src, dict) and src.get("tool"):
        return " ".join(str(p) for p in (src["tool"], src.get("version")) if p) + " (imported)"
    return f"microbench {run.meta.get('microbench_version') or '?'}"


def hosts_text(meta: dict, shown: int = 4) -> str:
    """``vm (2)`` or ``n01 (8), n02 (8) and 62 more``."""
    per_host = meta.get("ranks_per_host") or {}
    if not per_host:
        return ", ".join(meta.get("hosts") or []) or "-"
    items = [f"{h} ({n})" for h, n in list(per_host.items())[:shown]]
    more = f" and {len(per_host) - shown} more" if len(per_host) > shown else ""
    return ", ".join(items) + more


def _field(result: dict, dotted: str):
    value = result
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def missing_fields(run: Run) -> list[str]:
    """What the run's results (pairs aside) lack: ``p50 latency in 12 of 12 results``, one line per field."""
    results = [r for r in run.results if r.get("benchmark") != PAIRS]
    out = []
    for dotted, name in EXPECTED:
        lacking = sum(not isinstance(_field(r, dotted), (int, float)) for r in results)
        if lacking:
            out.append(f"{name} in {lacking} of {len(results)} results")
    return out


def _libraries(run: Run) -> str:
    torch = (run.meta.get("torch") or {}).get("version") if isinstance(run.meta.get("torch"), dict) else None
    parts = [mpi_library(run)] + ([f"torch {torch}"] if torch else [])
    return ", ".join(p for p in parts if p and p != "-") or "-"


def _device(meta: dict) -> str:
    dev = meta.get("device") or {}
    if not isinstance(dev, dict):
        return str(dev)
    return " ".join(str(p) for p in (dev.get("kind"), dev.get("name"), dev.get("buffer")) if p) or "-"


def _conditions(meta: dict) -> str:
    cond = meta.get("conditions") or {}
    parts = [f"huge pages {cond['huge_pages']} (THP {cond.get('thp')})" if cond.get("huge_pages") else "",
             f"timer: {cond['timer']}" if cond.get("timer") else "",
             f"cpu {cond['cpu']}" if cond.get("cpu") else ""]
    return "; ".join(p for p in parts if p) or "-"


def _detail_rows(run: Run) -> str:
    meta = run.meta
    keep = ("command", "launcher", "slurm", "mpi", "torch", "device", "versions", "version_mismatch", "conditions",
            "options", "source")
    rows = [[esc(k), el("code", esc(json.dumps(meta[k], indent=1, sort_keys=True, default=str)))]
            for k in keep if meta.get(k) not in (None, {}, [])]
    rows.append([esc("file"), esc(run.source)])
    if run.end:
        rows.append([esc("end"), esc(f"{run.end.get('status')} {run.end.get('reason') or ''}".strip())])
    return table(["field", "value"], rows, class_="kv")


def section(loaded: Loaded) -> Section:
    """The table of runs, a details block per run, and what their records lack."""
    rows, lacking, names = [], [], loaded.names
    for i in loaded.order:
        run, meta = loaded.full[i], loaded.full[i].meta
        status = (run.end or {}).get("status", "no end line")
        benches = sorted({str(r.get("benchmark")) for r in run.results})
        rows.append([esc(names[i]), esc(source_tool(run)), esc(status), esc(meta.get("ranks", "-")),
                     esc(hosts_text(meta)), esc(meta.get("backend") or "-"), esc(_libraries(run)),
                     esc(_device(meta)), esc(_conditions(meta)), esc(f"{len(run.results)}: {', '.join(benches)}")])
        lacking += [f"{names[i]} ({source_tool(run)}): no {m}" for m in missing_fields(run)]
    incomplete = [(loaded.full[i].end or {}).get("status") != "complete" for i in loaded.order]
    html = table(["run", "measured by", "status", "ranks", "hosts", "backend", "libraries", "device", "conditions",
                  "results"], rows, numeric=[3], row_classes=["warn" if bad else None for bad in incomplete])
    html += details("every run's metadata (command, versions, conditions, options, source)",
                    "".join(text_el("h4", names[i]) + _detail_rows(loaded.full[i]) for i in loaded.order))
    if lacking:
        html += text_el("h3", "What the records lack") + text_el(
            "p", "Shown as '-' in tables and left out of figures; a figure whose statistic a run lacks falls back "
                 "to avg for that run and says so.") + notes(lacking)
    status = f"{len(loaded.order)} run(s)" + (f", {sum(incomplete)} not complete" if any(incomplete) else "")
    return Section("runs", "Runs", html, status, None if not any(incomplete) else False)

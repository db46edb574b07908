"""The runs read: who measured what, where and under which conditions, and what their records lack.

The newest runs (``Loaded.newest``, their lines read in full) one row and one metadata block each; the
older ones counted from the table (statuses, host sets, libraries), with every run that did not complete
still named (up to ``MAX_NAMED``)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

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


MAX_NAMED = 20  #: older runs that did not complete named one by one, at most


def _older(loaded: Loaded, older: list[int]) -> str:
    """What the runs not shown one by one were: their span, statuses, host sets and libraries."""
    from microbench.results.load import time_span
    from microbench.results.selection import host_set

    runs = [loaded.table.runs[i] for i in older]
    statuses = Counter((r.end or {}).get("status", "no end line") for r in runs)
    hosts = Counter(",".join(host_set(r.meta)) or "-" for r in runs)
    libs = Counter(_libraries(r) for r in runs)
    lines = [f"{len(older)} older run(s), {time_span(runs)}, counted here and in the medians, history, check and "
             "compare, not listed one by one:",
             "status: " + ", ".join(f"{n} {s}" for s, n in statuses.most_common()),
             "hosts: " + "; ".join(f"{h} ({n} runs)" for h, n in hosts.most_common(5)),
             "libraries: " + "; ".join(f"{lib} ({n} runs)" for lib, n in libs.most_common(5))]
    bad = [i for i in older if (loaded.table.runs[i].end or {}).get("status") != "complete"]
    lines += [f"not complete: {loaded.names[i]}: {(loaded.table.runs[i].end or {}).get('status', 'no end line')}"
              for i in bad[-MAX_NAMED:]]
    if len(bad) > MAX_NAMED:
        lines.append(f"and {len(bad) - MAX_NAMED} older run(s) not complete")
    return notes(lines)


def section(loaded: Loaded) -> Section:
    """The table of the newest runs, a details block per run, what their records lack, and the older runs
    counted."""
    rows, lacking, names, table_ = [], [], loaded.names, loaded.table
    benchmarks = table_.benchmarks()
    for i in loaded.newest:
        run = loaded.full(i)
        meta = run.meta
        status = (run.end or {}).get("status", "no end line")
        mine = table_.run == i  # the table's rows (the run's lines, if its file could not be read again)
        benches = sorted({str(b) for b in benchmarks[mine].tolist()})
        rows.append([esc(names[i]), esc(source_tool(run)), esc(status), esc(meta.get("ranks", "-")),
                     esc(hosts_text(meta)), esc(meta.get("backend") or "-"), esc(_libraries(run)),
                     esc(_device(meta)), esc(_conditions(meta)),
                     esc(f"{int(np.count_nonzero(mine))}: {', '.join(benches)}")])
        lacking += [f"{names[i]} ({source_tool(run)}): no {m}" for m in missing_fields(run)]
    incomplete = [(loaded.full(i).end or {}).get("status") != "complete" for i in loaded.newest]
    every_incomplete = sum((table_.runs[i].end or {}).get("status") != "complete" for i in loaded.order)
    html = table(["run", "measured by", "status", "ranks", "hosts", "backend", "libraries", "device", "conditions",
                  "results"], rows, numeric=[3], row_classes=["warn" if bad else None for bad in incomplete])
    older = [i for i in loaded.order if i not in set(loaded.newest)]
    if older:
        html = notes([f"the newest {len(loaded.newest)} of {len(loaded.order)} runs (--newest)"]) + html \
            + _older(loaded, older)
    html += details("the metadata of the runs listed (command, versions, conditions, options, source)",
                    "".join(text_el("h4", names[i]) + _detail_rows(loaded.full(i)) for i in loaded.newest))
    if lacking:
        html += text_el("h3", "What the records lack") + text_el(
            "p", "Shown as '-' in tables and left out of figures; a figure whose statistic a run lacks falls back "
                 "to avg for that run and says so.") + notes(lacking)
    status = f"{len(loaded.order)} run(s)" + (f", {every_incomplete} not complete" if every_incomplete else "")
    return Section("runs", "Runs", html, status, None if not every_incomplete else False)

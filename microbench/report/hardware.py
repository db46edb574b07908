"""Is the bandwidth right? Each run's results against the links it ran on, the platform's expected values, and
what a job's own collectives reached beside the benchmark's curve.

- the path's peak (``run.path_peak``, ``result.peak``): per run, benchmark and configuration, the best busbw and
  its share of the peak of the path its data crossed, or why there is none (``microbench.cluster.path_peak``);
  NCCL's algorithm and protocol where the records carry them;
- the reference table (``microbench.results.expected``): each row about the run's platform, with its source,
  and the best busbw (or the smallest latency) as a share of it;
- the job beside the curve (``microbench.results.job_overlay``): a job imported from its NCCL Inspector files,
  operation by operation, against the newest measured curve of the same collective and group size;
- each host's links, for the runs shown individually (their run lines in full).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from microbench.cluster.links_text import link_lines
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, details, el, notes, pre, table, text_el
from microbench.results import expected, job_overlay
from microbench.units import format_size


def _gbps(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 100:.1f} %"


def _best(loaded: Loaded) -> dict:
    """(run, benchmark, ranks) -> (best busbw, its share, smallest avg latency, beyond-the-wire rows)."""
    t = loaded.table
    busbw = t.values("busbw", "avg")
    share = t.numbers.get("peak.share")
    latency = t.latency.get("avg")
    out: dict = defaultdict(lambda: [np.nan, np.nan, np.nan])
    for row in range(len(t.run)):
        key = t.configs[t.config[row]]
        ident = (int(t.run[row]), key.get("benchmark"), key.get("ranks"))
        best = out[ident]
        if math.isfinite(busbw[row]) and not busbw[row] <= best[0]:
            best[0] = float(busbw[row])
            best[1] = float(share[row]) if share is not None else np.nan
        if latency is not None and math.isfinite(latency[row]) and not latency[row] >= best[2]:
            best[2] = float(latency[row])
    return out


def _peak_rows(loaded: Loaded, best: dict) -> tuple[list[list[str]], list[str]]:
    rows, said = [], []
    for (run, benchmark, ranks), (bw, share, _) in sorted(best.items(), key=lambda kv: (str(kv[0][1]), kv[0][0])):
        if job_overlay.is_job(loaded.table, run) or benchmark == "pairs":
            continue
        peak = loaded.table.runs[run].meta.get("path_peak")
        if not isinstance(peak, dict):
            continue
        rows.append([loaded.names[run], str(benchmark), str(ranks), f"{peak.get('tier')}", _gbps(peak.get("gbps")),
                     str(peak.get("link")), _gbps(bw), _pct(share)])
    if not rows:
        said.append("no run records its path's peak (runs of microbench before links were recorded, or imports)")
    return rows, said


def _expected_rows(loaded: Loaded, best: dict) -> list[list[str]]:
    rows = []
    for (run, benchmark, ranks), (bw, _, lat) in sorted(best.items(), key=lambda kv: (str(kv[0][1]), kv[0][0])):
        if job_overlay.is_job(loaded.table, run):
            continue
        for row in expected.rows_for(loaded.table.runs[run].meta, benchmark):
            share = expected.compare(row, busbw_gbps=bw if math.isfinite(bw) else None,
                                     latency_us=lat if math.isfinite(lat) else None)
            figure = f"{lat:.4g} us" if row.what == "latency" else f"{_gbps(bw)} GB/s"
            rows.append([loaded.names[run], str(benchmark), str(ranks), figure,
                         expected.describe(row, share), row.source])
    return rows


def _job_rows(loaded: Loaded) -> list[list[str]]:
    rows = []
    for p in job_overlay.job_points(loaded.table):
        band = f" ({_gbps(p.job_band[0])}..{_gbps(p.job_band[1])})" if p.job_band else ""
        bench = "-" if p.curve_gbps is None else f"{_gbps(p.curve_gbps)} ({loaded.names[p.curve_run]}, {p.how})"
        rows.append([p.benchmark, str(p.ranks), format_size(p.size), _gbps(p.job_gbps) + band,
                     bench if p.curve_gbps is not None else p.how, _pct(p.share)])
    return rows


def _links(loaded: Loaded) -> str:
    blocks = []
    for run in loaded.newest:
        found = loaded.full(run).meta.get("links")
        if isinstance(found, dict) and found:
            lines = [line for host, links in found.items() for line in link_lines(host, links)]
            blocks.append(details(f"{loaded.names[run]}: links of {len(found)} host(s)", pre(lines)))
    return "".join(blocks)


def section(loaded: Loaded) -> Section | None:
    """The page's "Against the hardware" part, or None when no record says anything about it."""
    best = _best(loaded)
    peak_rows, peak_notes = _peak_rows(loaded, best)
    expected_rows = _expected_rows(loaded, best)
    job_rows = _job_rows(loaded)
    links = _links(loaded)
    if not (peak_rows or expected_rows or job_rows or links):
        return None
    body = text_el("p", "busbw (GB/s, the recorded avg) against the peak of the path each result's data crossed, "
                        "the platform's expected values (each with its source), and a job's own operations beside "
                        "the measured curve of the same collective and group size.", class_="how")
    if peak_rows:
        body += text_el("h3", "Share of the path's peak")
        body += table(["run", "benchmark", "ranks", "tier", "peak (GB/s)", "set by", "best busbw (GB/s)",
                       "its share"], peak_rows, numeric=(2, 4, 6, 7))
    body += notes(peak_notes)
    if expected_rows:
        body += text_el("h3", "Against this platform's expected values")
        body += table(["run", "benchmark", "ranks", "best", "share of the row", "source"], expected_rows,
                      numeric=(2, 3))
    if job_rows:
        body += text_el("h3", "The job beside the curve")
        body += text_el("p", "Per job result: the busbw of its median operation (p50 of its operations' times; "
                             "p10..p90 of them in brackets), the benchmark's busbw at that size (the newest "
                             "measured run of the same collective and rank count: its point at that size, else "
                             "between the sizes around it on a log axis), and the job's share of it. The job's "
                             "points are drawn on the busbw curves above as their own series.", class_="how")
        body += table(["collective", "ranks", "size", "job busbw (GB/s)", "benchmark busbw (GB/s)", "job's share"],
                      job_rows, numeric=(1, 3, 5))
    if links:
        body += text_el("h3", "Links of each host") + links
    status = f"{len(peak_rows)} with a path peak" + (f", {len(job_rows)} job point(s)" if job_rows else "")
    return Section("hardware", "Against the hardware", el("div", body), status, None)

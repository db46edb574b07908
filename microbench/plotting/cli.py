"""Latency and bandwidth figures from results: one figure per benchmark, runs and configurations overlaid.

Left: latency against message size (log-log), the line a latency statistic (p50 by default), the band
its spread (p10..p90 of all samples, or fastest..slowest). Right: busbw (or algbw) = S x factor /
latency from the same statistics. --by config merges the runs of each configuration: the line is then
the median over runs and the band the spread over runs. Results of the pairwise link test (``run
pairs``) become heatmaps, one per matrix, with outlier cells marked. A non-blocking benchmark (iallreduce,
...) also gets <name>-overlap.png: OMB's and IMB's overlap against message size (microbench.plotting.overlap),
grouped and merged as the latency figure is. Everything is read through the columnar reader
(``results.load.load_table``): only the statistics drawn are kept, and the overlap blocks as numbers.
PNG, and SVG with --svg. Results of benchmarks this command cannot draw are skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import sys
from collections import Counter
from functools import partial
from pathlib import Path

from microbench.benchmarks.table import PAIRS
from microbench.errors import UsageError, printable
from microbench.output_files import inside
from microbench.plotting.heatmap import heatmap, safe_name
from microbench.plotting.parallel import draw_all
from microbench.results import selection
from microbench.results.metrics import LATENCY_STATS

#: heatmap(matrix, labels, title, unit, path, outliers) draws an N x N matrix (e.g. pairwise link
#: results) for other commands; it lives in microbench.plotting.heatmap and is offered here.
__all__ = ["heatmap", "add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS", help="JSONL result files or directories")
    p.add_argument("-o", "--out-dir", required=True, metavar="DIR", help="folder for the figures (created)")
    p.add_argument("-b", "--benchmark", action="append", metavar="NAME",
                   help="only these benchmarks (repeat or comma-separate; pairs: the heatmaps of the pairwise "
                        "link test); default every one found")
    p.add_argument("--stat", choices=LATENCY_STATS, default="p50", metavar="STAT",
                   help=f"latency statistic of the line ({', '.join(LATENCY_STATS)}; default p50)")
    p.add_argument("--band", choices=("p10-p90", "min-max", "none"), default="p10-p90",
                   help="spread drawn around the line: p10-p90 (default), min-max, or none")
    p.add_argument("--by", choices=("auto", "run", "config"), default="auto",
                   help="one curve per run and configuration, or per configuration with runs merged (median "
                        "over runs, band over runs, newest run marked); auto (default): per run up to "
                        "5 runs of a benchmark, merged past that")
    p.add_argument("--bw", choices=("busbw", "algbw"), default="busbw", help="bandwidth panel (default busbw)")
    p.add_argument("--svg", action="store_true", help="also write SVG beside each PNG")
    selection.add_arguments(p)


def main(args) -> int:
    from microbench.benchmarks.table import COLLECTIVES
    from microbench.plotting import curves, overlap
    from microbench.results.load import benchmark_names, load_table

    wanted = benchmark_names(args.benchmark)
    table = load_table(args.results, stats=curves.band_stats(args.stat, args.band),
                       selection=selection.Selection.from_args(args))
    found = Counter(table.benchmarks().tolist())
    for name, count in sorted(found.items(), key=lambda kv: str(kv[0])):
        if name not in COLLECTIVES and name != PAIRS:
            note(f"skipped {count} result(s) of benchmark {name!r}: plot does not know how to draw it")
    names = [n for n in (wanted or sorted(n for n in found if n in COLLECTIVES)) if n in COLLECTIVES]
    out_dir = Path(args.out_dir)
    jobs = []  #: one per figure, drawn side by side (plotting.parallel)
    for name in names:
        by = curves.resolve_by(args.by, len(table.used_runs(curves.benchmark_rows(table, name, args.stat))))
        series = curves.build_series(table, name, args.stat, args.band, by, args.bw)
        if not series:
            note(f"no results of {name} with a {args.stat} latency" + (" (asked for with -b)" if wanted else ""))
            continue
        head = curves.heading(table, curves.benchmark_rows(table, name, args.stat))
        if COLLECTIVES[name].nonblocking:  # and its overlap against size, grouped as the latency figure
            overlap_by = curves.resolve_by(args.by, len(table.used_runs(
                table.overlap_row[overlap.overlap_rows(table, name)])))
            overlap_series, overlap_head = overlap.prepare(table, name, overlap_by, args.band)
        for suffix in (".png", ".svg") if args.svg else (".png",):
            jobs.append(partial(curves.draw, name, COLLECTIVES[name].summary, series, head,
                                inside(out_dir, out_dir / f"{name}{suffix}"), args.stat, args.band, by, args.bw))
            if COLLECTIVES[name].nonblocking:
                jobs.append(partial(overlap.draw_series, name, overlap_series, overlap_head,
                                    inside(out_dir, out_dir / f"{name}-overlap{suffix}"), overlap_by, args.band))
    if wanted is None or PAIRS in wanted:
        jobs += pairs_jobs(table, out_dir, args.svg)
    del table  # the figures hold what they draw (per configuration and size): the rows are let go
    gc.collect()
    written = draw_all(jobs)
    if not written:
        raise UsageError(f"nothing to plot in {', '.join(args.results)}")
    for path in written:
        print(f"wrote {path}")
    return 0


PAIRS_METRICS = ("latency", "bandwidth")  #: the pairwise test's matrices


def pairs_jobs(table, out_dir: Path, svg: bool) -> list:
    """One heatmap per pairwise-test matrix: pairs-<metric>-<run id>.png, outliers marked (a job each). A name
    that another matrix of this call has taken (two runs' ids that sanitise alike, two sizes of one run) gets
    8 hex digits of what tells the matrices apart, so no figure replaces another."""
    jobs, taken = [], set()
    for row in sorted(table.extras):
        res = table.record(row)
        if res.get("benchmark") != PAIRS or not res.get("matrix"):
            continue
        if res.get("metric") not in PAIRS_METRICS:
            note(f"skipped a pairs matrix of run {printable(str(res.get('run_id')))}: metric "
                 f"{printable(repr(res.get('metric')))[:40]} is not {' or '.join(PAIRS_METRICS)}")
            continue
        what = "latency p50" if res["metric"] == "latency" else "bandwidth p50"
        title = f"pairs: {what} at {res['size_bytes']} B, {res.get('schedule')} ({res['run_id']})"
        cells = [tuple(o["pair"]) for o in res.get("outliers", [])]
        stem = base = safe_name(f"pairs-{res['metric']}-{res['run_id']}")
        while stem in taken:
            key = f"{res['run_id']}\0{res['metric']}\0{res['size_bytes']}\0{row}\0{len(taken)}"
            stem = f"{base}-{hashlib.sha1(key.encode('utf-8', 'replace')).hexdigest()[:8]}"
        taken.add(stem)
        for suffix in (".png", ".svg") if svg else (".png",):
            jobs.append(partial(heatmap, res["matrix"], res["labels"], title, res.get("matrix_unit", ""),
                                out_dir / f"{stem}{suffix}", outliers=cells, out_dir=out_dir))
    return jobs


def note(text: str) -> None:
    print(f"# note: {text}", file=sys.stderr)

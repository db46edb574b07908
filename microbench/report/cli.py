"""One self-contained HTML page of results, to sign off an acceptance run or review a nightly.

  microbench report results/ -o report.html
  microbench report results/ -o report.html --spec site.toml --baseline nightly/old/ --workload w.json

The page holds the runs' metadata (libraries, hosts, conditions) and what their records lack;
per benchmark, latency and busbw curves (hover a point for its values, buttons show and hide runs and
configurations) and the OMB-style tables; with --spec, the check's verdict per rule with its reasons;
with --baseline, the compare verdicts with their intervals (the RESULTS are the new side); the history of
each configuration across the runs; the pairwise link test's heatmaps; with --workload, the pricing of
`microbench workload ... --results RUN.jsonl --json`. Style and script are inline and the page loads
nothing from the network. Exit 0 when written (whatever the verdicts), 2 on bad input, 3 on an internal error.
The page is written to a temporary file put on -o's name: never through a link planted there.

Every input is read once, through the columnar reader. Past ``--newest`` runs the page aggregates (per
configuration the median over runs with its band, the newest runs individually, history binned) and says
so at its top, so that a year of nightlies is a page of a few MB.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from microbench.errors import UsageError, printable
from microbench.gate.check import evaluate
from microbench.gate.check_cli import spec_stats
from microbench.gate.compare import compare
from microbench.gate.compare_cli import parse_threshold
from microbench.gate.spec import load_spec
from microbench.output_files import check_target, write_text
from microbench.report import figures, hardware, heatmaps, history, page, verdicts, workload
from microbench.report import runs as runs_part
from microbench.report.loaded import DEFAULT_NEWEST, Loaded, load
from microbench.report.markup import Section
from microbench.results.load import load_table, time_span
from microbench.results.metrics import LATENCY_STATS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS", help="JSONL result files or directories")
    p.add_argument("-o", "--out", required=True, metavar="REPORT.html", help="the page to write (.html)")
    p.add_argument("--spec", metavar="SPEC.toml", help="judge the results against this acceptance spec")
    p.add_argument("--baseline", action="append", metavar="DIR",
                   help="compare the results (new) with these baseline runs (files or directories; repeatable)")
    p.add_argument("--workload", metavar="W.json",
                   help="workload pricing: the output of microbench workload ... --results RUN.jsonl --json")
    p.add_argument("--stat", choices=LATENCY_STATS, default="p50", metavar="STAT",
                   help=f"latency statistic of curves, history and compare ({', '.join(LATENCY_STATS)}; default p50)")
    p.add_argument("--threshold", default="5%", type=parse_threshold, metavar="PCT",
                   help="compare: smallest change that counts (default 5%%)")
    p.add_argument("--newest", type=_count, default=DEFAULT_NEWEST, metavar="N",
                   help=f"runs shown individually (curves, runs table, OMB-style tables, heatmaps): the newest N "
                        f"(default {DEFAULT_NEWEST}); the others count in the medians over runs, the history, "
                        "check and compare")
    p.add_argument("--title", help="the page's title (default: microbench report and the runs' time span)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def _out_path(text: str) -> Path:
    """The page's path, refused before any work when it cannot be written (``output_files.check_target``)."""
    path = Path(text)
    if path.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"cannot write the report to {printable(str(path))}: the name must end in .html")
    return check_target(path, what="the report to ")


def build_sections(args, loaded: Loaded) -> list[Section]:
    """Every part of the page, in reading order; optional parts only when their input was given. The metric
    arrays a part computed are let go before the next (each is 9 MB per million rows)."""
    sections = []

    def add(section: Section | None) -> None:
        if section:
            sections.append(section)
        loaded.table.forget_values()

    add(runs_part.section(loaded))
    if args.spec:
        spec = load_spec(args.spec)
        add(verdicts.check_section(spec, evaluate(spec, loaded.table)))
    if args.baseline:
        baseline = load_table(args.baseline, "baseline", stats=[args.stat])
        result = compare(baseline, loaded.table, "latency", args.stat, args.threshold)
        add(verdicts.compare_section(result, len(baseline.used_runs()), len(loaded.order)))
        del baseline, result
    add(figures.section(loaded, args.stat))
    add(hardware.section(loaded))  # issue 43: the path's peak, expected values, the job beside the curve
    add(history.section(loaded, args.stat))
    add(heatmaps.section(loaded))
    if args.workload:
        add(workload.section(workload.load(args.workload), args.workload))
    return sections


def main(args) -> int:
    out = _out_path(args.out)
    if args.workload:
        workload.load(args.workload)  # bad input ends here, before any work
    stats = [args.stat, "p10", "p90", figures.FALLBACK_STAT]  # the line, its band, the fallback
    if args.spec:
        stats += spec_stats(load_spec(args.spec))
    loaded = load(args.results, args.newest, dict.fromkeys(stats))
    sections = build_sections(args, loaded)
    title = args.title or f"microbench report: {len(loaded.order)} run(s), " \
        f"{time_span([loaded.table.runs[i] for i in loaded.order])}"
    html = page.document(title, [*args.results, *(["--baseline", *args.baseline] if args.baseline else [])],
                         sections, loaded.aggregation())
    write_text(out, html, what="the report to ")
    verdict = "; ".join(f"{s.title}: {s.status}" for s in sections if s.good is not None)
    print(f"wrote {out} ({len(html.encode()) / 1024:.0f} KiB)" + (f"; {verdict}" if verdict else ""))
    return 0

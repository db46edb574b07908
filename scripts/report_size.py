"""Size of `microbench report` against other ways of putting the same curves into one offline HTML file.

    python scripts/report_size.py RESULTS... [--out-dir DIR]

For the same results it writes and measures (bytes, and gzip -9 bytes):
- microbench report (inline SVG, a few KB of script: the whole page, tables and all);
- the curves alone as matplotlib SVG (`microbench plot --svg`), static: no hover, no toggles;
- the curves alone with plotly (the plotly.js bundle inline, include_plotlyjs=True), if plotly is installed;
- the curves alone with bokeh (BokehJS inline, resources INLINE), if bokeh is installed.
The plotly and bokeh pages hold only the latency and busbw curves (one line per run and configuration,
the same series as the report's), so they are a lower bound for a full page built on them.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

from microbench.report.figures import benchmarks_in, collect
from microbench.report.loaded import Loaded, load


def sizes(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    return len(data), len(gzip.compress(data, 9))


def curves(loaded: Loaded) -> list[tuple[str, list]]:
    """(benchmark, [(label, sizes, latency us, busbw GB/s)]) for every benchmark, as the report draws them."""
    out = []
    for bench in benchmarks_in(loaded.table):
        drawn, _ = collect(loaded, bench, "p50")
        out.append((bench, [(loaded.names[c.run] if c.run is not None else "median", c.sizes, c.latency, c.busbw)
                            for c in drawn]))
    return out


def plotly_page(data, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    parts = []
    for n, (bench, series) in enumerate(data):
        fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{bench} latency", f"{bench} busbw"))
        for label, x, lat, bw in series:
            fig.add_trace(go.Scatter(x=x, y=lat, name=label, legendgroup=label), row=1, col=1)
            fig.add_trace(go.Scatter(x=x, y=bw, name=label, legendgroup=label, showlegend=False), row=1, col=2)
        fig.update_xaxes(type="log")
        fig.update_yaxes(type="log", row=1, col=1)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(n == 0)))
    path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>" + "".join(parts)
                    + "</body></html>")


def bokeh_page(data, path: Path) -> None:
    from bokeh.embed import file_html
    from bokeh.layouts import column, row
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    rows = []
    for bench, series in data:
        lat = figure(title=f"{bench} latency", x_axis_type="log", y_axis_type="log", tools="hover,reset")
        bw = figure(title=f"{bench} busbw", x_axis_type="log", tools="hover,reset")
        for label, x, y_lat, y_bw in series:
            lat.line(x, y_lat, legend_label=label)
            bw.line(x, [v if v is not None else float("nan") for v in y_bw], legend_label=label)
        for fig in (lat, bw):
            fig.legend.click_policy = "hide"
        rows.append(row(lat, bw))
    path.write_text(file_html(column(*rows), INLINE, "curves"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args()
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="report-size-"))
    out.mkdir(parents=True, exist_ok=True)
    loaded = load(args.results)
    data = curves(loaded)
    rows = []
    cmd = [sys.executable, "-m", "microbench"]
    subprocess.run([*cmd, "report", *args.results, "-o", str(out / "report.html")], check=True, capture_output=True)
    rows.append(("microbench report (whole page)", *sizes(out / "report.html")))
    subprocess.run([*cmd, "plot", *args.results, "-o", str(out / "plots"), "--svg"], check=True, capture_output=True)
    svgs = list((out / "plots").glob("*.svg"))
    rows.append((f"matplotlib SVG, curves only, static ({len(svgs)} files)", sum(p.stat().st_size for p in svgs),
                 sum(sizes(p)[1] for p in svgs)))
    for name, make in (("plotly, curves only, inline bundle", plotly_page), ("bokeh, curves only, INLINE", bokeh_page)):
        try:
            make(data, out / f"{name.split(',')[0]}.html")
        except ImportError as exc:
            rows.append((f"{name}: not installed ({exc.name})", 0, 0))
            continue
        rows.append((name, *sizes(out / f"{name.split(',')[0]}.html")))
    print(f"# {len(loaded.order)} run(s), {sum(len(s) for _, s in data)} series over {len(data)} benchmark(s); "
          f"files in {out}")
    print(f"{'what':<48}{'bytes':>12}{'gzip -9':>12}")
    for what, raw, packed in rows:
        print(f"{what:<48}{raw:>12,}{packed:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

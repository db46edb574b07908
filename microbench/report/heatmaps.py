"""Pairwise link test (``microbench run pairs``): one heatmap per matrix, outliers framed.

A cell is the p50 of that pair's iterations (latency in us, or bandwidth in GB/s). Colour runs from pale
(good) to dark red (bad): high latency, low bandwidth. Outliers are the record's own (``outliers.outliers``
and ``outliers.node_outliers``, the modified z-score rule, run when the test ran); a record without them
(older or hand-made) has them computed here with the same functions, and the page says so.
"""

from __future__ import annotations

from microbench.benchmarks.table import PAIRS
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, el, empty, esc, notes, svg_root, text_el
from microbench.measure.outliers import node_outliers, outliers

CELL_MAX, GRID_MAX, LABEL_W = 44, 520, 90
COLORMAP = "YlOrRd"


def _colour(badness: float) -> tuple[str, str]:
    """(fill, text colour) for a badness in [0, 1]."""
    from matplotlib import colormaps

    r, g, b, _ = colormaps[COLORMAP](0.08 + 0.84 * badness)
    text = "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "#fff"
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}", text


def record_outliers(rec: dict) -> tuple[set[tuple[int, int]], list[str], bool]:
    """(outlier cells, node outlier lines, computed here?) of one pairs record."""
    worse_high = rec.get("metric") != "bandwidth"
    labels = rec.get("labels") or []
    if isinstance(rec.get("outliers"), list):
        cells = {tuple(o["pair"]) for o in rec["outliers"] if isinstance(o, dict) and "pair" in o}
        nodes = [f"node outlier {n.get('label')}: row median {n.get('row_median'):.4g} (z {n.get('z')})"
                 for n in rec.get("node_outliers") or [] if isinstance(n, dict)]
        return cells, nodes, False
    found, _ = outliers(rec["matrix"], worse_high)
    node_found, _ = node_outliers(rec["matrix"], worse_high)
    nodes = [f"node outlier {labels[i] if i < len(labels) else i}: row median {m:.4g} (z {z:.2f})"
             for i, m, z in node_found]
    return {(o.i, o.j) for o in found}, nodes, True


def heatmap_svg(rec: dict, cells_out: set[tuple[int, int]]) -> str:
    matrix, labels, unit = rec["matrix"], rec.get("labels") or [], rec.get("matrix_unit", "")
    n = len(matrix)
    cell = max(8, min(CELL_MAX, GRID_MAX // max(n, 1)))
    values = [v for row in matrix for v in row if isinstance(v, (int, float))]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    worse_high = rec.get("metric") != "bandwidth"
    size = LABEL_W + n * cell + 10
    parts = []
    for i, row in enumerate(matrix):
        name = labels[i] if i < len(labels) else str(i)
        parts.append(f'<text class="tick" x="{LABEL_W - 4}" y="{LABEL_W + i * cell + cell / 2 + 4}" '
                     f'text-anchor="end">{esc(name)}</text>')
        parts.append(f'<text class="tick" transform="translate({LABEL_W + i * cell + cell / 2 + 4} {LABEL_W - 4}) '
                     f'rotate(-60)">{esc(name)}</text>')
        for j, v in enumerate(row):
            x, y = LABEL_W + j * cell, LABEL_W + i * cell
            if not isinstance(v, (int, float)):
                parts.append(f'<rect class="diag" x="{x}" y="{y}" width="{cell}" height="{cell}"/>')
                continue
            t = (v - lo) / (hi - lo) if hi > lo else None  # a uniform matrix is all good
            fill, ink = _colour(0.0 if t is None else t if worse_high else 1 - t)
            flagged = (min(i, j), max(i, j)) in cells_out
            tip = f"{name} - {labels[j] if j < len(labels) else j}: {v:.4g} {unit}" + (" (outlier)" if flagged else "")
            parts.append(empty("rect", class_="cell out" if flagged else "cell", x=x, y=y, width=cell, height=cell,
                               fill=fill, data_tip=tip, data_v=f"{v:.6g}"))
            if n <= 12:
                parts.append(f'<text class="cellv" x="{x + cell / 2}" y="{y + cell / 2 + 4}" fill="{ink}" '
                             f'text-anchor="middle">{v:.3g}</text>')
    return svg_root("".join(parts), size, size, class_="chart heatmap", aria_label="pairs heatmap", data_unit=unit)


def _one(rec: dict, run_name: str) -> tuple[str, list[str]]:
    cells_out, node_lines, computed = record_outliers(rec)
    what = "latency (p50 of half the round trip)" if rec.get("metric") != "bandwidth" else \
        f"bandwidth (p50 per-message time, window {rec.get('window')})"
    rule = rec.get("outlier_rule") or {}
    title = (f"{what} at {rec.get('size_bytes')} B, {len(rec['matrix'])} {rec.get('unit', 'participant')}s, "
             f"{rec.get('schedule')} schedule: {run_name}")
    lines = [f"{len(cells_out)} outlier link(s)" + (" (computed here: the record has no outlier list)" if computed
                                                   else "")
             + (f"; rule: {rule.get('statistic')}, {rule.get('direction')} z {rule.get('z_limit')}" if rule else "")]
    values = [v for row in rec["matrix"] for v in row if isinstance(v, (int, float))]
    if values:
        lines.append(f"cells from {min(values):.4g} to {max(values):.4g} {rec.get('matrix_unit', '')}")
    lines += node_lines
    body = text_el("h3", title) + el("figure", heatmap_svg(rec, cells_out)) + notes(lines)
    return el("div", body, class_="figure-group pairs"), lines


def pairs_records(loaded: Loaded) -> tuple[list[tuple[int, dict]], int]:
    """(run, record) of the pairs matrices of the newest ``len(loaded.newest)`` runs that have any, in run
    order, and how many older runs with matrices are left out; from the table's kept pairs fields, or the
    records in full where the run is shown individually."""
    table = loaded.table
    found: dict[int, list[dict]] = {}
    for row in sorted(table.extras):
        if table.configs[table.config[row]].benchmark != PAIRS or not table.extras[row].get("matrix"):
            continue
        rec = table.record(row)
        if isinstance(rec.get("matrix"), list):
            found.setdefault(int(table.run[row]), []).append(rec)
    runs = [i for i in loaded.order if i in found]
    kept = runs[-len(loaded.newest):] if loaded.newest else []
    out = []
    for i in kept:  # a run shown individually has its records in full (the outlier rule, the window)
        full = [r for r in loaded.shown[i].results if r.get("benchmark") == PAIRS
                and isinstance(r.get("matrix"), list) and r["matrix"]] if i in loaded.shown else []
        out += [(i, rec) for rec in (full if len(full) == len(found[i]) else found[i])]
    return out, len(runs) - len(kept)


def section(loaded: Loaded) -> Section | None:
    blocks, outliers = [], 0
    shown, left = pairs_records(loaded)
    for i, rec in shown:
        html, _ = _one(rec, loaded.names[i])
        blocks.append(html)
        outliers += len(record_outliers(rec)[0])
    if not blocks:
        return None
    if left:
        blocks.append(notes([f"the matrices of {left} older run(s) left out (--newest)"]))
    how = text_el("p", "Each cell: the p50 of that pair's iterations. Pale is good, dark red bad (high latency, "
                  "low bandwidth); a blue frame marks an outlier link: modified z-score 0.6745 (x - median) / MAD "
                  "over all links beyond 3.5 in the bad direction, MAD floored at 5 % of the median.", class_="how")
    return Section("pairs", "Pairwise links", how + "".join(blocks),
                   f"{len(blocks)} matrix(es), {outliers} outlier link(s)", outliers == 0)

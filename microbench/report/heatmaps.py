"""Pairwise link test (``microbench run pairs``): one heatmap per matrix, outliers framed.

A cell is the p50 of that pair's iterations (latency in us, or bandwidth in GB/s). Colour runs from pale
(good) to dark red (bad): high latency, low bandwidth. Outliers are the record's own (``outliers.outliers``
and ``outliers.node_outliers``, the modified z-score rule, run when the test ran); a record without them
(older or hand-made) has them computed here with the same functions, and the page says so.
"""

from __future__ import annotations

import functools

import numpy as np

from microbench.benchmarks.table import PAIRS
from microbench.report.loaded import Loaded
from microbench.report.markup import Section, el, empty, esc, notes, svg_root, text_el
from microbench.measure.outliers import node_outliers, outliers

CELL_MAX, GRID_MAX, LABEL_W = 44, 520, 90
MAX_SIDE = GRID_MAX // 8  #: participants drawn a cell each (at least 8 px); a larger matrix is drawn in blocks
COLORMAP = "YlOrRd"


@functools.cache
def _palette() -> tuple[tuple[str, str], ...]:
    """(fill, text colour) of each of the colormap's entries, computed once: a colormap called per cell rebuilds
    its lookup table each time (minutes for a 1000 x 1000 matrix)."""
    from matplotlib import colormaps

    cmap = colormaps[COLORMAP]
    out = []
    for r, g, b, _ in cmap(np.arange(cmap.N)):
        text = "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "#fff"
        out.append((f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}", text))
    return tuple(out)


def _colour(badness: float) -> tuple[str, str]:
    """(fill, text colour) for a badness in [0, 1]: the colormap's entry at 0.08 + 0.84 x badness (as calling it)."""
    palette = _palette()
    return palette[min(max(int((0.08 + 0.84 * badness) * len(palette)), 0), len(palette) - 1)]


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
    """The matrix as an SVG grid: a cell per pair up to ``MAX_SIDE`` participants, blocks beyond."""
    if len(rec["matrix"]) > MAX_SIDE:
        return _blocks_svg(rec, cells_out)
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


def _floats(matrix: list) -> np.ndarray:
    """The matrix as an N x N float array, NaN where a cell holds no finite number."""
    n = len(matrix)
    out = np.full((n, n), np.nan)
    for i, row in enumerate(matrix):
        for j, v in enumerate(row[:n] if isinstance(row, list) else ()):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                try:
                    out[i, j] = v
                except OverflowError:
                    pass
    out[~np.isfinite(out)] = np.nan
    return out


def _blocks_svg(rec: dict, cells_out: set[tuple[int, int]]) -> str:
    """A matrix of more than ``MAX_SIDE`` participants as at most MAX_SIDE x MAX_SIDE blocks of b x b pairs, each
    coloured by its worst pair (its tip says which range and value), framed where it holds an outlier link: the
    page stays small and quick to draw whatever N, and a bad link still shows."""
    labels, unit = rec.get("labels") or [], rec.get("matrix_unit", "")
    values = _floats(rec["matrix"])
    n = len(values)
    b = -(-n // MAX_SIDE)
    blocks = -(-n // b)
    worse_high = rec.get("metric") != "bandwidth"
    padded = np.full((blocks * b, blocks * b), np.nan)
    padded[:n, :n] = values
    grid = padded.reshape(blocks, b, blocks, b).transpose(0, 2, 1, 3).reshape(blocks, blocks, b * b)
    present = ~np.isnan(grid).all(axis=2)
    filled = np.where(np.isnan(grid), -np.inf if worse_high else np.inf, grid)
    worst = filled.max(axis=2) if worse_high else filled.min(axis=2)
    finite = values[~np.isnan(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    flagged = {(i // b, j // b) for i, j in cells_out} | {(j // b, i // b) for i, j in cells_out}
    cell = GRID_MAX // blocks
    size = LABEL_W + blocks * cell + 10

    def name(k: int) -> str:
        return str(labels[k]) if k < len(labels) else str(k)

    def span(k: int) -> str:
        return f"{name(k * b)}..{name(min(n, (k + 1) * b) - 1)}"

    parts = []
    for k in range(blocks):
        parts.append(f'<text class="tick" x="{LABEL_W - 4}" y="{LABEL_W + k * cell + cell / 2 + 4}" '
                     f'text-anchor="end">{esc(name(k * b))}</text>')
        parts.append(f'<text class="tick" transform="translate({LABEL_W + k * cell + cell / 2 + 4} {LABEL_W - 4}) '
                     f'rotate(-60)">{esc(name(k * b))}</text>')
    for i in range(blocks):
        for j in range(blocks):
            x, y = LABEL_W + j * cell, LABEL_W + i * cell
            if not present[i, j]:
                parts.append(f'<rect class="diag" x="{x}" y="{y}" width="{cell}" height="{cell}"/>')
                continue
            v = float(worst[i, j])
            t = (v - lo) / (hi - lo) if hi > lo else None
            fill, _ = _colour(0.0 if t is None else t if worse_high else 1 - t)
            out = (i, j) in flagged
            tip = (f"{span(i)} - {span(j)}: worst {v:.4g} {unit} of {b} x {b} pairs"
                   + (" (holds an outlier)" if out else ""))
            parts.append(empty("rect", class_="cell out" if out else "cell", x=x, y=y, width=cell, height=cell,
                               fill=fill, data_tip=tip, data_v=f"{v:.6g}"))
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

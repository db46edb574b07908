"""An N x N matrix (e.g. pairwise link latency or bandwidth) as an annotated heatmap, outliers framed."""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Sequence

from microbench.output_files import inside
from microbench.plotting import check_path, new_figure, save

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_NAME = 120  #: characters of a file name made from data (before the suffix)


def safe_name(text: str) -> str:
    """A file name made from data (a run id, a metric): letters, digits, ``_``, ``.`` and ``-`` only, no
    leading dot, at most ``_MAX_NAME`` characters; where anything was changed, 8 hex digits of the text's
    SHA-1 are added so that two different ids never share a name."""
    name = _UNSAFE.sub("_", text).lstrip(".") or "_"
    if name != text or len(name) > _MAX_NAME:
        name = f"{name[:_MAX_NAME - 9]}-{hashlib.sha1(text.encode('utf-8', 'replace')).hexdigest()[:8]}"
    return name



_ANNOTATE_UP_TO = 24  #: cells are annotated with their values up to this N
_OUTLIER_COLOUR = "#d62728"


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def heatmap(matrix: Sequence[Sequence[float | None]], labels: Sequence[str], title: str, unit: str,
            path: str | os.PathLike, outliers: Sequence[tuple[int, int]] = (),
            out_dir: str | os.PathLike | None = None) -> Path:
    """Draw ``matrix`` (row i, column j; None = no value, e.g. the diagonal) and write PNG or SVG by suffix.

    ``labels`` name the rows and columns (length N); ``unit`` labels the colour bar; ``outliers`` are
    (row, column) cells framed in red. Values are annotated in the cells up to N = 24.
    Raises ValueError when the matrix is not N x N or an outlier lies outside it, and UsageError when
    ``out_dir`` is given and ``path`` is not inside it.
    """
    path = check_path(path if out_dir is None else inside(out_dir, path))
    n = len(labels)
    if len(matrix) != n or any(len(row) != n for row in matrix):
        raise ValueError(f"heatmap needs an N x N matrix with N = len(labels) = {n}")
    for i, j in outliers:
        if not (0 <= i < n and 0 <= j < n):
            raise ValueError(f"outlier cell ({i}, {j}) is outside the {n} x {n} matrix")
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    values = np.array([[math.nan if v is None else float(v) for v in row] for row in matrix], dtype=float)
    finite = values[np.isfinite(values)]
    side = min(12.0, max(4.5, 0.45 * n + 2.5))
    fig = new_figure(side + 1.2, side)
    ax = fig.add_subplot()
    cmap = colormaps["viridis"].with_extremes(bad="#e0e0e0")
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin - 0.5, vmax + 0.5
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    fig.colorbar(image, ax=ax, shrink=0.8).set_label(unit)
    step = max(1, math.ceil(n / 32))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [labels[t] for t in ticks], rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(ticks, [labels[t] for t in ticks])
    ax.set_title(title)
    if n <= _ANNOTATE_UP_TO:
        size = max(5, 10 - n // 4)
        for i in range(n):
            for j in range(n):
                v = values[i, j]
                if math.isnan(v):
                    ax.text(j, i, "-", ha="center", va="center", fontsize=size, color="#808080")
                    continue
                r, g, b, _ = cmap((v - vmin) / (vmax - vmin))
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(j, i, _fmt(v), ha="center", va="center", fontsize=size, color="white" if dark else "black")
    for i, j in outliers:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=_OUTLIER_COLOUR, linewidth=2.5))
    if outliers:
        ax.set_xlabel(f"{len(outliers)} outlier cell(s) framed in red", color=_OUTLIER_COLOUR)
    return save(fig, path, out_dir)

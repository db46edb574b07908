"""Figures with matplotlib's Agg renderer, without pyplot (no global state, no display needed).

matplotlib is imported inside the functions, so importing this package (as ``microbench`` does to
build its command line) costs nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from microbench.errors import UsageError, printable
from microbench.output_files import write_output

FORMATS = (".png", ".svg")
DPI = 100


def check_path(path: str | os.PathLike) -> Path:
    """The output path, which must end in .png or .svg."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise UsageError(f"cannot write a figure to {printable(str(p))}: the name must end in .png or .svg")
    return p


def new_figure(width_in: float, height_in: float):
    """A matplotlib Figure (constrained layout) not registered with pyplot."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")


def save(fig, path: str | os.PathLike, folder: str | os.PathLike | None = None) -> Path:
    """Write ``fig`` as PNG or SVG by the suffix of ``path`` (folders are created; never through a link planted
    on the name: ``output_files.write_output``; with ``folder``, only inside it); returns the path."""
    p = check_path(path)
    form = p.suffix.lower()[1:]
    metadata = {"Date": None} if form == "svg" else {}
    return write_output(p, lambda f: fig.savefig(f, format=form, dpi=DPI, metadata=metadata), folder)


def line_style(index: int) -> dict:
    """Matplotlib line style of the index-th line of a figure: colours C0..C9 for the first ten lines,
    then the same colours dashed, dotted and dash-dotted, so that no two of 40 lines look alike."""
    return {"color": f"C{index % 10}", "linestyle": ("-", "--", ":", "-.")[index // 10 % 4]}


def size_axis(ax, sizes) -> None:
    """Log2 x axis of message sizes (bytes), ticks at powers of 2 labelled 1, 8, 64, 512, 4K, ..."""
    import math

    from matplotlib.ticker import FixedLocator, NullLocator

    from microbench.units import format_size

    sizes = [s for s in sizes if s and s > 0]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes per rank)")
    if not sizes:
        return
    lo, hi = math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes)))
    stride = max(1, math.ceil((hi - lo + 1) / 11))
    ticks = [2 ** e for e in range(lo, hi + 1) if e % stride == 0]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, [format_size(t) for t in ticks])
    ax.set_xlim(min(sizes) / 1.25, max(sizes) * 1.25)


def log_value_axis(ax) -> None:
    """Log y axis labelled with plain numbers (0.6, 2, 10, 100) rather than 6x10^-1; minor ticks are
    labelled when the axis spans at most one decade (2 and 5 only, up to two decades)."""
    import math

    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))

    def minor(y, _pos):
        lo, hi = ax.get_ylim()
        decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0
        mantissa = round(y / 10 ** math.floor(math.log10(y) + 1e-9), 6) if y > 0 else 0
        if decades <= 1 or (decades <= 2 and mantissa in (2, 5)):
            return f"{y:g}"
        return ""
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))

"""Line charts drawn as SVG text: log or linear axes, series with bands, points that carry their values.

The SVG is complete without script (it prints and renders as is); ``report.js`` adds hover and toggling
from the attributes written here: each series is a ``<g class="series" data-series=ID data-keys="ID run:..
cfg:.." data-label=... fill=COLOUR>``, each point a ``<circle data-x=X-TEXT data-y=VALUE>`` (and ``data-lo`` /
``data-hi`` for its band), the chart ``<svg class="chart" data-unit=UNIT data-what=...>``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

from microbench.report.markup import attrs, esc, svg_root

#: Ten distinguishable colours (matplotlib's tab10); series past ten reuse them dashed, then dotted.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
DASHES = ("", "6 3", "2 2", "8 3 2 3")
WIDTH, HEIGHT = 600, 340
MARGIN = {"left": 64, "right": 14, "top": 28, "bottom": 46}
_TOP_DECADE = sys.float_info.max_10_exp  #: 308: 10.0 ** 309 is past the largest float


def style_of(index: int) -> tuple[str, str]:
    """(colour, dash pattern) of the index-th series."""
    return PALETTE[index % len(PALETTE)], DASHES[index // len(PALETTE) % len(DASHES)]


def fmt(value: float) -> str:
    """A value for an attribute: 6 significant digits."""
    return f"{value:.6g}"


@dataclass
class Point:
    x: float
    y: float
    x_text: str  #: what the tooltip says for x (a size such as 64K, a run's time)
    lo: float | None = None
    hi: float | None = None


@dataclass
class Line:
    sid: str  #: series id, unique in its figure group (shared by the latency and bandwidth charts)
    label: str
    keys: str  #: space-separated toggle tokens (sid, run:..., cfg:...)
    color: str
    dash: str
    points: list[Point] = field(default_factory=list)
    hidden: bool = False
    what: str | None = None  #: what its values are, where it differs from the chart's (a fallback statistic)


@dataclass(frozen=True)
class Scale:
    """Maps data values (log or linear) to pixels."""

    log: bool
    lo: float
    hi: float
    pixel_lo: float
    pixel_hi: float

    def __call__(self, value: float) -> float:
        a, b, v = (math.log(self.lo), math.log(self.hi), math.log(value)) if self.log else (self.lo, self.hi, value)
        t = (v - a) / (b - a) if b != a else 0.5
        return self.pixel_lo + t * (self.pixel_hi - self.pixel_lo)


def log_domain(values: list[float], pad: float = 1.25) -> tuple[float, float]:
    """The values' range widened by ``pad`` (by 2 when they are one value), the top held at the largest float
    (latencies near 1e308 stay drawable)."""
    lo, hi = min(values), max(values)
    if lo == hi:
        return lo / 2, min(hi * 2, sys.float_info.max)
    return lo / pad, min(hi * pad, sys.float_info.max)


def linear_domain(values: list[float]) -> tuple[float, float]:
    hi = max(values + [0.0])
    return 0.0, hi * 1.08 if hi > 0 else 1.0


def log2_ticks(lo: float, hi: float, label) -> list[tuple[float, str]]:
    """Powers of two in [lo, hi], at most about 11, labelled by ``label(int)``."""
    a, b = math.ceil(math.log2(lo)), math.floor(math.log2(hi))
    stride = max(1, math.ceil((b - a + 1) / 11))
    return [(2.0 ** e, label(2 ** e)) for e in range(a, b + 1) if e % stride == 0]


def log10_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Decades in [lo, hi]; with 2 and 5 between them when the axis spans fewer than three decades."""
    a, b = math.floor(math.log10(lo)), min(math.ceil(math.log10(hi)), _TOP_DECADE)
    steps = (1, 2, 5) if b - a < 3 else (1,)
    if b - a > 12:  # at most about a dozen decades labelled
        steps = ()
        stride = math.ceil((b - a + 1) / 12)
        ticks = [10.0 ** e for e in range(a, b + 1) if e % stride == 0]
    else:
        ticks = [m * 10.0 ** e for e in range(a, b + 1) for m in steps]
    return [(t, f"{t:g}") for t in ticks if lo <= t <= hi]


def linear_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """About five round ticks (1, 2 or 5 times a power of ten apart)."""
    raw = (hi - lo) / 5 or 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step)
    return [(k * step, f"{k * step:g}") for k in range(first, int(hi / step) + 1)]


@dataclass
class Axes:
    """A chart's two scales and their ticks."""

    x: Scale
    y: Scale
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    x_label: str
    y_label: str


def make_axes(lines: list[Line], x_kind: str, y_log: bool, x_label: str, y_label: str, size_label=None,
              x_ticks: list[tuple[float, str]] | None = None) -> Axes:
    """Scales fitted to the points (x_kind: "log2" for message sizes, "index" for runs in order)."""
    xs = [p.x for ln in lines for p in ln.points] or [1.0]
    ys = [v for ln in lines for p in ln.points for v in (p.y, p.lo, p.hi) if v is not None and (v > 0 or not y_log)]
    ys = ys or [1.0]
    left, right = MARGIN["left"], WIDTH - MARGIN["right"]
    top, bottom = MARGIN["top"], HEIGHT - MARGIN["bottom"]
    if x_kind == "log2":
        xlo, xhi = log_domain(xs)
        x = Scale(True, xlo, xhi, left, right)
        xt = log2_ticks(xlo, xhi, size_label or str)
    else:
        x = Scale(False, min(xs) - 0.5, max(xs) + 0.5, left, right)
        xt = x_ticks or []
    if y_log:
        ylo, yhi = log_domain(ys, 1.3)
        y = Scale(True, ylo, yhi, bottom, top)
        yt = log10_ticks(ylo, yhi)
    else:
        ylo, yhi = linear_domain(ys)
        y = Scale(False, ylo, yhi, bottom, top)
        yt = linear_ticks(ylo, yhi)
    return Axes(x, y, xt, yt, x_label, y_label)


def _frame(axes: Axes) -> list[str]:
    left, right = MARGIN["left"], WIDTH - MARGIN["right"]
    top, bottom = MARGIN["top"], HEIGHT - MARGIN["bottom"]
    out = [f'<rect class="plot" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>']
    for value, text in axes.x_ticks:
        px = axes.x(value)
        out.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
                   f'<text class="tick" x="{px:.1f}" y="{bottom + 15}" text-anchor="middle">{esc(text)}</text>')
    for value, text in axes.y_ticks:
        py = axes.y(value)
        out.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}"/>'
                   f'<text class="tick" x="{left - 5}" y="{py + 4:.1f}" text-anchor="end">{esc(text)}</text>')
    out.append(f'<text class="axis" x="{(left + right) / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
               f'{esc(axes.x_label)}</text>')
    out.append(f'<text class="axis" transform="translate(14 {(top + bottom) / 2}) rotate(-90)" '
               f'text-anchor="middle">{esc(axes.y_label)}</text>')
    return out


def _path(coords: list[tuple[float, float]]) -> str:
    return "M" + "L".join(f"{x:.1f},{y:.1f}" for x, y in coords)


def _series(line: Line, axes: Axes) -> str:
    usable = [p for p in line.points if p.y is not None and (p.y > 0 or not axes.y.log)]
    parts = []
    band = [p for p in usable if p.lo is not None and p.hi is not None and (min(p.lo, p.hi) > 0 or not axes.y.log)]
    if len(band) > 1:
        upper = [(axes.x(p.x), axes.y(p.hi)) for p in band]
        lower = [(axes.x(p.x), axes.y(p.lo)) for p in reversed(band)]
        parts.append(f'<path class="band" d="{_path(upper + lower)}Z" fill="{line.color}"/>')
    if len(usable) > 1:
        dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
        parts.append(f'<path class="line" d="{_path([(axes.x(p.x), axes.y(p.y)) for p in usable])}" '
                     f'stroke="{line.color}"{dash}/>')
    for p in usable:
        extra = attrs(data_lo=fmt(p.lo) if p.lo is not None else None, data_hi=fmt(p.hi) if p.hi is not None else None)
        parts.append(f'<circle cx="{axes.x(p.x):.1f}" cy="{axes.y(p.y):.1f}" r="2.6" '
                     f'data-x="{esc(p.x_text)}" data-y="{fmt(p.y)}"{extra}/>')
    cls = "series off" if line.hidden else "series"
    head = attrs(class_=cls, fill=line.color, data_series=line.sid, data_keys=line.keys, data_label=line.label,
                 data_what=line.what)
    return (f'<g{head}>'
            + "".join(parts) + "</g>")


def _marks(axes: Axes, marks: list[tuple[float, str]]) -> list[str]:
    top, bottom = MARGIN["top"], HEIGHT - MARGIN["bottom"]
    out = []
    for value, text in marks:
        px = axes.x(value)
        out.append(f'<line class="mark" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
                   f'<text class="mark" x="{px + 3:.1f}" y="{top + 11}">{esc(text)}</text>')
    return out


def line_chart(lines: list[Line], axes: Axes, title: str, unit: str, what: str, band_text: str = "",
               marks: list[tuple[float, str]] = ()) -> str:
    """An SVG line chart; ``what`` names the value in tooltips (``p50 latency``), ``band_text`` the band;
    ``marks`` are labelled vertical lines at x values (a change of MPI library, say)."""
    body = _frame(axes) + _marks(axes, list(marks)) + [_series(ln, axes) for ln in lines]
    body.append(f'<text class="title" x="{MARGIN["left"]}" y="18">{esc(title)}</text>')
    return svg_root("".join(body), WIDTH, HEIGHT, class_="chart", aria_label=title, data_unit=unit, data_what=what,
                    data_band=band_text or None)


def legend(lines: list[Line]) -> str:
    """Buttons that toggle each series (in every chart of the enclosing figure group)."""
    buttons = []
    for ln in lines:
        swatch = f'<i style="background:{ln.color}"></i>'
        buttons.append(f'<button type="button"{attrs(data_toggle=ln.sid, aria_pressed=str(not ln.hidden).lower())}>'
                       f"{swatch}{esc(ln.label)}</button>")
    return '<div class="legend">' + "".join(buttons) + "</div>"


def group_toggles(title: str, groups: list[tuple[str, str]], minimum: int = 2) -> str:
    """A row of buttons, each toggling every series whose keys hold its token: [(token, label)]; nothing when
    there are fewer than ``minimum``."""
    if len(groups) < minimum:
        return ""
    buttons = "".join(f'<button type="button"{attrs(data_toggle=token, aria_pressed="true")}>{esc(label)}</button>'
                      for token, label in groups)
    return f'<div class="toggles"><span>{esc(title)}</span>{buttons}</div>'

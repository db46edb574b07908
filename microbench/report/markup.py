"""HTML building blocks: escaped elements, tables, badges, notes. Every text goes through ``esc``."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Iterable, Sequence


def esc(text: object) -> str:
    """``text`` as HTML text or attribute value (quotes escaped)."""
    return escape(str(text), quote=True)


def attrs(**values: object) -> str:
    """`` name="value"`` pairs; None and False leave an attribute out, True writes it bare; ``class_`` is class
    and ``data_x`` is data-x."""
    out = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        out.append(f" {name}" if value is True else f' {name}="{esc(value)}"')
    return "".join(out)


def el(tag: str, content: str = "", **values: object) -> str:
    """An element whose ``content`` is already HTML (escape text with ``esc`` first)."""
    return f"<{tag}{attrs(**values)}>{content}</{tag}>"


def text_el(tag: str, text: object, **values: object) -> str:
    """An element holding plain text."""
    return el(tag, esc(text), **values)


def svg_root(content: str, width: float, height: float, **values: object) -> str:
    """An ``<svg>`` of natural size ``width`` x ``height`` (it scales down with the page, never up)."""
    head = attrs(width=width, height=height, viewBox=f"0 0 {width} {height}", role="img", **values)
    return f'<svg xmlns="http://www.w3.org/2000/svg"{head}>{content}</svg>'


def empty(tag: str, **values: object) -> str:
    """An element with no content, such as ``<rect .../>``."""
    return f"<{tag}{attrs(**values)}/>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = (),
          class_: str = "data", row_classes: Sequence[str | None] | None = None) -> str:
    """A table of HTML cells; columns listed in ``numeric`` are right-aligned."""
    right = set(numeric)
    head = "".join(text_el("th", h, class_="num" if i in right else None) for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        cells = "".join(el("td", c, class_="num" if i in right else None) for i, c in enumerate(row))
        body.append(el("tr", cells, class_=row_classes[n] if row_classes else None))
    return el("table", el("thead", el("tr", head)) + el("tbody", "".join(body)), class_=class_)


def badge(text: str, good: bool | None) -> str:
    """A verdict badge: green when good, red when not, grey when None (nothing to judge)."""
    kind = "na" if good is None else "pass" if good else "fail"
    return text_el("span", text, class_=f"badge {kind}")


def notes(lines: Iterable[str], class_: str = "notes") -> str:
    """A list of plain-text notes ('' when there are none)."""
    items = "".join(text_el("li", line) for line in lines)
    return el("ul", items, class_=class_) if items else ""


def details(summary: str, content: str, open_: bool = False) -> str:
    """A collapsible block; ``summary`` is plain text."""
    return el("details", text_el("summary", summary) + content, open=open_)


def pre(lines: Iterable[str]) -> str:
    return text_el("pre", "\n".join(lines))


def num(value: float | None, digits: int = 4) -> str:
    """A number to ``digits`` significant digits; ``-`` for None."""
    return "-" if value is None else f"{value:.{digits}g}"


@dataclass
class Section:
    """One part of the page: its anchor, heading, HTML, and a one-line status for the summary (or '')."""

    anchor: str
    title: str
    html: str
    status: str = ""
    good: bool | None = None

    def render(self) -> str:
        return el("section", text_el("h2", self.title) + self.html, id=self.anchor)

"""Plain-text tables for the gate reports: aligned columns, numbers right-aligned."""

from __future__ import annotations

from typing import Sequence


def num(value: float | None, digits: int = 4) -> str:
    """A number with ``digits`` significant digits (``-`` for None)."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def size_text(nbytes: int) -> str:
    """A message size for prose: ``8 B``, ``4K``, ``1M`` (K/M/G = powers of 2)."""
    from microbench.units import format_size

    short = format_size(nbytes)
    return f"{short} B" if short == str(nbytes) else short


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (),
           indent: str = "") -> list[str]:
    """Lines of an aligned table; columns listed in ``left`` are left-aligned, the others right-aligned."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append((indent + "  ".join(parts)).rstrip())
    return lines

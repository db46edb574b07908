"""Strict JSON for ``--json`` outputs: what jq, msgspec and every JSON parser read.

Python's ``json`` writes ``NaN`` and ``Infinity``, which are not JSON. A figure that is not finite (a median
of values near the float limit overflows) is written as null here, and a note on stderr says how many.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO


def finite_or_null(value: Any) -> tuple[Any, int]:
    """(``value`` with every non-finite float replaced by None, how many were replaced)."""
    if isinstance(value, float):
        return (value, 0) if math.isfinite(value) else (None, 1)
    if isinstance(value, dict):
        out, count = {}, 0
        for k, v in value.items():
            out[k], n = finite_or_null(v)
            count += n
        return out, count
    if isinstance(value, (list, tuple)):
        items = [finite_or_null(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0


def dump_strict(value: Any, out: TextIO | None = None, indent: int = 1) -> None:
    """Write ``value`` as strict JSON (non-finite numbers as null, noted on stderr) and a newline."""
    value, replaced = finite_or_null(value)
    (out or sys.stdout).write(json.dumps(value, indent=indent, allow_nan=False) + "\n")
    if replaced:
        print(f"# note: {replaced} value(s) that are not finite numbers (an overflow or a missing figure) "
              "written as null", file=sys.stderr)

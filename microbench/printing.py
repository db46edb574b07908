"""What the reading verbs print from files they did not write: strict JSON, and text without control characters.

Results reach a site from many hands, so a host name, an MPI string or a run id may hold terminal control
sequences (clear the screen, print a fake PASS) and a figure may be infinite. ``dump_json`` writes strict JSON
(non-finite numbers as null, with a note on stderr); ``printable`` and ``Printable`` replace control characters
(all but newline and tab) by their escapes, ``\\x1b`` for ESC.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO

#: C0 and C1 control characters (and DEL) but newline and tab -> their visible escape
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x0A, 0x09)}


def printable(text: str) -> str:
    """``text`` with control characters (but newline and tab) replaced by ``\\xNN``."""
    return text.translate(_CONTROLS)


class Printable:
    """A text stream that writes what it is given with control characters replaced (see ``printable``)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def finite(value: Any) -> tuple[Any, int]:
    """``value`` with every non-finite float replaced by None, and how many were."""
    if isinstance(value, float):
        return (value, 0) if math.isfinite(value) else (None, 1)
    if isinstance(value, dict):
        pairs = [(k, finite(v)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, sum(n for _, (_, n) in pairs)
    if isinstance(value, (list, tuple)):
        items = [finite(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0


def dump_json(value: Any, stream: TextIO | None = None, indent: int | None = 1) -> None:
    """Strict JSON (no NaN or Infinity, which JSON does not have) and a newline; non-finite numbers become null,
    and a note on stderr says how many."""
    clean, replaced = finite(value)
    stream = sys.stdout if stream is None else stream
    json.dump(clean, stream, indent=indent, allow_nan=False)
    stream.write("\n")
    if replaced:
        print(f"# note: {replaced} non-finite number(s) written as null (JSON has no NaN or Infinity)", file=sys.stderr)

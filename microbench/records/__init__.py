"""Result records: JSON Lines, one object a line, built in ``build``, written by ``writer``, read by ``reader``.

A file holds one or more runs, appended. Each run is:

- one ``{"type": "run", ...}`` line: schema version, run id, command line, UTC time, hosts, ranks per
  host, library versions, conditions and options;
- one ``{"type": "result", ...}`` line per measured (benchmark, size, configuration), written and
  flushed to disk as soon as the size is done, in a single ``write`` so a killed job leaves no partial line;
- one ``{"type": "end", "status": "complete" | "incomplete" | "failed", ...}`` line when the run stops.

``--samples`` writes ``{"type": "samples", ...}`` lines (every rank's raw latencies) to a file of its own; the
diagnostics add ``cycle``, ``soak`` and ``bisect`` lines, and the pairwise link test writes ``result`` lines of
benchmark ``pairs`` (a matrix); ``microbench replay --out`` writes ``replay`` lines. Every type is declared once in
``model`` (types, ranges, the relations between figures); the JSON Schema ``schema.json`` here (``schema_path()``) is
printed from it, and docs/records.md describes every field. Files are found and opened by ``files`` only; readers
skip fields they do not know and refuse schema versions newer than ``SCHEMA_VERSION``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from microbench.records.model import SCHEMA_VERSION
    from microbench.records.reader import ReadNotes, Run, read_records, read_results, read_runs
    from microbench.records.writer import CSV_COLUMNS, AppendFile, Output, flatten

#: name -> the module that defines it. Loaded on first use (PEP 562): a rank that only measures imports
#: ``records.figures`` without the model, the reader and the writer (and msgspec) behind these names.
_EXPORTS = {"SCHEMA_VERSION": "model", "ReadNotes": "reader", "Run": "reader", "read_records": "reader",
            "read_results": "reader", "read_runs": "reader", "CSV_COLUMNS": "writer", "AppendFile": "writer",
            "Output": "writer", "flatten": "writer"}

__all__ = [*_EXPORTS, "schema_path"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def schema_path() -> Path:
    """The JSON Schema (draft 2020-12) every record conforms to."""
    return Path(__file__).with_name("schema.json")

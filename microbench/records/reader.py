"""Reading records back: runs (their run line, results and end line) from JSONL files or directories.

An unparsable line (a truncated last line, say) is skipped unless ``strict``; a run line whose schema is
newer than ``SCHEMA_VERSION`` is refused, naming the file and line.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from microbench.errors import UsageError
from microbench.records.build import SCHEMA_VERSION
from microbench.records.files import results_files


@dataclass
class Run:
    """One run read back: its metadata line, its result lines, its end line (None if it never ended)."""

    meta: dict
    results: list[dict] = field(default_factory=list)
    end: dict | None = None
    source: str = ""

    @property
    def run_id(self) -> str | None:
        return self.meta.get("run_id")

    @property
    def complete(self) -> bool:
        return bool(self.end) and self.end.get("status") == "complete"


def _paths(items: Iterable[str | os.PathLike]) -> list[Path]:
    """The files to read (``records.files``: the same files every reader reads); skipped ones noted on stderr."""
    files, skipped = results_files(items)
    for line in skipped:
        print(f"# note: {line}", file=sys.stderr)
    return files


def read_runs(paths: Iterable[str | os.PathLike], strict: bool = False) -> list[Run]:
    """Read every run from JSONL files or directories of them (``*.jsonl`` below a directory).

    Results are attached to the run line with the same ``run_id`` (or the last run line seen).
    An unparsable line (a truncated last line, say) is skipped unless ``strict``; a schema newer than
    this reader knows is an error.
    """
    runs: list[Run] = []
    for path in _paths(paths):
        by_id: dict[str, Run] = {}
        current: Run | None = None
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from exc
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if strict:
                    raise UsageError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from exc
                continue
            if not isinstance(rec, dict):
                continue
            kind = rec.get("type")
            if kind == "run":
                schema = rec.get("schema", 1)
                if not isinstance(schema, int) or schema > SCHEMA_VERSION:
                    raise UsageError(f"{path}:{lineno}: record schema {schema} is newer than this microbench "
                                     f"reads ({SCHEMA_VERSION}); upgrade microbench")
                current = Run(meta=rec, source=str(path))
                runs.append(current)
                if rec.get("run_id"):
                    by_id[rec["run_id"]] = current
            elif kind in ("result", "end"):
                owner = by_id.get(rec.get("run_id")) or current
                if owner is None:
                    owner = current = Run(meta={}, source=str(path))
                    runs.append(owner)
                if kind == "result":
                    owner.results.append(rec)
                else:
                    owner.end = rec
    return runs


def read_results(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Every result record in the files, each with its run's metadata under the key ``"run"``."""
    out = []
    for run in read_runs(paths):
        for res in run.results:
            out.append({**res, "run": run.meta})
    return out

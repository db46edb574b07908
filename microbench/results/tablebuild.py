"""Filling a columnar ``Table`` from file parts (``parts.FilePart``, decoded or from the index).

A run reached twice (the same ``run_id`` in two files, or a file and the folder holding it) counts once.
``selection`` leaves runs out by their run line (host set, backend, MPI); ``keep`` (a ``ConfigKey``
predicate) leaves configurations out, asked once per configuration. Runs left with no rows are dropped.
A non-blocking record's ``overlap`` block becomes the numbers the tools read (``columns.OVERLAP_FIELDS``),
so no decoded block is held per row: memory grows with rows of numbers, not with the records' text.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Callable

import msgspec
import numpy as np

from microbench.results import keys
from microbench.results.columns import OVERLAP_FIELDS, RunInfo, Table, overlap_numbers
from microbench.results.parts import NUMBERS, FilePart
from microbench.results.selection import Selection


CHUNK = 64  #: parts joined into one block of columns while reading
M_MMAP_THRESHOLD = -3  #: glibc's mallopt parameter
_heap_fixed = False


def fix_mmap_threshold() -> None:
    """Keep glibc's mmap threshold at its default (128 KiB): glibc raises it each time a large block is
    freed, after which large arrays come from the heap and freed ones stay resident. On ten years of the
    whole suite that was 95 MB of the 330 MB peak (the heap holding what the reader had let go). Elsewhere
    (another C library, no mallopt) nothing changes."""
    global _heap_fixed
    if _heap_fixed or not sys.platform.startswith("linux"):
        return
    _heap_fixed = True
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


def release_free_heap() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``): once the table is built, what
    the reader decoded and let go stays resident otherwise (about 30 MB on ten years of the whole suite, a
    tenth of the peak). Elsewhere (another C library) nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class TableBuilder:
    """Merges file parts into one table: runs de-duplicated and selected, configurations kept or not,
    only the latency statistics asked for."""

    def __init__(self, stats: tuple[str, ...], selection: Selection | None = None,
                 keep: Callable[[keys.ConfigKey], bool] | None = None):
        self.stats = stats
        self.selection = selection or Selection()
        self.keep = keep
        self.runs: list[RunInfo] = []
        self.seen_ids: set[str] = set()
        self.configs: list[keys.ConfigKey] = []
        self.config_index: dict[keys.ConfigKey, int] = {}
        self.codes_of_blob: dict[bytes, np.ndarray] = {}  #: a part's configurations -> global codes (-1: not kept)
        self.check_codes: dict = {}
        self.columns: list[dict[str, np.ndarray]] = []  #: per part, then per CHUNK parts: kept rows' columns
        self.merged = 0  #: leading entries of ``columns`` that are already chunks
        self.rows = 0
        self.extras: dict[int, dict] = {}
        fix_mmap_threshold()
        self.overlap_rows: list[np.ndarray] = []  #: per part with overlap blocks: the table rows that have one
        self.overlap_values: list[np.ndarray] = []  #: and their OVERLAP_FIELDS (rows x fields)

    def add(self, part: FilePart, source: str) -> None:
        """Append the rows of one file's part that belong to runs read and configurations kept."""
        run_map = np.array([self._run(meta, end, time, source)
                            for meta, end, time in zip(part.runs, part.ends, part.result_times)] or [-1],
                           dtype=np.int64)
        owners = run_map[part.column("owner")]
        codes = self._global_codes(part.configs)[part.column("config")]
        kept = np.flatnonzero((owners >= 0) & (codes >= 0))
        if not len(kept):
            return
        checks = np.array([self.check_codes.setdefault(c, len(self.check_codes)) for c in part.checks] or [0],
                          dtype=np.int16)
        cols = {"run": owners[kept], "config": codes[kept], "requested": part.column("requested")[kept],
                "check": checks[part.column("check")[kept]]}
        for name in (*NUMBERS, *self.stats):
            cols[name] = part.column(name)[kept]
        if part.extras:
            self._add_extras(part.extras, kept)
        self.rows += len(kept)
        self.columns.append(cols)
        if len(self.columns) - self.merged >= CHUNK:
            self._merge_pending()

    def _merge_pending(self) -> None:
        """Join the parts added since the last chunk into one chunk: the many small arrays of a part are let
        go as the folder is read, so the allocator reuses their memory for the next parts instead of keeping
        a fragmented heap of them until the end (on ten years, 120 MB of resident memory)."""
        pending = self.columns[self.merged:]
        chunk = {n: np.concatenate([c[n] for c in pending]) for n in pending[0]}
        del self.columns[self.merged:]
        self.columns.append(chunk)
        self.merged = len(self.columns)

    def _add_extras(self, extras: dict[int, dict], kept: np.ndarray) -> None:
        """Pairs fields kept per row; overlap blocks turned into numbers (appended before ``self.rows`` moves)."""
        wanted = np.fromiter(extras, dtype=np.int64, count=len(extras))
        at = np.minimum(np.searchsorted(kept, wanted), len(kept) - 1)
        found = kept[at] == wanted  #: kept is sorted: the extra's row is kept where it is found there
        rows, values = [], []
        for row, position, ok in zip(wanted.tolist(), (at + self.rows).tolist(), found.tolist()):
            if not ok:
                continue
            extra = extras[row]
            if "overlap" in extra:
                rows.append(position)
                values.append(overlap_numbers(extra["overlap"]))
                extra = {name: value for name, value in extra.items() if name != "overlap"}
            if extra:
                self.extras[position] = extra
        if rows:
            order = np.argsort(rows, kind="stable")
            self.overlap_rows.append(np.asarray(rows, dtype=np.int64)[order])
            self.overlap_values.append(np.asarray(values, dtype=np.float64)[order])

    def _run(self, meta: dict, end: dict | None, result_time: str | None, source: str) -> int:
        """The table's index of a part's run, or -1 when it is not read (a duplicate, or not selected)."""
        run_id = meta.get("run_id")
        if run_id is not None:
            if run_id in self.seen_ids:
                return -1
            self.seen_ids.add(run_id)
        if not self.selection.admits(meta):  # a run without a run line is outside any selection
            return -1
        self.runs.append(RunInfo(meta=meta, source=source, end=end, result_time=result_time))
        return len(self.runs) - 1

    def _global_codes(self, blob: bytes) -> np.ndarray:
        """The table's configuration index of each of a part's configurations (-1: not kept); nightly
        files share their configuration list byte for byte, so this is one look-up per file."""
        codes = self.codes_of_blob.get(blob)
        if codes is None:
            out = []
            for values in msgspec.json.decode(blob):
                key = keys.ConfigKey(tuple(values))
                if self.keep is not None and not self.keep(key):
                    out.append(-1)
                    continue
                code = self.config_index.setdefault(key, len(self.configs))
                if code == len(self.configs):
                    self.configs.append(key)
                out.append(code)
            codes = self.codes_of_blob[blob] = np.array(out or [-1], dtype=np.int64)
        return codes

    def table(self) -> Table:
        """The table, with runs that kept no rows dropped (run indices renumbered). The parts' columns are
        joined one name at a time, each part's piece let go as it is copied: the peak is the table and one
        column, not the table twice."""
        names = ("run", "config", "requested", "check", *NUMBERS, *self.stats)
        empty = {"run": np.int64, "config": np.int64, "requested": np.int64, "check": np.int16}
        cols = {}
        for n in names:
            pieces = [c.pop(n) for c in self.columns]
            cols[n] = np.concatenate(pieces) if pieces else np.zeros(0, dtype=empty.get(n, np.float64))
            del pieces
        self.columns = []
        owners = np.unique(cols["run"])
        renumber = np.full(len(self.runs) + 1, -1, dtype=np.int32)
        renumber[owners] = np.arange(len(owners), dtype=np.int32)
        run = renumber[cols.pop("run")]
        sizes = np.array([k.size_bytes if type(k.size_bytes) is int else -1 for k in self.configs] or [-1],
                         dtype=np.int64)
        config = cols.pop("config").astype(np.int32)
        return Table(
            runs=[self.runs[i] for i in owners], configs=self.configs, run=run,
            config=config, size=sizes[config], requested=cols["requested"],
            latency={s: cols[s].astype(np.float64, copy=False) for s in self.stats},
            numbers={n: cols[n] for n in NUMBERS},
            check=cols["check"], check_states=list(self.check_codes), extras=self.extras,
            overlap_row=np.concatenate(self.overlap_rows) if self.overlap_rows else np.zeros(0, dtype=np.int64),
            overlap=self._overlap_columns())

    def _overlap_columns(self) -> dict[str, np.ndarray]:
        values = np.concatenate(self.overlap_values) if self.overlap_values else np.zeros((0, len(OVERLAP_FIELDS)))
        return {name: np.ascontiguousarray(values[:, i]) for i, name in enumerate(OVERLAP_FIELDS)}

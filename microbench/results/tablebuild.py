"""Filling a columnar ``Table`` from file parts (``parts.FilePart``, decoded or from the index).

A run reached twice (the same ``run_id`` in two files, or a file and the folder holding it) counts once.
``selection`` leaves runs out by their run line (host set, backend, MPI); ``keep`` (a ``ConfigKey``
predicate) leaves configurations out, asked once per configuration. Runs left with no rows are dropped.
"""

from __future__ import annotations

from typing import Callable

import msgspec
import numpy as np

from microbench.results import keys
from microbench.results.columns import RunInfo, Table
from microbench.results.parts import NUMBERS, FilePart
from microbench.results.selection import Selection


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
        self.columns: list[dict[str, np.ndarray]] = []  #: per part: its kept rows' columns
        self.rows = 0
        self.extras: dict[int, dict] = {}

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
            position = {int(row): self.rows + i for i, row in enumerate(kept)}
            self.extras.update({position[row]: extra for row, extra in part.extras.items() if row in position})
        self.rows += len(kept)
        self.columns.append(cols)

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
        """The table, with runs that kept no rows dropped (run indices renumbered)."""
        names = ("run", "config", "requested", "check", *NUMBERS, *self.stats)
        empty = {"run": np.int64, "config": np.int64, "requested": np.int64, "check": np.int16}
        cols = {n: np.concatenate([c[n] for c in self.columns]) if self.columns
                else np.zeros(0, dtype=empty.get(n, np.float64)) for n in names}
        self.columns = []
        owners = np.unique(cols["run"])
        renumber = np.full(len(self.runs) + 1, -1, dtype=np.int32)
        renumber[owners] = np.arange(len(owners), dtype=np.int32)
        sizes = np.array([k.size_bytes if type(k.size_bytes) is int else -1 for k in self.configs] or [-1],
                         dtype=np.int64)
        config = cols["config"].astype(np.int32)
        return Table(
            runs=[self.runs[i] for i in owners], configs=self.configs, run=renumber[cols["run"]],
            config=config, size=sizes[config], requested=cols["requested"],
            latency={s: cols[s].astype(np.float64) for s in self.stats},
            algbw_bytes=cols["algbw_bytes"], busbw_factor=cols["busbw_factor"],
            algbw_gbps=cols["algbw_gbps"], busbw_gbps=cols["busbw_gbps"], skew=cols["skew"],
            check=cols["check"], check_states=list(self.check_codes), extras=self.extras)

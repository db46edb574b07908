"""The results the gate tools judge, held by column: numbers in numpy arrays, one row per result record.

A ``Table`` is what ``load.load_table`` makes of JSONL files (``scan`` decodes them, ``tablebuild`` fills
this). Per row: the run it belongs to (``run``, an index into ``runs``), its configuration (``config``, an
index into ``configs``, each a ``keys.ConfigKey`` that includes the size), the size asked for
(``requested``, -1 when the record does not say), the latency statistics read (``latency[stat]``, us, NaN
when absent), the bandwidth inputs (``algbw_bytes``, ``busbw_factor``) and the recorded bandwidths (GB/s),
the rank skew (``stragglers.skew``),
and the data-check state (``check``, an index into ``check_states``). Pairs-test matrices and outliers
are kept for their few rows only (``extras``). A run is a ``RunInfo``: its run line's report fields and
end status. Nothing is one Python dictionary per record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from microbench.results.keys import ConfigKey
from microbench.results.metrics import OUTLIERS, OVERLAP, SKEW, metric_value
from microbench.records import Run


@dataclass
class RunInfo(Run):
    """One run as the gate tools hold it: ``records.Run`` with the report fields of its run line in
    ``meta`` and its end line, but no result dictionaries (``results`` stays empty: the rows are the
    table's); ``result_time`` is the first result's time_utc, for runs whose run line lacks one."""

    result_time: str | None = None


@dataclass
class Table:
    runs: list[RunInfo]
    configs: list[ConfigKey]
    run: np.ndarray  #: int32 per row: index into runs
    config: np.ndarray  #: int32 per row: index into configs
    size: np.ndarray  #: int64 per row: size_bytes (-1 when the record has none)
    requested: np.ndarray  #: int64 per row: requested_bytes (-1 when the record has none)
    latency: dict[str, np.ndarray]  #: stat -> float64 per row, us (NaN: the record lacks it)
    algbw_bytes: np.ndarray  #: float64 per row: S of the bandwidth formula (bytes)
    busbw_factor: np.ndarray  #: float64 per row
    algbw_gbps: np.ndarray  #: float64 per row: the recorded algbw (GB/s)
    busbw_gbps: np.ndarray  #: float64 per row: the recorded busbw (GB/s)
    skew: np.ndarray  #: float64 per row: stragglers.skew, slowest over fastest rank mean (NaN: none)
    check: np.ndarray  #: int16 per row: index into check_states
    check_states: list  #: the distinct ``check`` values (None, "pass", "fail", ...)
    extras: dict[int, dict] = field(default_factory=dict)  #: row -> pairs fields (matrix, labels, outliers)
    _computed: dict = field(default_factory=dict, repr=False)  #: (metric, stat) -> values(), computed once

    def __len__(self) -> int:
        return len(self.run)

    def benchmarks(self) -> np.ndarray:
        """The benchmark name of every row (object array)."""
        names = np.array([c.benchmark for c in self.configs] or [None], dtype=object)
        return names[self.config] if len(self) else np.array([], dtype=object)

    def config_mask(self, wanted) -> np.ndarray:
        """Rows whose configuration satisfies ``wanted(ConfigKey) -> bool`` (asked once per configuration)."""
        per_config = np.array([bool(wanted(c)) for c in self.configs] or [False])
        return per_config[self.config] if len(self) else np.zeros(0, dtype=bool)

    def size_mask(self, sizes) -> np.ndarray:
        """Rows whose size, or requested size, is one of ``sizes``."""
        wanted = np.fromiter(sizes, dtype=np.int64)
        return np.isin(self.size, wanted) | np.isin(self.requested, wanted)

    def check_values(self, rows: np.ndarray) -> list:
        """The ``check`` value of each of ``rows``."""
        return [self.check_states[c] for c in self.check[rows]]

    def used_runs(self, rows: np.ndarray | None = None) -> list[int]:
        """Indices of the runs that own at least one of ``rows`` (all rows when None), in run order."""
        owners = self.run if rows is None else self.run[rows]
        return [int(i) for i in np.unique(owners)]

    def values(self, metric: str, stat: str | None) -> np.ndarray:
        """``metrics.metric_value`` for every row at once (float64, NaN where a record lacks it)."""
        if (metric, stat) not in self._computed:
            self._computed[(metric, stat)] = self._values(metric, stat)
        return self._computed[(metric, stat)]

    def _values(self, metric: str, stat: str | None) -> np.ndarray:
        if metric == SKEW:
            return self.skew
        if metric == OVERLAP:  # from the non-blocking records' decoded ``overlap`` blocks
            out = np.full(len(self), np.nan)
            for row, extra in self.extras.items():
                value = metric_value(extra, OVERLAP, stat) if "overlap" in extra else None
                out[row] = np.nan if value is None else value
            return out
        if metric == OUTLIERS:
            out = np.full(len(self), np.nan)
            for row, extra in self.extras.items():
                found = extra.get("outliers")
                if isinstance(found, list):
                    out[row] = len(found) + len(extra.get("node_outliers") or ())
            return out
        latency = self.latency[stat]
        if metric == "latency":
            return latency
        factor = self.busbw_factor if metric == "busbw" else np.ones(len(self))
        with np.errstate(divide="ignore", invalid="ignore"):
            computed = self.algbw_bytes / (latency * 1e-6) / 1e9 * factor
        usable = (latency > 0) & np.isfinite(computed)
        if stat == "avg":
            recorded = self.algbw_gbps if metric == "algbw" else self.busbw_gbps
            return np.where(usable, computed, recorded)
        return np.where(usable, computed, np.nan)

    def record(self, row: int) -> dict[str, Any]:
        """One row as a record-like dictionary (its configuration, statistics and pairs fields)."""
        key = self.configs[self.config[row]]
        rec = {name: value for name, value in key.as_dict().items() if name != "checked"}
        rec["latency_us"] = {s: float(a[row]) for s, a in self.latency.items() if np.isfinite(a[row])}
        rec["check"] = self.check_states[self.check[row]]
        rec["run_id"] = self.runs[self.run[row]].run_id
        rec.update(self.extras.get(row, {}))
        return rec


def per_run_medians(config: np.ndarray, run: np.ndarray, values: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(config, run, median value) per distinct (config, run) of the rows given: a run that measured a
    configuration twice contributes the median of its values, once. Sorted by config, then run."""
    if len(values) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    order = np.lexsort((values, run, config))
    c, r, v = config[order], run[order], values[order]
    starts = np.flatnonzero(np.r_[True, (c[1:] != c[:-1]) | (r[1:] != r[:-1])])
    counts = np.diff(np.r_[starts, len(v)])
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    return c[starts], r[starts], (v[lo] + v[hi]) / 2

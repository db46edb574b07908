"""The results the gate tools judge, held by column: numbers in numpy arrays, one row per result record.

A ``Table`` is what ``load.load_table`` makes of JSONL files (``scan`` decodes them, ``tablebuild`` fills
this). Per row: the run it belongs to (``run``, an index into ``runs``), its configuration (``config``, an
index into ``configs``, each a ``keys.ConfigKey`` that includes the size), the size asked for
(``requested``, -1 when the record does not say), the latency statistics read (``latency[stat]``, us, NaN
when absent), every number the metrics table reads (``numbers[path]`` by record path: the bandwidth inputs
and recorded bandwidths, the first call, the rank skew, the recomputed outlier count), and the data-check
state (``check``, an index into ``check_states``). The overlap figures of the non-blocking records are numbers
too, kept for their rows only (``overlap_row`` and ``overlap``). Pairs-test matrices and outliers are kept
for their few rows only (``extras``). A run is a ``RunInfo``: its run line's report fields and end status.
Nothing is one Python dictionary per record. ``values(metric, stat)`` is the metrics table's ``compute`` on
these columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from microbench.records import Run
from microbench.results import metrics
from microbench.results.keys import ConfigKey


#: The overlap figures read from a non-blocking record's ``overlap.overlap_pct`` (%), by column name: OMB's
#: avg/min/max across ranks and its formula on medians (``p50_based``), IMB's avg/min/max across ranks.
OVERLAP_FIELDS = {"omb_avg": ("omb", "avg"), "omb_min": ("omb", "min"), "omb_max": ("omb", "max"),
                  "omb_p50": ("omb", "p50_based"), "imb_avg": ("imb", "avg"), "imb_min": ("imb", "min"),
                  "imb_max": ("imb", "max")}
#: The record path of each overlap column.
OVERLAP_PATHS = {f"overlap.overlap_pct.{family}.{stat}": name for name, (family, stat) in OVERLAP_FIELDS.items()}


def overlap_numbers(block: object) -> list[float]:
    """The ``OVERLAP_FIELDS`` of one record's decoded ``overlap`` block, NaN where absent or not a number."""
    try:  # the usual block, every figure a float: read directly (hundreds of thousands of rows a decade)
        omb, imb = block["overlap_pct"]["omb"], block["overlap_pct"]["imb"]
        out = [omb["avg"], omb["min"], omb["max"], omb["p50_based"], imb["avg"], imb["min"], imb["max"]]
        if all(type(v) is float for v in out):
            return out
    except (KeyError, TypeError):
        pass
    pct = block.get("overlap_pct") if isinstance(block, dict) else None
    out = []
    for family, stat in OVERLAP_FIELDS.values():
        found = pct.get(family) if isinstance(pct, dict) else None
        value = found.get(stat) if isinstance(found, dict) else None
        out.append(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan)
    return out


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
    numbers: dict[str, np.ndarray]  #: record path -> float64 per row (``metrics.NUMBER_COLUMNS``; NaN: absent)
    check: np.ndarray  #: int16 per row: index into check_states
    check_states: list  #: the distinct ``check`` values (None, "pass", "fail", ...)
    extras: dict[int, dict] = field(default_factory=dict)  #: row -> pairs fields (matrix, labels, outliers)
    overlap_row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  #: rows with overlap
    overlap: dict[str, np.ndarray] = field(default_factory=dict)  #: OVERLAP_FIELDS name -> % per overlap_row
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

    def number(self, path: str) -> np.ndarray:
        """The column of one record path for every row: a latency statistic (``latency_us.p50``), an overlap
        figure (dense, NaN outside the non-blocking rows), or one of ``numbers``."""
        if path.startswith("latency_us."):
            return self.latency[path[len("latency_us."):]]
        if path in OVERLAP_PATHS:
            out = np.full(len(self), np.nan)
            if len(self.overlap_row):
                out[self.overlap_row] = self.overlap[OVERLAP_PATHS[path]]
            return out
        return self.numbers[path]

    def values(self, metric: str, stat: str | None) -> np.ndarray:
        """The metric for every row at once (``metrics.TABLE[metric].compute``; float64, NaN where a record
        lacks it)."""
        if (metric, stat) not in self._computed:
            self._computed[(metric, stat)] = metrics.values(_Columns(self), metric, stat)
        return self._computed[(metric, stat)]

    def forget_values(self) -> None:
        """Let go of the metric arrays ``values`` computed so far (9 MB each per million rows): a report
        computes what each part needs and moves on."""
        self._computed.clear()

    def take(self, rows: np.ndarray) -> "Table":
        """A table of ``rows`` only (sorted row indices), sharing runs and configurations; pairs fields and
        overlap figures are left out (for tools that follow latency and bandwidth)."""
        return Table(runs=self.runs, configs=self.configs, run=self.run[rows], config=self.config[rows],
                     size=self.size[rows], requested=self.requested[rows],
                     latency={s: a[rows] for s, a in self.latency.items()},
                     numbers={p: a[rows] for p, a in self.numbers.items()}, check=self.check[rows],
                     check_states=self.check_states)

    def record(self, row: int) -> dict[str, Any]:
        """One row as a record-like dictionary (its configuration, statistics and pairs fields)."""
        key = self.configs[self.config[row]]
        rec = {name: value for name, value in key.as_dict().items() if name != "checked"}
        rec["latency_us"] = {s: float(a[row]) for s, a in self.latency.items() if np.isfinite(a[row])}
        rec["check"] = self.check_states[self.check[row]]
        rec["run_id"] = self.runs[self.run[row]].run_id
        rec.update(self.extras.get(row, {}))
        at = np.searchsorted(self.overlap_row, row)
        if at < len(self.overlap_row) and self.overlap_row[at] == row:
            pct: dict = {}
            for name, (family, stat) in OVERLAP_FIELDS.items():
                if np.isfinite(self.overlap[name][at]):
                    pct.setdefault(family, {})[stat] = float(self.overlap[name][at])
            rec["overlap"] = {"overlap_pct": pct}
        return rec


class _Columns:
    """A table's columns by record path, as ``metrics`` reads them."""

    def __init__(self, table: Table):
        self.table = table

    def __getitem__(self, path: str) -> np.ndarray:
        return self.table.number(path)


def per_run_medians(config: np.ndarray, run: np.ndarray, values: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(config, run, median value) per distinct (config, run) of the rows given: a run that measured a
    configuration twice contributes the median of its values, once. Sorted by config, then run.

    One sort of one int64 key (config and run together) rather than a sort on three columns: a decade of
    nightlies is a million rows, and each array of them 9 MB. Values are sorted within a (config, run) only
    when some pair has several rows (NaN last, as ``np.lexsort`` puts it)."""
    if len(values) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    span = int(run.max()) + 1
    wide = (int(config.max()) + 1) * span >= 2 ** 31
    key = config.astype(np.int64 if wide else np.int32) * span  # int32 (half the bytes) where it fits
    key += run
    order = np.argsort(key, kind="stable")
    key = key[order]
    v = values[order]
    del order
    step = key[1:] != key[:-1]
    if step.all():  # one row per (config, run): its value is the median
        return key // span, key % span, v.astype(float, copy=False)
    order = np.lexsort((v, key))  # several rows for some pair: values in order within each
    key, v = key[order], v[order]
    del order
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, len(v)])
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    first = key[starts]
    return first // span, first % span, midpoint(v[lo], v[hi])


def midpoint(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a + b) / 2 elementwise, also where the sum of two finite values overflows (latencies near 1e308): there
    a / 2 + b / 2. Elsewhere exactly (a + b) / 2, the mean ``statistics.median`` takes of the middle two."""
    with np.errstate(over="ignore", invalid="ignore"):
        mid = (a + b) / 2
    wild = ~np.isfinite(mid) & np.isfinite(a) & np.isfinite(b)
    if wild.any():
        mid[wild] = a[wild] / 2 + b[wild] / 2
    return mid


def median_of(values) -> float:
    """The median of a sequence of numbers as ``statistics.median`` gives it (the mean of the middle two of an
    even count), without overflowing where those two are near the largest float. NaN when there are none."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return float("nan")
    part = np.partition(data, [(n - 1) // 2, n // 2])
    return float(midpoint(part[(n - 1) // 2:(n - 1) // 2 + 1], part[n // 2:n // 2 + 1])[0])

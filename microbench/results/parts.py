"""One JSONL file's results as columns (a ``FilePart``): the unit the reader decodes, checks, caches and merges.

A part holds every result row of one file with all latency statistics and every number the metrics table
reads (``metrics.NUMBER_COLUMNS``), before any selection, so that one cached part serves every gate tool: the
file's runs (report fields of each run line, its end status and the first result's time), the file's distinct
configurations (``keys.ConfigKey`` values, JSON), and per row: the owning run (an index into the part's runs),
the configuration (an index into the part's configurations), requested size, the numbers, latency statistics
and check state. Arrays are kept as raw little-endian bytes so that a part serialises to msgpack as it is
(``index.py``).

Building a part checks what the record model requires of the figures (``records.relations.RELATIONS`` and the
bandwidth definitions), on whole columns at once; a pairs record's matrix must be square over its labels, and
its outliers are computed again from the matrix (``measure.outliers.flag_matrix``) rather than taken from the
record. A row that breaks the model is a UsageError naming its FILE:LINE.

Results, end lines attach to the run line with the same ``run_id`` in the file, never to the last run line seen:
a result whose run line is missing or unreadable belongs to a run of its own, marked ``orphan`` (no metadata,
outside any selection).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from microbench.errors import clean
from microbench.measure.outliers import OUTLIER_Z, flag_matrix
from microbench.records import model, relations
from microbench.results import keys
from microbench.results.metrics import NUMBER_COLUMNS, OUTLIER_COUNT
from microbench.results.scan import PAIRS_FIELDS, RUN_FIELDS, Decoded, kind_of, refuse_row

#: every latency statistic a part keeps (us)
PART_STATS = model.LATENCY_STATS
#: the numbers a part keeps per row (record paths), beside the latency statistics; overlap figures are kept
#: per record that has them (``extras``)
NUMBERS = tuple(p for p in NUMBER_COLUMNS if not p.startswith("overlap."))
_raw_key = attrgetter(*keys.RAW_FIELDS)
_GET_LATENCY = attrgetter("latency_us")


def _getter(path: str):
    """A function reading a dotted path from a decoded view (None where a block or the value is absent: the
    reader's views read an absent field as None)."""
    if "." not in path:
        return attrgetter(path)
    head, rest = path.split(".", 1)
    inner, outer = _getter(rest), attrgetter(head)

    def get(view):
        block = outer(view)
        return None if block is None else inner(block)
    return get


_GET = {name: _getter(name) for name in NUMBERS if name != OUTLIER_COUNT}
_GET_STAT = {stat: attrgetter(stat) for stat in model.LATENCY_STATS}


class FilePart(msgspec.Struct, array_like=True):
    stamp: list  #: (size, mtime_ns, ctime_ns, inode, device) of the file when it was read
    runs: list[dict]  #: per run: the run line's report fields ({"run_id", "orphan": True} for an orphan run)
    ends: list[Any]  #: per run: {"status", "time_utc", "machine"} of its end line, or None
    result_times: list[Any]  #: per run: the first result's time_utc, or None
    configs: bytes  #: JSON list of ConfigKey values (lists), the file's distinct configurations
    owner: bytes  #: int32 per row: index into runs
    config: bytes  #: int32 per row: index into configs
    requested: bytes  #: int64 per row, -1 when the record has none
    numbers: bytes  #: float64, len(NUMBERS) x rows
    latency: bytes  #: float64, len(PART_STATS) x rows, NaN when absent
    checks: list[Any]  #: distinct check values
    check: bytes  #: int16 per row: index into checks
    extras: dict[int, dict]  #: row -> pairs fields (matrix, labels, recomputed outliers, ...) and overlap figures
    bad_lines: list[int]  #: line numbers of lines that are not JSON (skipped)
    foreign: int  #: JSON lines that are no microbench record (skipped)
    orphans: int = 0  #: runs with records but no readable run line
    outliers_differ: int = 0  #: pairs records whose own outlier lists differ from what their matrix flags

    @property
    def rows(self) -> int:
        return len(self.owner) // 4

    def column(self, name: str) -> np.ndarray:
        """A per-row column: owner, config, requested, check, a NUMBERS path or a latency statistic."""
        n = self.rows
        if name in ("owner", "config"):
            return np.frombuffer(getattr(self, name), dtype="<i4")
        if name == "requested":
            return np.frombuffer(self.requested, dtype="<i8")
        if name == "check":
            return np.frombuffer(self.check, dtype="<i2")
        if name in NUMBERS:
            i = NUMBERS.index(name)
            return np.frombuffer(self.numbers, dtype="<f8")[i * n:(i + 1) * n]
        i = PART_STATS.index(name)
        return np.frombuffer(self.latency, dtype="<f8")[i * n:(i + 1) * n]


class PartMaker:
    """Builds parts from decoded records; remembers each distinct set of key fields' configuration."""

    def __init__(self):
        self.config_of: dict[tuple, keys.ConfigKey] = {}

    def make(self, decoded: Decoded, stamp: list) -> FilePart:
        runs, ends, times, results, owners, orphans = _attach(decoded.records)
        configs, codes = self._configs(results)
        latencies = list(map(_GET_LATENCY, results))  # absent statistics read as None: NaN below
        latency = np.array([list(map(_GET_STAT[s], latencies)) for s in PART_STATS],
                           dtype="<f8").reshape(len(PART_STATS), len(results))
        extras, differ = _extras(results, decoded)
        numbers = np.array([list(map(_GET[n], results)) if n != OUTLIER_COUNT else
                            [_outlier_count(extras.get(row)) for row in range(len(results))] for n in NUMBERS],
                           dtype="<f8").reshape(len(NUMBERS), len(results))
        _check_relations(decoded, results, latency, numbers)
        checks: dict = {}
        return FilePart(
            stamp=stamp, runs=runs, ends=ends, result_times=times,
            configs=msgspec.json.encode([list(k.values) for k in configs]),
            owner=np.array(owners, dtype="<i4").tobytes(), config=np.array(codes, dtype="<i4").tobytes(),
            requested=np.array([-1 if r.requested_bytes in (None, msgspec.UNSET) else r.requested_bytes
                                for r in results], dtype="<i8").tobytes(),
            numbers=numbers.tobytes(), latency=latency.tobytes(),
            check=np.array([checks.setdefault(_check_value(r.check), len(checks)) for r in results],
                           dtype="<i2").tobytes(),
            checks=list(checks), extras=extras, bad_lines=decoded.bad_lines, foreign=decoded.foreign,
            orphans=orphans, outliers_differ=differ)

    def _configs(self, results: list) -> tuple[list[keys.ConfigKey], list[int]]:
        """The file's distinct configurations and each row's index into them (a field absent from a record is
        ``msgspec.UNSET``, which ``keys.config_from_raw`` tells from null)."""
        local: dict[tuple, int] = {}
        codes = [local.setdefault(raw, len(local)) for raw in map(_raw_key, results)]
        configs = []
        for raw in local:
            key = self.config_of.get(raw)
            if key is None:
                key = self.config_of[raw] = keys.config_from_raw(tuple(clean(v) for v in raw))
            configs.append(key)
        return configs, codes


def _present(value) -> bool:
    """A field the record has (the reader's views read an absent field as None, a key field as UNSET)."""
    return value is not None and value is not msgspec.UNSET


def _attach(records: list) -> tuple[list[dict], list, list, list, list[int], int]:
    """(runs, ends, first result times, result records, owning run of each result, orphan runs) of one file:
    every record attached to the run line of its run id."""
    runs: list[dict] = []
    ends: list = []
    times: list = []
    by_id: dict = {}
    results, owners = [], []
    orphans = 0

    def new_run(meta: dict) -> int:
        runs.append(meta)
        ends.append(None)
        times.append(None)
        return len(runs) - 1

    def owner_of(run_id: str) -> int:
        nonlocal orphans
        owner = by_id.get(run_id)
        if owner is None:
            owner = by_id[run_id] = new_run(clean({"run_id": run_id, "orphan": True}))  # no control characters
            orphans += 1
        return owner

    for rec in records:
        kind = kind_of(rec)
        if kind == "result":
            owner = owner_of(rec.run_id)
            results.append(rec)
            owners.append(owner)
            if times[owner] is None and _present(rec.time_utc):
                times[owner] = rec.time_utc
        elif kind == "run":
            meta = clean({name: value for name in RUN_FIELDS
                          if (value := _builtin(getattr(rec, name))) is not None})  # no control characters
            known = by_id.get(rec.run_id)
            if known is not None and runs[known].get("orphan"):
                runs[known] = meta  # its records came before it: the run line joins them
                orphans -= 1
            else:
                by_id[rec.run_id] = new_run(meta)
        else:  # end
            ends[owner_of(rec.run_id)] = clean({"status": rec.status,
                                                "time_utc": rec.time_utc if _present(rec.time_utc) else None,
                                                **({"machine": _builtin(rec.machine)} if _present(rec.machine)
                                                   else {})})
    return runs, ends, times, results, owners, orphans


def _builtin(value):
    if value is msgspec.UNSET:
        return None
    return msgspec.to_builtins(value) if isinstance(value, (msgspec.Struct, list, dict)) else value


def _check_value(value):
    if value is msgspec.UNSET:
        return None
    return clean(value if value is None or isinstance(value, str) else str(value))


def _outlier_count(extra: dict | None) -> float:
    if not extra or "outliers" not in extra:
        return np.nan
    return float(len(extra["outliers"]) + len(extra.get("node_outliers") or ()))


def _extras(results: list, decoded: Decoded) -> tuple[dict[int, dict], int]:
    """Per row with them: the pairs fields (outliers recomputed from the matrix) and the overlap figures;
    how many pairs records carried outlier lists other than their matrix's."""
    out: dict[int, dict] = {}
    differ = 0
    for row, rec in enumerate(results):
        extra = {}
        if rec.benchmark == "pairs" or _present(rec.matrix):
            problem = relations.pairs_problems(rec)
            if problem:
                refuse_row(decoded.source, row, problem)
            extra = {name: _builtin(getattr(rec, name)) for name in PAIRS_FIELDS if _present(getattr(rec, name))}
            if _present(rec.matrix) and _present(rec.labels):
                recorded = (extra.get("outliers"), extra.get("node_outliers"))
                extra.update(_recomputed(rec))
                differ += recorded != (extra["outliers"], extra["node_outliers"]) and recorded != (None, None)
        if _present(rec.overlap):
            extra["overlap"] = {"overlap_pct": msgspec.to_builtins(rec.overlap.overlap_pct)}
        if extra:
            out[row] = clean(extra) if "labels" in extra else extra  # figures only: nothing to print raw
    return out, differ


def _recomputed(rec) -> dict:
    """The outliers a pairs record's matrix flags under the record's own rule limit."""
    higher_is_worse = (rec.matrix_unit if _present(rec.matrix_unit) else "us") == "us"
    rule = rec.outlier_rule if _present(rec.outlier_rule) else None
    z_limit = rule.z_limit if rule is not None else OUTLIER_Z
    repeats = getattr(rec, "repeats", msgspec.UNSET)
    return flag_matrix(rec.matrix, list(rec.labels), higher_is_worse, z_limit,
                       repeats if _present(repeats) else None)


def _check_relations(decoded: Decoded, results: list, latency: np.ndarray, numbers: np.ndarray) -> None:
    """Refuse the first row whose figures break what their definitions imply (records.model), checked on the
    whole columns at once."""
    if not results:
        return
    empty = np.flatnonzero(np.isnan(latency).all(axis=0))  # PART_STATS are every statistic of the model
    if len(empty):
        refuse_row(decoded.source, int(empty[0]), "latency_us: no statistic")
    stats = {s: latency[i] for i, s in enumerate(PART_STATS)}
    pairs = np.array([r.benchmark == "pairs" for r in results])
    for rules, rows in ((relations.RELATIONS, ~pairs), (relations.PAIRS_RELATIONS, pairs)):
        if not rows.any():
            continue
        for rel, bad in relations.relation_violations(stats, rules):
            hit = np.flatnonzero(bad & rows)
            if len(hit):
                row = int(hit[0])
                refuse_row(decoded.source, row,
                           f"latency_us.{rel.low} ({stats[rel.low][row]:.6g} us) is above latency_us.{rel.high} "
                           f"({stats[rel.high][row]:.6g} us): impossible, {rel.why}")
    values = {name: numbers[NUMBERS.index(name)] for name in ("algbw_bytes", "busbw_factor", "algbw_gbps",
                                                              "busbw_gbps")}
    values["avg"] = stats["avg"]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for name, expected, bad in relations.bandwidth_violations(values):
            hit = np.flatnonzero(bad)
            if len(hit):
                row = int(hit[0])
                refuse_row(decoded.source, row,
                           f"{name} {values[name][row]:.6g} GB/s disagrees with its definition "
                           f"({expected[row]:.6g} GB/s from algbw_bytes, the avg latency and busbw_factor)")

"""One JSONL file's results as columns (a ``FilePart``): the unit the reader decodes, caches and merges.

A part holds every result row of one file with all latency statistics, before any selection, so that one
cached part serves every gate tool: the file's runs (report fields of each run line, its end status and
the first result's time), the file's distinct configurations (``keys.ConfigKey`` values, JSON), and per
row: the owning run (an index into the part's runs), the configuration (an index into the part's
configurations), requested size, bandwidth inputs, latency statistics and check state. Arrays are kept
as raw little-endian bytes so that a part serialises to msgpack as it is (``index.py``).

Results attach to the run line with the same ``run_id`` in the file, else to the last run line seen (as
``records.read_runs`` attaches them); results before any run line get a run of their own with no fields.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from microbench.errors import clean
from microbench.results import keys
from microbench.results.scan import RAW_JSON_FIELDS, RUN_FIELDS, Decoded, raw_present

#: every latency statistic a part keeps (us)
PART_STATS = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")
NUMBERS = ("algbw_bytes", "busbw_factor", "algbw_gbps", "busbw_gbps", "skew")  #: skew: stragglers.skew
_raw_key = attrgetter(*keys.RAW_FIELDS)
_GET = {name: attrgetter(name) for name in (*NUMBERS, *PART_STATS) if name != "skew"}
_GET["skew"] = lambda rec: rec.stragglers.skew if rec.stragglers is not None else None
_GET_LATENCY = attrgetter("latency_us")


class FilePart(msgspec.Struct, array_like=True):
    stamp: list  #: (size, mtime_ns, inode, device) of the file when it was read
    runs: list[dict]  #: per run: the run line's report fields
    ends: list[Any]  #: per run: {"status", "time_utc"} of its end line, or None
    result_times: list[Any]  #: per run: the first result's time_utc, or None
    configs: bytes  #: JSON list of ConfigKey values (lists), the file's distinct configurations
    owner: bytes  #: int32 per row: index into runs
    config: bytes  #: int32 per row: index into configs
    requested: bytes  #: int64 per row, -1 when the record has none
    numbers: bytes  #: float64, len(NUMBERS) x rows
    latency: bytes  #: float64, len(PART_STATS) x rows, NaN when absent
    checks: list[Any]  #: distinct check values
    check: bytes  #: int16 per row: index into checks
    extras: dict[int, dict]  #: row -> pairs fields (matrix, labels, outliers, ...)
    bad_lines: list[int]  #: line numbers of lines that are not JSON (skipped)
    foreign: int  #: JSON lines that are no microbench record (skipped)

    @property
    def rows(self) -> int:
        return len(self.owner) // 4

    def column(self, name: str) -> np.ndarray:
        """A per-row column: owner, config, requested, check, a NUMBERS name or a latency statistic."""
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
        runs, ends, times, results, owners = _attach(decoded.records)
        configs, codes = self._configs(results)
        latencies = list(map(_GET_LATENCY, results))
        if None in latencies:
            latencies = [lat if lat is not None else _EMPTY for lat in latencies]
        checks: dict = {}
        return FilePart(
            stamp=stamp, runs=runs, ends=ends, result_times=times,
            configs=msgspec.json.encode([list(k.values) for k in configs]),
            owner=np.array(owners, dtype="<i4").tobytes(), config=np.array(codes, dtype="<i4").tobytes(),
            requested=np.array([-1 if r.requested_bytes is None else r.requested_bytes for r in results],
                               dtype="<i8").tobytes(),
            numbers=np.array([list(map(_GET[n], results)) for n in NUMBERS], dtype="<f8").tobytes(),
            latency=np.array([list(map(_GET[s], latencies)) for s in PART_STATS], dtype="<f8").tobytes(),
            check=np.array([checks.setdefault(_check_value(r.check), len(checks)) for r in results],
                           dtype="<i2").tobytes(),
            checks=list(checks),
            extras={row: _pairs_fields(r) for row, r in enumerate(results)
                    if len(r.matrix) or len(r.outliers) or raw_present(r.overlap)},
            bad_lines=decoded.bad_lines, foreign=decoded.foreign)

    def _configs(self, results: list) -> tuple[list[keys.ConfigKey], list[int]]:
        """The file's distinct configurations and each row's index into them."""
        try:
            raws = list(map(_raw_key, results))
            local: dict[tuple, int] = {}
            codes = [local.setdefault(raw, len(local)) for raw in raws]
        except TypeError:  # a list or object in a key field: compare it as JSON text
            raws = [tuple(keys._hashable(v) for v in raw) for raw in map(_raw_key, results)]
            local = {}
            codes = [local.setdefault(raw, len(local)) for raw in raws]
        configs = []
        for raw in local:
            key = self.config_of.get(raw)
            if key is None:
                key = self.config_of[raw] = keys.config_from_raw(tuple(clean(v) for v in raw))
            configs.append(key)
        return configs, codes


_EMPTY = type("NoLatency", (), dict.fromkeys(PART_STATS))()  #: for a result whose latency_us is null


def _attach(records: list) -> tuple[list[dict], list, list, list, list[int]]:
    """(runs, ends, first result times, result records, owning run of each result) of one file."""
    runs: list[dict] = []
    ends: list = []
    times: list = []
    by_id: dict = {}
    current = None
    results, owners = [], []

    def new_run(meta: dict) -> int:
        runs.append(meta)
        ends.append(None)
        times.append(None)
        return len(runs) - 1

    for rec in records:
        kind = rec.type
        if kind == "result":
            owner = current if rec.run_id is None else by_id.get(rec.run_id, current)
            if owner is None:
                owner = current = new_run({})
            results.append(rec)
            owners.append(owner)
            if times[owner] is None:
                times[owner] = rec.time_utc
        elif kind == "run":
            current = new_run(clean({name: getattr(rec, name) for name in RUN_FIELDS
                                      if getattr(rec, name) is not None}))  # no control characters to print
            if rec.run_id is not None:
                by_id[rec.run_id] = current
        else:  # end
            owner = current if rec.run_id is None else by_id.get(rec.run_id, current)
            if owner is not None:
                ends[owner] = clean({"status": rec.status, "time_utc": rec.time_utc})
    return runs, ends, times, results, owners


def _check_value(value):
    return clean(value if value is None or isinstance(value, str) else str(value))


def _pairs_fields(rec) -> dict:
    """The pairs-test fields of a record, decoded (only the few records that have them)."""
    out = {name: msgspec.json.decode(getattr(rec, name)) for name in RAW_JSON_FIELDS
           if raw_present(getattr(rec, name))}
    for name in ("matrix_unit", "unit"):
        if getattr(rec, name) is not None:
            out[name] = getattr(rec, name)
    if isinstance(out.get("overlap"), dict):  # of a non-blocking record's block, only the figures read
        out["overlap"] = {"overlap_pct": out["overlap"].get("overlap_pct")}
    return out

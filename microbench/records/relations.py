"""What the record model's types cannot say: the relations between figures that their definitions imply, checked
on one record (``problems``) and on whole columns (``relation_violations``, ``bandwidth_violations``: numbers or
numpy arrays alike, so the row reader and the columnar reader run the same code); and ``make``, which builds a
record of the model that has them (what every builder calls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from microbench.records.model import (CLOCK_FLOOR_US, LATENCY_STATS, MAX_BANDWIDTH_GBPS, REL_TOL, LatencyStats,
                                      ModelError, Record, ResultRecord)


@dataclass(frozen=True)
class Relation:
    """``low <= high`` (within ``REL_TOL``) wherever a record has both figures; ``why`` says what makes it so."""

    low: str
    high: str
    why: str


#: What the definitions of the latency statistics imply (measure/stats.py): every per-rank mean lies between
#: the fastest and the slowest sample, and percentiles of one set of samples are ordered and clamped to it.
RELATIONS: tuple[Relation, ...] = (
    Relation("fastest", "p10", "a percentile of the samples is at least the fastest sample"),
    Relation("p10", "p50", "percentiles of one set of samples are ordered"),
    Relation("p50", "p90", "percentiles of one set of samples are ordered"),
    Relation("p90", "p99", "percentiles of one set of samples are ordered"),
    Relation("p99", "slowest", "a percentile of the samples is at most the slowest sample"),
    Relation("fastest", "min", "no rank's mean is below the fastest sample"),
    Relation("min", "avg", "the mean across ranks is at least the smallest rank mean"),
    Relation("avg", "max", "the mean across ranks is at most the largest rank mean"),
    Relation("max", "slowest", "no rank's mean is above the slowest sample"),
)
#: Pairs records' statistics are over the pairs (each pair's p50): all of one set of values.
PAIRS_RELATIONS: tuple[Relation, ...] = tuple(
    Relation(low, high, "statistics of one set of pair values are ordered")
    for low, high in (("min", "p10"), ("p10", "p50"), ("p50", "p90"), ("p90", "p99"), ("p99", "max"),
                      ("min", "avg"), ("avg", "max")))


def relation_violations(values: dict, relations: tuple[Relation, ...] = RELATIONS):
    """For each relation, a boolean mask (or bool) of where ``values[low] > values[high]`` beyond ``REL_TOL``.

    ``values`` maps a statistic to a number or a numpy array (NaN or absent: not judged), so the same code
    checks one record and a column of a million."""
    for rel in relations:
        low, high = values.get(rel.low), values.get(rel.high)
        if low is None or high is None:
            continue
        yield rel, low > high * (1 + REL_TOL)


def bandwidth_violations(values: dict):
    """Where a stored bandwidth disagrees with its definition: algbw = algbw_bytes / avg latency (GB/s with
    1 GB = 1e9 B and latency in us) and busbw = algbw x busbw_factor (``values`` as for
    ``relation_violations``: numbers or arrays, NaN not judged). Yields (field, what it should be, mask)."""
    s, avg, factor = values.get("algbw_bytes"), values.get("avg"), values.get("busbw_factor")
    algbw, busbw = values.get("algbw_gbps"), values.get("busbw_gbps")
    if s is not None and avg is not None and algbw is not None:
        expected = s / avg / 1e3
        yield "algbw_gbps", expected, abs(algbw - expected) > REL_TOL * expected + 1e-12
    if algbw is not None and factor is not None and busbw is not None:
        expected = algbw * factor
        yield "busbw_gbps", expected, abs(busbw - expected) > REL_TOL * expected + 1e-12


def _present(value: Any) -> bool:
    return value is not UNSET


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def problems(record: Record, complete: bool = False) -> str | None:
    """What makes a decoded record impossible (None when nothing): a relation the statistics' definitions
    imply is broken, a stored bandwidth disagrees with its size and time, a pairs matrix is not square over
    its labels. With ``complete`` (what a builder makes): also one of microbench's own records lacking a field
    it always writes (readers take records written before a field existed)."""
    imported = _present(getattr(record, "source", UNSET))
    if complete and not imported:
        missing = [n for n in record.own_required if getattr(record, n) is UNSET]
        if isinstance(record, ResultRecord):
            extra = record.pairs_required if record.benchmark == "pairs" else record.harness_required
            missing += [n for n in extra if getattr(record, n) is UNSET]
            missing += [f"latency_us.{s}" for s in LatencyStats.own_required
                        if getattr(record.latency_us, s) is UNSET]
        if missing:
            return f"a {type(record).__name__} of microbench's own without {', '.join(missing)}"
    if isinstance(record, ResultRecord):
        return _result_problems(record)
    return None


def _result_problems(rec: ResultRecord) -> str | None:
    lat = rec.latency_us
    stats = {s: _number(getattr(lat, s)) for s in LATENCY_STATS if _present(getattr(lat, s))}
    if not stats:
        return "latency_us: no statistic"
    relations = PAIRS_RELATIONS if rec.benchmark == "pairs" else RELATIONS
    for rel, bad in relation_violations(stats, relations):
        if bad:
            return (f"latency_us.{rel.low} ({stats[rel.low]:.6g} us) is above latency_us.{rel.high} "
                    f"({stats[rel.high]:.6g} us): impossible, {rel.why}")
    values = {"avg": stats.get("avg"), "algbw_gbps": rec.algbw_gbps, "busbw_gbps": rec.busbw_gbps,
              "algbw_bytes": rec.algbw_bytes if _present(rec.algbw_bytes) else None,
              "busbw_factor": rec.busbw_factor if _present(rec.busbw_factor) else None}
    for name, expected, bad in bandwidth_violations(values):
        if bad:
            return (f"{name} {values[name]:.6g} GB/s disagrees with its definition ({expected:.6g} GB/s from "
                    "algbw_bytes, the avg latency and busbw_factor)")
    if rec.benchmark == "pairs" or _present(rec.matrix):
        return pairs_problems(rec)
    return None


def _field(rec: Any, name: str) -> Any:
    """A field of a record or of a reader's view of one; None where it is absent (UNSET or None)."""
    value = getattr(rec, name, None)
    return None if value is UNSET else value


def pairs_problems(rec: Any) -> str | None:
    """A pairs record (or a view of one) whose matrix is not n x n over its n labels and participant ranks,
    whose diagonal holds a value (a participant has no link to itself), or with more participants than ranks."""
    matrix, labels = _field(rec, "matrix"), _field(rec, "labels")
    if matrix is None or labels is None:
        return None if matrix is None else "matrix without labels"
    n = len(labels)
    if len(matrix) != n or any(len(row) != n for row in matrix):
        return f"matrix: not {n} x {n} (one row and one column per label)"
    participants = _field(rec, "participant_ranks")
    if participants is not None and len(participants) != n:
        return f"participant_ranks: {len(participants)} ranks for {n} labels"
    if any(matrix[i][i] is not None for i in range(n)):
        return "matrix: a value on the diagonal (a participant's link to itself)"
    repeats = _field(rec, "repeats")  # issue 39: each pass's matrix, the same shape
    if repeats is not None and any(len(m) != n or any(len(row) != n for row in m) for m in repeats):
        return f"repeats: a pass's matrix is not {n} x {n}"
    unit = _field(rec, "matrix_unit")
    cells = [v for row in matrix for v in row if v is not None]
    if unit == "GB/s" and any(v > MAX_BANDWIDTH_GBPS for v in cells):
        return f"matrix: a bandwidth above {MAX_BANDWIDTH_GBPS:g} GB/s"
    if unit == "us" and any(v < CLOCK_FLOOR_US for v in cells):
        return f"matrix: a latency below the clock floor ({CLOCK_FLOOR_US} us)"
    ranks = _field(rec, "ranks")
    if ranks is not None and n > ranks:
        return f"labels: {n} participants in a run of {ranks} ranks"
    return None


def make(kind: type[Record], **fields: Any) -> dict:
    """A record of type ``kind`` from its fields, checked as a reader checks it (types, ranges, relations),
    as the dictionary the writer encodes (absent fields left out). A builder that breaks the model, or
    passes a field the model does not declare (which would be dropped), is a bug in microbench:
    ``ModelError`` (an internal error), never a line written."""
    try:
        record = msgspec.convert(fields, kind)
    except msgspec.ValidationError as exc:
        raise ModelError(kind.__name__, str(exc)) from None
    out = msgspec.to_builtins(record)
    if not _finite_everywhere(out):
        raise ModelError(kind.__name__, "a value that is not a finite number (NaN or infinite)")
    dropped = _dropped(fields, out)
    if dropped:
        raise ModelError(kind.__name__, f"fields the model does not declare: {', '.join(dropped[:5])}")
    problem = problems(record, complete=True)
    if problem:
        raise ModelError(kind.__name__, problem)
    return _utf8(out)


def _utf8(value: Any) -> Any:
    """``value`` with every string that holds lone surrogates (bytes the OS gave that are not UTF-8, as in a file
    name from a Latin-1 system) written with those bytes as ``\\xNN`` escapes: JSON cannot carry them, and a
    record that holds one could never be read back."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_utf8(k): _utf8(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_utf8(v) for v in value]
    return value


def _finite_everywhere(value: Any) -> bool:
    """No NaN or infinity anywhere in a record (JSON has neither; a reader could never read it back)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_everywhere(v) for v in value)
    return True


def _dropped(given: Any, kept: Any, where: str = "") -> list[str]:
    """Keys of ``given`` (nested dictionaries) that ``kept`` lacks: fields the model would drop."""
    if not isinstance(given, dict) or not isinstance(kept, dict):
        if isinstance(given, list) and isinstance(kept, list):
            return [d for g, k in zip(given, kept) for d in _dropped(g, k, f"{where}[]")]
        return []
    out = [f"{where}{key}" for key in given if key not in kept and key != "type"]
    for key, value in given.items():
        if key in kept:
            out += _dropped(value, kept[key], f"{where}{key}.")
    return out

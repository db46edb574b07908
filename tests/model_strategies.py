"""Hypothesis strategies generated from the record model (``microbench.records.model``): any record type, as JSON
values that satisfy every declared type and range, so that the property tests follow the model as it grows.

``records(kind)`` draws a record of that type with every required field and any of the optional ones;
``consistent(result)`` repairs a drawn result so that its figures also satisfy the relations the model checks
beyond types (ordered statistics, bandwidths that follow from size and time, a square pairs matrix).
"""

from __future__ import annotations

import datetime as dt
import math

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

from microbench.records import model, relations

_SCALAR = (st.none() | st.booleans() | st.integers(-(10 ** 6), 10 ** 6)
           | st.floats(allow_nan=False, allow_infinity=False, width=32) | st.text(max_size=8))
ANY_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_TIME = st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9999, 1, 1)).map(
    lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"))


def strategy(info: mi.Type, depth: int = 0) -> st.SearchStrategy:
    """Values of one msgspec type (``msgspec.inspect``), within its declared ranges and lengths."""
    if isinstance(info, mi.Metadata):
        return strategy(info.type, depth)
    if isinstance(info, mi.IntType):
        low = info.ge if info.ge is not None else (info.gt + 1 if info.gt is not None else -(10 ** 9))
        high = info.le if info.le is not None else (info.lt - 1 if info.lt is not None else 10 ** 9)
        return st.integers(low, min(high, low + 10 ** 12))
    if isinstance(info, mi.FloatType):
        low = info.ge if info.ge is not None else info.gt
        high = info.le if info.le is not None else info.lt
        return st.floats(min_value=low if low is not None else -1e12, max_value=high if high is not None else 1e12,
                         exclude_min=info.ge is None and info.gt is not None, allow_nan=False, allow_infinity=False)
    if isinstance(info, mi.StrType):
        if info.pattern:
            return _TIME if "T" in info.pattern else st.from_regex(info.pattern, fullmatch=True)
        return st.text(min_size=info.min_length or 0, max_size=max(info.min_length or 0, 12))
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.AnyType):
        return ANY_JSON
    if isinstance(info, mi.UnionType):
        return st.one_of([strategy(t, depth) for t in info.types])
    if isinstance(info, mi.ListType):
        low = info.min_length or 0
        high = info.max_length if info.max_length is not None else low + (3 if depth < 3 else 0)
        return st.lists(strategy(info.item_type, depth + 1), min_size=low, max_size=high)
    if isinstance(info, mi.DictType):
        high = min(info.max_length if info.max_length is not None else 3, 3)
        return st.dictionaries(st.text(max_size=6), strategy(info.value_type, depth + 1), max_size=high)
    if isinstance(info, mi.StructType):
        return struct_strategy(info, depth)
    raise TypeError(f"no strategy for {info!r}")


def struct_strategy(info: mi.StructType, depth: int = 0) -> st.SearchStrategy:
    required = {f.encode_name: strategy(f.type, depth + 1) for f in info.fields if f.required}
    optional = {f.encode_name: strategy(f.type, depth + 1) for f in info.fields if not f.required}
    tag = {info.tag_field: st.just(info.tag)} if info.tag_field else {}
    return st.fixed_dictionaries({**tag, **required}, optional=optional if depth < 4 else {})


def records(kind: type[model.Record]) -> st.SearchStrategy:
    """Records of ``kind`` as JSON values: every type and range the model declares holds."""
    return struct_strategy(mi.type_info(kind))


def consistent(result: dict) -> dict:
    """A drawn result repaired to satisfy the model's relations: statistics ordered as their definitions
    require, bandwidths computed from size and time, no pairs matrix (a pairs record is not drawn here)."""
    out = {k: v for k, v in result.items() if k not in (
        "matrix", "labels", "participant_ranks", "outliers", "node_outliers", "outlier_rule", "node_outlier_rule",
        "unit", "matrix_unit", "metric")}
    out["benchmark"] = out["benchmark"] if out["benchmark"] != "pairs" else "allreduce"
    lat = dict(out["latency_us"])
    values = sorted(float(lat[s]) for s in model.LATENCY_STATS if s in lat) or [1.0]
    low, mid, high = values[0], values[len(values) // 2], values[-1]
    ordered = {"fastest": low, "p10": low, "p50": mid, "p90": mid, "p99": high, "slowest": high,
               "min": mid, "avg": mid, "max": mid}
    lat.update({stat: value for stat, value in ordered.items() if stat in lat or stat == "avg"})
    out["latency_us"] = lat
    s_bytes = float(out.get("algbw_bytes") or out["size_bytes"] or 0)
    factor = float(out.get("busbw_factor") or 1.0)
    if s_bytes / lat["avg"] / 1e3 * max(factor, 1.0) > model.MAX_BANDWIDTH_GBPS:
        s_bytes, factor = 8.0, 1.0
    algbw = s_bytes / lat["avg"] / 1e3
    out.update(algbw_bytes=s_bytes, busbw_factor=factor, algbw_gbps=algbw, busbw_gbps=algbw * factor)
    return out


def is_model_valid(record: dict) -> bool:
    """Whether a JSON value decodes as its type and passes the relations (the readers' own test)."""
    try:
        decoded = msgspec.json.decode(msgspec.json.encode(record), type=model.AnyRecord)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    return relations.problems(decoded) is None and all(
        not isinstance(v, float) or math.isfinite(v) for v in record.values())

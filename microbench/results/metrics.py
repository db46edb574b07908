"""The judged numbers: one table of ``Metric`` entries, the way ``benchmarks/table.py`` is a table of benchmarks.

Each entry says, once, everything any verb needs about a number read from result records: its unit and
direction, the statistics it can be read at, the record fields it is computed from (``columns``: dotted paths,
which the columnar reader decodes and keeps for every row), how it is computed from them (``compute``: the same
function on a column of a million rows and on one record), its spec key(s) and what a limit on it must be, and
how reports name it. ``check``, ``compare``, ``history``, the report and the ReFrame references iterate over
this table; nothing else branches on a metric's name. docs/architecture.md walks through adding one.

- latency (us): ``latency_us[stat]``. p10/p50/p90/p99 are percentiles of all per-iteration samples of all
  timing ranks; avg/min/max are the mean/minimum/maximum across ranks of per-rank means (OMB -f);
  fastest/slowest are the single fastest and slowest samples.
- algbw (GB/s, 1 GB = 1e9 B) = S / latency[stat], busbw = algbw x factor, with S (``algbw_bytes``) and the
  factor (``busbw_factor``) as the record states them (nccl-tests' definitions). With stat ``avg`` this
  is exactly the recorded ``algbw_gbps``/``busbw_gbps``.
- first_call (us, specs only): ``first_call_us.max``, the first call on fresh buffers of the slowest rank.
- overlap (%, specs only): OMB's overlap of a non-blocking record, ``overlap.overlap_pct.omb[stat]``
  (avg, min or max across ranks; p50: the formula on medians).
- outliers (specs only): what a pairwise-link-test record (benchmark ``pairs``) flags: its outlier links
  plus its outlier nodes, recomputed by the reader from the record's matrix with the record's rule (a
  record's own lists are never trusted); no statistic applies.
- skew (x, specs only): ``stragglers.skew``, the slowest rank's mean latency over the fastest rank's
  (microbench.run.diagnostics.stragglers); no statistic applies.
- peak_share (specs only): ``peak.share``, the recorded busbw over the peak of the path the result's data
  crossed (microbench.cluster.path_peak); absent where no peak is known or NCCL reduced inside a switch.

For ``pairs`` records the statistics are over the pairs, each pair's value being the p50 of its
iterations: ``max`` is the slowest link (for the bandwidth matrix, the highest per-message time).
Default stat: p50 for latency (robust to tails), avg for bandwidth (the recorded value, as nccl-tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from microbench.errors import UsageError

LATENCY_STATS = ("p50", "avg", "min", "max", "p10", "p90", "p99", "fastest", "slowest")
OUTLIERS = "outliers"  #: a spec-only metric: outlier cells and nodes of a pairs record (recomputed)
SKEW = "skew"  #: a spec-only metric: slowest over fastest per-rank mean latency
OVERLAP = "overlap"  #: a spec-only metric: OMB's overlap (%) of a non-blocking record
PEAK_SHARE = "peak_share"  #: a spec-only metric: busbw / the peak of the path the data crossed (peak.share)
OUTLIER_COUNT = "outliers"  #: the column the reader fills with each pairs record's recomputed outlier count
OVERLAP_STAT_PATH = {"avg": "overlap.overlap_pct.omb.avg", "min": "overlap.overlap_pct.omb.min",
                     "max": "overlap.overlap_pct.omb.max", "p50": "overlap.overlap_pct.omb.p50_based"}

Numbers = Mapping[str, np.ndarray]  #: record path -> float64 per row (NaN where a record lacks it)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    """A number a float can hold (an integer of 400 digits is not)."""
    if not _is_number(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


@dataclass(frozen=True)
class Metric:
    """One judged number (see the module's text for what each is)."""

    name: str
    unit: str
    higher_is_better: bool
    compute: Callable[[Numbers, "str | None"], np.ndarray]  #: (columns, stat) -> values (NaN: not in the record)
    columns: Callable[["str | None"], tuple[str, ...]]  #: the record paths ``compute`` reads at a stat
    reads: Callable[["str | None"], str]  #: what a record lacking it lacks, for messages
    stats: tuple[str, ...] = ()  #: the statistics it can be read at (empty: none applies)
    default_stat: str | None = None
    follow: bool = False  #: compare and history can follow it
    spec_keys: dict[str, str] = field(default_factory=dict)  #: spec key -> bound ("max" or "min")
    limit_problem: Callable[[object, tuple[str, ...]], "str | None"] | None = None  #: (limit, benchmarks) -> why not
    what: Callable[["str | None", str], str] | None = None  #: (stat, source) -> how reports name it

    def describe(self, stat: str | None, source: str = "") -> str:
        return self.what(stat, source) if self.what else f"{self.name} (from {stat}{source})"


def _positive_limit(limit: object, _benchmarks: tuple[str, ...]) -> str | None:
    if not _finite(limit) or limit <= 0:
        return f"must be a positive number (got {str(limit)[:40]})"
    return None


def _latency_path(stat: str | None) -> str:
    return f"latency_us.{stat}"


def _bandwidth(factor: str | None):
    """algbw (factor None) or busbw from S and a latency statistic; the recorded figure at avg where the
    latency is missing (an imported record with only bandwidths)."""
    def compute(numbers: Numbers, stat: str | None) -> np.ndarray:
        latency = numbers[_latency_path(stat)]
        scale = numbers[factor] if factor else 1.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            computed = numbers["algbw_bytes"] / (latency * 1e-6) / 1e9 * scale
        usable = (latency > 0) & np.isfinite(computed)
        if stat == "avg":
            return np.where(usable, computed, numbers["busbw_gbps" if factor else "algbw_gbps"])
        return np.where(usable, computed, np.nan)

    def columns(stat: str | None) -> tuple[str, ...]:
        return (_latency_path(stat), "algbw_bytes", "algbw_gbps", "busbw_gbps", *((factor,) if factor else ()))
    return compute, columns


def _outlier_limit(limit: object, benchmarks: tuple[str, ...]) -> str | None:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0 or not _finite(limit):
        return f"must be a whole number of at least 0 (got {str(limit)[:40]})"
    if benchmarks != ("pairs",):
        return 'applies to benchmark = "pairs" alone (the pairwise link test)'
    return None


def _ratio_limit(limit: object, _benchmarks: tuple[str, ...]) -> str | None:
    """A limit on a ratio of a larger figure to a smaller one (at least 1)."""
    if not _finite(limit) or limit < 1:
        return f"must be a number of at least 1, a larger figure over a smaller one (got {str(limit)[:40]})"
    return None


def _share_limit(limit: object, _benchmarks: tuple[str, ...]) -> str | None:
    """A limit on a share of a peak: above 0, at most 1 (100 % of the path's peak)."""
    if not _finite(limit) or not 0 < limit <= 1:
        return f"must be a share above 0 and at most 1, e.g. 0.8 for 80 % of the path's peak (got {str(limit)[:40]})"
    return None


def _column(path: str):
    return lambda numbers, _stat: numbers[path]


_BUSBW = _bandwidth("busbw_factor")
_ALGBW = _bandwidth(None)

#: Every judged number, by name.
TABLE: dict[str, Metric] = {m.name: m for m in (
    Metric("latency", "us", False, compute=lambda n, stat: n[_latency_path(stat)],
           columns=lambda stat: (_latency_path(stat),), reads=_latency_path, stats=LATENCY_STATS,
           default_stat="p50", follow=True, spec_keys={"max_latency_us": "max"}, limit_problem=_positive_limit,
           what=lambda stat, _source: f"{stat} latency"),
    Metric("busbw", "GB/s", True, compute=_BUSBW[0], columns=_BUSBW[1],
           reads=lambda stat: f"busbw from {stat}", stats=LATENCY_STATS, default_stat="avg", follow=True,
           spec_keys={"min_busbw_gbps": "min"}, limit_problem=_positive_limit),
    Metric("algbw", "GB/s", True, compute=_ALGBW[0], columns=_ALGBW[1],
           reads=lambda stat: f"algbw from {stat}", stats=LATENCY_STATS, default_stat="avg", follow=True,
           spec_keys={"min_algbw_gbps": "min"}, limit_problem=_positive_limit),
    Metric("first_call", "us", False, compute=_column("first_call_us.max"),
           columns=lambda _stat: ("first_call_us.max",), reads=lambda _stat: "first_call_us.max",
           spec_keys={"max_first_call_us": "max"}, limit_problem=_positive_limit,
           what=lambda _stat, _source: "first call (slowest rank)"),
    Metric(OVERLAP, "%", True, compute=lambda n, stat: n[OVERLAP_STAT_PATH[stat]],
           columns=lambda stat: (OVERLAP_STAT_PATH[stat],), reads=lambda stat: OVERLAP_STAT_PATH[stat],
           stats=tuple(OVERLAP_STAT_PATH), default_stat="avg", spec_keys={"min_overlap_pct": "min"},
           limit_problem=_positive_limit, what=lambda stat, _source: f"{stat} overlap"),
    Metric(OUTLIERS, "flagged", False, compute=_column(OUTLIER_COUNT), columns=lambda _stat: (OUTLIER_COUNT,),
           reads=lambda _stat: "a pairs matrix", spec_keys={"max_outliers": "max"}, limit_problem=_outlier_limit,
           what=lambda _stat, _source: "outliers"),
    Metric(SKEW, "x", False, compute=_column("stragglers.skew"), columns=lambda _stat: ("stragglers.skew",),
           reads=lambda _stat: "stragglers.skew", spec_keys={"max_rank_skew": "max"}, limit_problem=_ratio_limit,
           what=lambda _stat, _source: "rank skew (slowest / fastest rank mean)"),
    # issue 43: busbw as a share of the peak of the path the result's data crossed (records' peak.share)
    Metric(PEAK_SHARE, "share", True, compute=_column("peak.share"), columns=lambda _stat: ("peak.share",),
           reads=lambda _stat: "peak.share (the path's peak: microbench run records it where the links are known)",
           spec_keys={"min_peak_share": "min"}, limit_problem=_share_limit,
           what=lambda _stat, _source: "busbw share of the path's peak"),
)}

METRICS = tuple(name for name, m in TABLE.items() if m.follow)  #: what compare and history can follow
UNITS = {name: m.unit for name, m in TABLE.items()}
#: spec key -> (metric, bound)
SPEC_KEYS = {key: (m.name, bound) for m in TABLE.values() for key, bound in m.spec_keys.items()}
# issue 44: what the verbs say beside a judged number, read through the same columns (never judged itself)
LAUNCH_BOUND = "launch.bound"  #: 1 where the host's launch rate, not the collective, set a result's samples
MARK_COLUMNS = (LAUNCH_BOUND,)
#: the metrics a launch-bound result misstates (the others are first calls, overlap, pairs, skew)
LAUNCH_MARKED = ("latency", "busbw", "algbw")
LAUNCH_BOUND_ADVICE_SHORT = ("launch-bound (the host's launch rate, not the collective, set the samples: "
                             "--cuda-graph times the device)")


def launch_bound(numbers: Numbers) -> np.ndarray:
    """Per row: the result was marked launch-bound (``launch.bound``); False where a record has no such mark."""
    return np.asarray(numbers[LAUNCH_BOUND]) == 1


#: every record path some metric reads beside the latency statistics, and the marks (the columnar reader keeps
#: each as a column)
NUMBER_COLUMNS = tuple(dict.fromkeys(
    [path for m in TABLE.values() for stat in (m.stats or (None,)) for path in m.columns(stat)
     if not path.startswith("latency_us.")] + list(MARK_COLUMNS)))


def latency_stats_read(name: str, stat: str | None) -> tuple[str, ...]:
    """The latency statistics a metric reads at ``stat`` (what a reader must load for it)."""
    prefix = "latency_us."
    return tuple(path[len(prefix):] for path in TABLE[name].columns(stat) if path.startswith(prefix))


def metric(name: str) -> Metric:
    """The table's entry for ``name``."""
    found = TABLE.get(name)
    if found is None:
        raise UsageError(f"unknown metric {name!r}: choose from {', '.join(TABLE)}")
    return found


def check_metric(name: str) -> str:
    """``name`` if compare and history can follow it (a UsageError otherwise)."""
    if name not in METRICS:
        raise UsageError(f"unknown metric {name!r}: choose from {', '.join(METRICS)}")
    return name


def check_stat(stat: str) -> str:
    if stat not in LATENCY_STATS:
        raise UsageError(f"unknown stat {stat!r}: choose from {', '.join(LATENCY_STATS)}")
    return stat


def default_stat(name: str) -> str | None:
    """The statistic a metric is read at unless a stat is named: p50 for latency, avg for bandwidth and
    overlap, none for a metric with no statistics."""
    return TABLE[name].default_stat


def stat_for(name: str, asked: str | None) -> str | None:
    """The statistic a metric is read at when ``asked`` (None: its default); None where none applies."""
    m = TABLE[name]
    if not m.stats:
        return None
    return asked if asked in m.stats else m.default_stat


def threshold_what(name: str, stat: str | None, source: str = "") -> str:
    """How reports name a judged quantity: ``p50 latency``, ``outliers``, ``busbw (from avg<source>)``."""
    return TABLE[name].describe(stat, source)


def higher_is_better(name: str) -> bool:
    return TABLE[name].higher_is_better


def values(numbers: Numbers, name: str, stat: str | None) -> np.ndarray:
    """The metric for every row of ``numbers`` (record path -> column), NaN where a record lacks it."""
    return np.asarray(TABLE[name].compute(numbers, stat), dtype=np.float64)


def record_numbers(result: dict, paths) -> dict[str, np.ndarray]:
    """The numbers at ``paths`` of one record dictionary, as one-row columns (NaN where absent)."""
    out = {}
    for path in paths:
        value: object = result
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if path == OUTLIER_COUNT:
            found = result.get("outliers")
            value = len(found) + len(result.get("node_outliers") or ()) if isinstance(found, list) else None
        out[path] = np.array([float(value) if _is_number(value) else np.nan])
    return out


def metric_value(result: dict, name: str, stat: str | None) -> float | None:
    """The metric of one result record (a dictionary as ``records.read_runs`` gives it); None when the record
    lacks it. The same ``compute`` as the columnar table's, on a one-row column."""
    m = TABLE[name]
    value = float(m.compute(record_numbers(result, m.columns(stat)), stat)[0])
    return None if math.isnan(value) else value


def label(name: str, stat: str) -> str:
    """Short column label such as ``p50 latency (us)`` or ``busbw from avg (GB/s)``."""
    if name == "latency":
        return f"{stat} latency ({UNITS[name]})"
    return f"{name} from {stat} ({UNITS[name]})"


_STAT_TEXT = {
    "p10": "p10 of all samples", "p50": "p50 of all samples", "p90": "p90 of all samples",
    "p99": "p99 of all samples", "avg": "mean across ranks of per-rank mean latency",
    "min": "minimum across ranks of per-rank mean latency", "max": "maximum across ranks of per-rank mean latency",
    "fastest": "fastest single sample", "slowest": "slowest single sample",
}


def explain(name: str, stat: str) -> str:
    """One line saying how the metric is computed, for report headers."""
    if name == "latency":
        return f"latency (us) = {stat} ({_STAT_TEXT[stat]})"
    factor = " x busbw factor" if name == "busbw" else ""
    return f"{name} (GB/s) = S{factor} / {stat} latency ({_STAT_TEXT[stat]})"

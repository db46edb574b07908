"""The configuration key: which record fields make two results of different runs comparable (defined here only;
within one run the soak summary groups by the fields that can differ there: benchmark, metric, size, cache).

Two results measure the same thing when they agree on the benchmark, the message size, the number of
ranks, the backend, and every option that changes what is timed: element type and reduction op,
in-place, the timed-loop implementation and its call path (the Python loop through the C call shim or
through mpi4py), cache mode, synchronisation, bw window, root, the huge-page
policy (it moves large-message results by up to 2x), whether data was checked (checked iterations are
timed in isolation), and, where a record has them, torch_backend, device and buffer, and for the pairwise
link test (benchmark ``pairs``) its ``metric`` (latency or bandwidth matrix) and ``schedule`` (round-robin
pairs measured at once, or serial: one pair at a time, without interference), and for MPI results the MPI
function called (``mpi_call``: MPI_Reduce_scatter_block and MPI_Reduce_scatter differ by 2.5x at 16 MiB on
Open MPI 5.0.11), and for all-to-all-v its split pattern (``splits``: uniform and skewed splits of one size are
different configurations).

Fields a record lacks count as None, so records written before a field existed still compare with
each other; ``call_path`` and ``mpi_call`` are the exceptions, derived for such records (``call_path`` from
``loop``: a Python loop then called mpi4py; ``mpi_call`` the primitive's default MPI function), so older
baselines keep matching new runs. The number of iterations, warmup and the run's time are *not* part of the key: they change
how well a configuration is measured, not what is measured.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, NamedTuple

#: Fields that identify a measured configuration, besides the options below.
BASE_FIELDS = ("benchmark", "size_bytes", "ranks", "backend")

#: Option fields that change what is measured, with the type a spec filter on them must have.
#: ``checked`` is derived: True when the record's ``check`` is not null.
OPTION_FIELDS: dict[str, type] = {
    "dtype": str,
    "op": str,
    "in_place": bool,
    "loop": str,
    "call_path": str,
    "cache": str,
    "sync": str,
    "window": int,
    "root": int,
    "huge_pages": str,
    "checked": bool,
    "torch_backend": str,
    "device": str,
    "buffer": str,
    "metric": str,
    "schedule": str,
    "mpi_call": str,
    "splits": str,  # issue 42: an all-to-all-v's split pattern (uniform, zipf:S, hot:K, file:NAME#DIGEST)
}

KEY_FIELDS = BASE_FIELDS + tuple(OPTION_FIELDS)

#: Record fields a configuration key is made from (``checked`` comes from ``check``).
RAW_FIELDS = tuple(n for n in KEY_FIELDS if n != "checked") + ("check",)
#: Key fields derived from other fields when a record lacks them (written before the field existed):
#: a reader must tell "absent" from null for these.
DERIVED_WHEN_ABSENT = ("call_path", "mpi_call")

#: Types of every key field (for validating spec filters).
FIELD_TYPES: dict[str, type] = {"benchmark": str, "size_bytes": int, "ranks": int, "backend": str, **OPTION_FIELDS}


class ConfigKey(NamedTuple):
    """One configuration: the values of ``KEY_FIELDS`` in order (hashable, sortable by size first)."""

    values: tuple

    def get(self, name: str) -> Any:
        return self.values[KEY_FIELDS.index(name)]

    @property
    def benchmark(self) -> str:
        return self.get("benchmark")

    @property
    def size_bytes(self) -> int:
        return self.get("size_bytes")

    def as_dict(self) -> dict:
        """Every key field with its value (None where the record had none)."""
        return dict(zip(KEY_FIELDS, self.values))

    def without_size(self) -> "ConfigKey":
        """The key of the size sweep this configuration belongs to (size set to None)."""
        vals = list(self.values)
        vals[KEY_FIELDS.index("size_bytes")] = None
        return ConfigKey(tuple(vals))

    def sort_key(self) -> tuple:
        """Small messages first, then benchmark, ranks, backend and options."""
        d = self.as_dict()
        rest = tuple((v is None, str(v)) for k, v in d.items() if k not in ("size_bytes", "benchmark", "ranks"))
        return (d["size_bytes"] or 0, d["benchmark"] or "", d["ranks"] or 0, rest)


def _hashable(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def field_value(result: dict, name: str) -> Any:
    """The value of one key field in a result record (``checked`` derived from ``check``)."""
    if name == "checked":
        return result.get("check") is not None
    if name == "call_path" and "call_path" not in result:
        return _call_path_before_the_field(result)
    if name == "mpi_call" and "mpi_call" not in result:
        return _mpi_call_before_the_field(result)
    return _hashable(result.get(name))


def _mpi_call_before_the_field(result: dict) -> str | None:
    """Records written before ``mpi_call`` existed: MPI results called their primitive's default function
    (``MPI_Reduce_scatter_block`` for reduce_scatter)."""
    from microbench.benchmarks.table import COLLECTIVES, MPI_CALLS

    coll = COLLECTIVES.get(result.get("benchmark") or "")
    if result.get("backend") != "mpi" or coll is None:
        return None
    return MPI_CALLS.get(coll.primitive)  # None for the non-blocking entries, as it was for those records


def _call_path_before_the_field(result: dict) -> str | None:
    """Records written before ``call_path`` existed: their loop implies it (``python`` then called mpi4py)."""
    loop = result.get("loop")
    if loop is None:
        return None
    if loop == "native":
        return "native"
    return "torch" if result.get("backend") == "torch" else "mpi4py"


def config_key(result: dict) -> ConfigKey:
    """The configuration a result record measured."""
    return ConfigKey(tuple(field_value(result, name) for name in KEY_FIELDS))


def config_from_raw(values: tuple) -> ConfigKey:
    """The configuration of a record given as the values of ``RAW_FIELDS`` in order; a field a reader
    found absent is ``msgspec.UNSET`` (or missing from the record dict), which matters for the fields of
    ``DERIVED_WHEN_ABSENT``."""
    record = {name: value for name, value in zip(RAW_FIELDS, values) if not _unset(value)}
    return config_key(record)


def _unset(value: Any) -> bool:
    return type(value).__name__ == "UnsetType"


def varying_options(keys: Iterable[ConfigKey]) -> list[str]:
    """Option fields (and backend/ranks) whose values differ among ``keys``: what a table must show."""
    keys = list(keys)
    names = ["ranks", "backend", *OPTION_FIELDS]
    return [n for n in names if len({k.get(n) for k in keys}) > 1]


_BOOL_WORDS = {"in_place": ("in-place", "out-of-place"), "checked": ("checked", "unchecked")}


def describe_options(key: ConfigKey, names: Iterable[str]) -> str:
    """``name=value`` for the named fields of ``key`` (``-`` when there are none)."""
    parts = []
    for name in names:
        value = key.get(name)
        if value is None:
            continue
        if isinstance(value, bool):
            parts.append(_BOOL_WORDS.get(name, (name, f"no-{name}"))[0 if value else 1])
        else:
            parts.append(f"{name}={value}")
    return " ".join(parts) or "-"


def common_options(keys: Iterable[ConfigKey]) -> str:
    """The option values every key shares (for a table's header line)."""
    keys = list(keys)
    if not keys:
        return "-"
    same = [n for n in OPTION_FIELDS if len({k.get(n) for k in keys}) == 1]
    return describe_options(keys[0], same)

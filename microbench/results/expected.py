"""What a platform is expected to reach: the reference table shipped as data (``expected_values.toml``, each
value with its public source), the rows that apply to a run, and a result compared with them.

A row applies to a run when its ``gpu`` (a regular expression, any case) matches the run's GPU name (the run
record's ``device.name``, else ``torch.device_name``), its ``hosts`` ("one" or "several") is the run's host
count, and its ``network`` (when given) appears in the run's path peak (the NICs' rate text, such as
"400 Gb/sec (4X NDR)"). ``compare`` gives, per row, the result's figure over the row's value: busbw over a
wire, ring or NVLS figure ("82 % of this platform's expected ring ceiling"), or the row's latency over the
result's (so that above 100 % is better in both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TABLE_PATH = Path(__file__).with_name("expected_values.toml")
WHAT = {"wire": "line rate per direction", "ring": "expected ring ceiling", "nvls": "expected NVLS (NVLink SHARP) busbw",
        "latency": "expected small-message latency"}


@dataclass(frozen=True)
class Row:
    id: str
    platform: str
    what: str
    value: float
    source: str
    gpu: str | None = None
    hosts: str | None = None
    network: str | None = None
    benchmark: str | None = None

    @property
    def unit(self) -> str:
        return "us" if self.what == "latency" else "GB/s"


@lru_cache(maxsize=1)
def rows() -> tuple[Row, ...]:
    """The reference table."""
    data = tomllib.loads(TABLE_PATH.read_text())
    return tuple(Row(**row) for row in data.get("row", []))


def gpu_name(meta: dict) -> str | None:
    device = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    torch = meta.get("torch") if isinstance(meta.get("torch"), dict) else {}
    return device.get("name") or torch.get("device_name")


def applies(row: Row, meta: dict) -> bool:
    """Whether a reference row is about the platform a run (its run record's fields) ran on."""
    hosts = meta.get("hosts")
    count = len(hosts) if isinstance(hosts, list) else None
    if row.hosts and count is not None and row.hosts != ("one" if count == 1 else "several"):
        return False
    if row.gpu:
        name = gpu_name(meta)
        if not name or not re.search(row.gpu, name, re.IGNORECASE):
            return False
    if row.network:
        peak = meta.get("path_peak") if isinstance(meta.get("path_peak"), dict) else {}
        if row.network.lower() not in str(peak.get("link", "")).lower():
            return False
    return bool(row.gpu or row.network)


def rows_for(meta: dict, benchmark: str | None = None) -> list[Row]:
    """The rows about a run's platform (for ``benchmark``: rows of no benchmark, or of that one)."""
    return [r for r in rows() if applies(r, meta) and (r.benchmark is None or r.benchmark == benchmark)]


def compare(row: Row, busbw_gbps: float | None = None, latency_us: float | None = None) -> float | None:
    """The result over the row: busbw / value, or value / latency for a latency row."""
    if row.what == "latency":
        return row.value / latency_us if latency_us else None
    return busbw_gbps / row.value if busbw_gbps is not None else None


def describe(row: Row, share: float | None) -> str:
    """``82 % of this platform's expected ring ceiling (370 GB/s, H100 SXM ...)``."""
    figure = "-" if share is None else f"{share * 100:.0f} %"
    return f"{figure} of this platform's {WHAT.get(row.what, row.what)} ({row.value:g} {row.unit}, {row.platform})"

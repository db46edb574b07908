"""The grammars of sizes and durations.

Sizes: ``8``, ``4K``, ``1M``, ``1G``, ``1T``; ``MIN:MAX`` doubling; comma lists.

Suffixes are powers of two (K = 1024 bytes), case-insensitive, optionally followed by
``B`` or ``iB`` (``4K``, ``4KB``, ``4KiB`` are all 4096 bytes). ``:MAX`` starts at 1 byte.
A bare size is that one size (OMB's ``-m MAX`` is written ``:MAX`` here).

Durations (soak's ``--duration``): ``90``, ``90s``, ``30m``, ``12h``, ``1d``, in seconds.

Positive numbers (``--tflops``, ``--threshold``): ``positive_number``, an argparse ``type``.
"""

from __future__ import annotations

import argparse
import re

from microbench.errors import UsageError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: matched against the stripped text with fullmatch: one run of spaces, so linear time on any input
_SIZE_RE = re.compile(r"(\d{1,20})\s*([KMGT]?)(I?B)?", re.IGNORECASE)
_SHOWN = 40  #: characters of a bad size echoed in the error

#: Largest size the grammar accepts (1 TiB); memory checks reject what cannot fit.
MAX_SIZE_BYTES = 1 << 40


def parse_size(text: str) -> int:
    """Parse one size such as ``8``, ``4K`` or ``1MiB`` into bytes (time linear in the text's length)."""
    m = _SIZE_RE.fullmatch(text.strip())
    if not m:
        shown = text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"
        raise UsageError(f"bad size {shown!r}: expected a whole number of bytes with an optional K, M, G or T suffix")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1:
        raise UsageError(f"bad size {text!r}: sizes start at 1 byte")
    if value > MAX_SIZE_BYTES:
        raise UsageError(f"bad size {text!r}: larger than 1T")
    return value


def parse_sizes(text: str) -> list[int]:
    """Parse a size list (``1:1M``, ``8,64,4K:16K``) into sorted unique byte counts."""
    if not text or not text.strip():
        raise UsageError("bad size list '': give sizes such as 1:1M or 8,4K,1M")
    sizes: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if ":" in part:
            lo_text, _, hi_text = part.partition(":")
            lo = parse_size(lo_text) if lo_text.strip() else 1
            hi = parse_size(hi_text)
            if lo > hi:
                raise UsageError(f"bad size range {part[:2 * _SHOWN]!r}: MIN ({lo} B) is larger than MAX ({hi} B)")
            size = lo
            while size <= hi:
                sizes.add(size)
                size *= 2
        else:
            sizes.add(parse_size(part))
    return sorted(sizes)


def format_size(nbytes: int) -> str:
    """Short human form of a byte count: 512, 4K, 1M, 1536 (exact values only)."""
    for suffix in "TGMK":
        unit = _UNITS[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def format_bytes(nbytes: float) -> str:
    """Human form with one decimal and binary units, for messages: ``1.5 GiB``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} TiB"


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)


_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``1d`` -> seconds."""
    m = _DURATION_RE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--duration {text!r}: expected a positive time such as 600, 90s, 30m or 12h")
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]


def positive_number(text: str) -> float:
    """An argparse ``type``: a number above 0 (``0.05``, ``2``, ``1e-3``); anything else is argparse's usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
    return value

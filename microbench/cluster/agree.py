"""Cross-rank agreement: an error found on any rank ends every rank, with one message from rank 0.

Every rank calls these at the same points; the lowest rank with an error wins and its message is
broadcast, so rank 0 can print it and every rank exits with the same status.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from microbench.errors import RunError, UsageError


def raise_if_any(reducer, error: Exception | None) -> None:
    """Collective: if any rank passes an error, raise it (with its rank) on every rank."""
    first = lowest_rank_where(reducer, error is not None)
    if first is None:
        return
    payload = None
    if reducer.rank == first:
        payload = (str(error), getattr(error, "exit_code", 1))
    message, code = reducer.bcast(payload, root=first)
    if first != 0:
        message = f"{message} (on rank {first})"
    cls = UsageError if code == UsageError.exit_code else RunError
    raise cls(message)


def options_digest(options: dict) -> str:
    """A short stable hash of options (and anything else every rank must share)."""
    text = json.dumps(options, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_same_everywhere(reducer, what: str, value: dict) -> None:
    """Collective: fail on every rank unless ``value`` is identical on all ranks.

    Compares a 64-bit hash with two allreduces; only when they differ are the values gathered to name
    the first differing key.
    """
    digest = options_digest(value)
    h = np.array([int(digest[:15], 16)], dtype=np.int64)
    lo, hi = reducer.allreduce(h, "min")[0], reducer.allreduce(h, "max")[0]
    if lo == hi:
        return
    mine = int(h[0])
    ref = reducer.bcast((mine, value), root=0)
    first = lowest_rank_where(reducer, mine != ref[0])
    detail = None
    if reducer.rank == first:
        keys = list(value) + [k for k in ref[1] if k not in value]  # declaration order: options before derived
        diff = [k for k in keys if value.get(k) != ref[1].get(k)]
        key = diff[0] if diff else "?"
        detail = f"{key}: rank 0 has {ref[1].get(key)!r}, rank {first} has {value.get(key)!r}"
    detail = reducer.bcast(detail, root=first)
    raise UsageError(f"{what} differ between ranks ({detail}); every rank must run the same command")


# ------------------------------------------------------------------------------ named reductions
# One value per rank, reduced across ranks (collective: every rank calls them at the same point).

def max_of(reducer, value: float) -> float:
    """The largest ``value`` over all ranks."""
    return float(reducer.allreduce(np.array([value], dtype=np.float64), "max")[0])


def sum_of(reducer, value: int) -> int:
    """The sum of an integer ``value`` over all ranks."""
    return int(reducer.allreduce(np.array([value], dtype=np.int64), "sum")[0])


def mean_of(reducer, value: float) -> float:
    """The mean of a float ``value`` over all ranks."""
    return float(reducer.allreduce(np.array([value], dtype=np.float64), "sum")[0]) / reducer.size


def any_rank(reducer, flag: bool) -> bool:
    """Whether ``flag`` is true on at least one rank."""
    return bool(reducer.allreduce(np.array([int(flag)], dtype=np.int64), "max")[0])


def lowest_rank_where(reducer, flag: bool) -> int | None:
    """The lowest rank on which ``flag`` is true, or None when it is true nowhere."""
    first = int(reducer.allreduce(np.array([reducer.rank if flag else reducer.size], dtype=np.int64), "min")[0])
    return None if first >= reducer.size else first

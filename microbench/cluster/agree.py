"""Cross-rank agreement: an error found on any rank ends every rank, with one message from rank 0.

Every rank calls these at the same points; the lowest rank with an error wins and its message is
broadcast, so rank 0 can print it and every rank exits with the same status.
"""

from __future__ import annotations

import zlib

from microbench.errors import RunError, UsageError

# numpy is imported in the functions that reduce across ranks: the --np parent checks options with this module
# before any rank exists, and never loads it (docs/startup.md).

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


def options_digest(options: dict) -> int:
    """A stable 63-bit checksum of options (and anything else every rank must share): CRC-32 and Adler-32 of their
    canonical text (``canonical``). A difference between ranks is an accident to catch, not an attack to resist,
    and zlib is loaded already (hashlib would load OpenSSL on every rank)."""
    text = canonical(options).encode()
    return (zlib.crc32(text) << 31) | (zlib.adler32(text) >> 1)


def canonical(value) -> str:
    """The same text for equal values on every rank: dict keys sorted, lists and tuples alike, others by repr
    (str for what has no stable repr of its own)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{canonical(str(k))}:{canonical(v)}" for k, v in sorted(value.items(),
                                                                                      key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return repr(str(value))


def check_same_everywhere(reducer, what: str, value: dict) -> None:
    """Collective: fail on every rank unless ``value`` is identical on all ranks.

    Compares a 64-bit hash with two allreduces; only when they differ are the values gathered to name
    the first differing key.
    """
    import numpy as np

    h = np.array([options_digest(value)], dtype=np.int64)
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
    import numpy as np

    return float(reducer.allreduce(np.array([value], dtype=np.float64), "max")[0])


def sum_of(reducer, value: int) -> int:
    """The sum of an integer ``value`` over all ranks."""
    import numpy as np

    return int(reducer.allreduce(np.array([value], dtype=np.int64), "sum")[0])


def mean_of(reducer, value: float) -> float:
    """The mean of a float ``value`` over all ranks."""
    import numpy as np

    return float(reducer.allreduce(np.array([value], dtype=np.float64), "sum")[0]) / reducer.size


def any_rank(reducer, flag: bool) -> bool:
    """Whether ``flag`` is true on at least one rank."""
    import numpy as np

    return bool(reducer.allreduce(np.array([int(flag)], dtype=np.int64), "max")[0])


def lowest_rank_where(reducer, flag: bool) -> int | None:
    """The lowest rank on which ``flag`` is true, or None when it is true nowhere."""
    import numpy as np

    first = int(reducer.allreduce(np.array([reducer.rank if flag else reducer.size], dtype=np.int64), "min")[0])
    return None if first >= reducer.size else first

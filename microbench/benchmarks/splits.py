"""Split patterns of all-to-all-v: how many elements each rank sends to each peer (``--splits``).

A pattern is a matrix of weights, row = the sending rank, column = the receiving rank. For a message of ``count``
elements (the size a user asks for, in elements of the benchmark's type) the weights become whole elements:

- every row is scaled so that the heaviest row sends exactly ``count`` elements (every row of the generated
  patterns is the same, so every rank sends ``count``), each block rounded down and the elements left over given
  to the largest remainders, ties to the peers nearest after the sender (rank r, r + 1, ... mod n), so that a
  uniform split of a count n does not divide still receives evenly;
- ``uniform``: every destination the same weight (the all-to-all of a balanced router);
- ``zipf:S``: destination j (0-based) weighs 1 / (j + 1)^S for every sender: one global popularity ranking, as a
  mixture-of-experts router's hot experts are hot for every token (rank 0 receives the most);
- ``hot:K``: destination 0 weighs K, every other destination 1 (one hot expert; hot:1 is uniform);
- ``file:PATH``: weights read from a text file, numbers separated by spaces or commas, ``#`` comments: one line
  is a histogram over destinations whose length is a multiple of the ranks (a router's tokens per expert:
  experts in consecutive blocks per rank, as Megatron-Core places local experts, summed per rank); n lines of n
  numbers are the matrix itself;
- any of them followed by ``/T``: the transpose (row = receiver): what a mixture-of-experts layer's combine sends
  back after a dispatch of that split (``zipf:1.2/T``: the hot rank sends most).

The pattern's canonical text (``SplitPattern.text``) is what records and the configuration key carry; a file's
carries its name and the first 8 hex digits of the SHA-256 of its weights, so two different files are never one
configuration.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - numpy where a matrix is made: the --np parent only parses a pattern
    import numpy as np

from microbench.errors import UsageError

KINDS = ("uniform", "zipf", "hot", "file")
SYNTAX = "uniform, zipf:S (S > 0), hot:K (K >= 1) or file:PATH, each optionally followed by /T (transposed)"
MAX_FILE_BYTES = 1 << 24  #: a split file larger than this is refused (a 1024 x 1024 matrix takes about 8 MiB)
MAX_WEIGHT = 1e30  #: the largest weight a file may hold (keeps sums finite)


@dataclass(frozen=True)
class SplitPattern:
    """One split pattern: its kind, its parameter (zipf's S, hot's K) and, for a file, the rows it read."""

    kind: str
    parameter: float | None = None
    rows: tuple[tuple[float, ...], ...] | None = None  #: file: one histogram row, or the n x n matrix
    name: str | None = None  #: file: the file's name as given
    transposed: bool = False  #: row = receiver: the combine of a dispatch with this split

    @property
    def text(self) -> str:
        """The canonical text: ``uniform``, ``zipf:1.2``, ``hot:4``, ``file:NAME#DIGEST``, each with ``/T`` when
        transposed (records, keys)."""
        if self.kind == "uniform":
            base = "uniform"
        elif self.kind == "file":
            base = f"file:{os.path.basename(self.name or '')}#{self.digest()}"
        else:
            base = f"{self.kind}:{self.parameter:g}"
        return base + ("/T" if self.transposed else "")

    def digest(self) -> str:
        """The first 8 hex digits of the SHA-256 of a file pattern's weights (repr of each, row by row)."""
        import hashlib

        text = "\n".join(" ".join(repr(float(w)) for w in row) for row in self.rows or ())
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def check_ranks(self, nranks: int) -> None:
        """UsageError unless a file pattern fits ``nranks`` ranks (generated patterns fit any)."""
        if self.kind != "file":
            return
        rows = self.rows or ()
        if len(rows) == 1:
            if len(rows[0]) % nranks:
                raise UsageError(f"--splits file:{self.name}: a histogram of {len(rows[0])} bins cannot be spread "
                                 f"over {nranks} ranks (its length must be a multiple of the ranks)")
        elif len(rows) != nranks:
            raise UsageError(f"--splits file:{self.name}: a matrix of {len(rows)} rows, but the group has {nranks} "
                             f"ranks (give n rows of n weights, or one histogram line)")

    def weights(self, nranks: int) -> np.ndarray:
        """The n x n weight matrix, row = sender, column = receiver (float64, every row summing above 0 or 0)."""
        w = self._weights(nranks)
        return w.T.copy() if self.transposed else w

    def _weights(self, nranks: int) -> np.ndarray:
        import numpy as np

        n = nranks
        if self.kind == "uniform":
            return np.ones((n, n))
        if self.kind == "zipf":
            row = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** self.parameter
            return np.tile(row, (n, 1))
        if self.kind == "hot":
            row = np.ones(n)
            row[0] = self.parameter
            return np.tile(row, (n, 1))
        self.check_ranks(n)
        rows = np.array(self.rows, dtype=np.float64)
        if len(rows) == 1:  # a histogram over destinations (experts): consecutive bins per rank, every sender alike
            return np.tile(rows[0].reshape(n, -1).sum(axis=1), (n, 1))
        return rows

    def matrix(self, count: int, nranks: int) -> np.ndarray:
        """Elements rank i sends rank j (int64 n x n) for a message of ``count`` elements (see the module)."""
        return _matrix(self, int(count), int(nranks)).copy()

    def describe(self, count: int, nranks: int) -> dict:
        """What a message of ``count`` elements on ``nranks`` ranks moves (elements): the busiest rank's send and
        receive, and the receive imbalance (the busiest receiver over the mean receive; 1: balanced)."""
        m = _matrix(self, int(count), int(nranks))
        sends, receives = m.sum(axis=1), m.sum(axis=0)
        mean = receives.mean()
        return {"send_max": int(sends.max()), "recv_max": int(receives.max()),
                "recv_imbalance": float(receives.max() / mean) if mean > 0 else 1.0}


UNIFORM = SplitPattern("uniform")


@functools.lru_cache(maxsize=64)
def _matrix(pattern: SplitPattern, count: int, n: int) -> np.ndarray:
    import numpy as np

    w = pattern.weights(n)
    totals = w.sum(axis=1)
    heaviest = totals.max()
    if not heaviest > 0:
        raise UsageError(f"--splits {pattern.text}: every weight is 0 (no rank sends anything)")
    out = np.zeros((n, n), dtype=np.int64)
    for src in range(n):
        target = int(round(count * totals[src] / heaviest)) if totals[src] < heaviest else count
        if target == 0:
            continue
        exact = w[src] * (count / heaviest)
        exact *= target / exact.sum()  # exactly ``target`` in all, before rounding
        base = np.floor(exact).astype(np.int64)
        left = target - int(base.sum())
        if left > 0:
            distance = (np.arange(n) - src) % n
            remainder = np.round(exact - base, 9)  # equal shares stay equal whatever the float error
            order = sorted(range(n), key=lambda j: (-remainder[j], distance[j]))
            for j in order[:left]:
                base[j] += 1
        elif left < 0:  # floating error above: take from the largest blocks
            for j in np.argsort(-base)[:-left]:
                base[j] -= 1
        out[src] = base
    out.setflags(write=False)
    return out


def parse(text: str) -> SplitPattern:
    """A pattern from its text (``--splits``): UsageError naming what is wrong (a file is read here)."""
    text = text.strip()
    if text.endswith("/T"):
        inner = parse(text[:-2])
        return replace(inner, transposed=not inner.transposed)
    kind, _, arg = text.partition(":")
    kind = kind.lower()
    if kind == "uniform" and not arg:
        return UNIFORM
    if kind in ("zipf", "hot") and arg:
        try:
            value = float(arg)
        except ValueError:
            value = math.nan
        if kind == "zipf" and not 0 < value <= 100:
            raise UsageError(f"--splits zipf:S needs an exponent 0 < S <= 100 (got {arg!r})")
        if kind == "hot" and not 1 <= value <= 1e9:
            raise UsageError(f"--splits hot:K needs a weight 1 <= K <= 1e9 for the hot destination (got {arg!r})")
        return SplitPattern(kind, value)
    if kind == "file" and arg:
        return SplitPattern("file", rows=read_rows(arg), name=arg)
    raise UsageError(f"--splits {text!r}: give {SYNTAX}")


def read_rows(path: str) -> tuple[tuple[float, ...], ...]:
    """The weight rows of a split file; UsageError naming FILE:LINE for what is not a weight."""
    from microbench.errors import printable

    shown = printable(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--splits file:{shown}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"--splits file:{shown}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--splits file:{shown}: not a UTF-8 text file") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].replace(",", " ").split()
        if not body:
            continue
        try:
            row = tuple(float(x) for x in body)
        except ValueError:
            raise UsageError(f"{shown}:{number}: not a list of numbers: {printable(line.strip()[:80])!r}") from None
        if not all(0 <= x <= MAX_WEIGHT for x in row):
            raise UsageError(f"{shown}:{number}: weights must be finite numbers from 0 to {MAX_WEIGHT:g}")
        rows.append(row)
    if not rows:
        raise UsageError(f"--splits file:{shown}: no weights in it")
    if len(rows) > 1 and any(len(r) != len(rows) for r in rows):
        bad = next(i for i, r in enumerate(rows) if len(r) != len(rows))
        raise UsageError(f"--splits file:{shown}: {len(rows)} rows make a matrix of {len(rows)} x {len(rows)}, but "
                         f"row {bad + 1} has {len(rows[bad])} weights (one line is a histogram; n lines of n "
                         f"numbers a matrix)")
    if not any(x > 0 for r in rows for x in r):
        raise UsageError(f"--splits file:{shown}: every weight is 0")
    return tuple(rows)


def from_text(text: str, rows: list | tuple | None = None) -> SplitPattern:
    """A pattern from its canonical text and, for a file, the rows already read (ranks never read it twice)."""
    if text.startswith("file:"):
        transposed = text.endswith("/T")
        name = text[5:-2 if transposed else None].rsplit("#", 1)[0]
        return SplitPattern("file", rows=tuple(tuple(float(x) for x in r) for r in rows or ()), name=name,
                            transposed=transposed)
    return parse(text)

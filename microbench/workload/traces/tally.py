"""What one or more trace files held: calls per rank, what was unattributed, uncurved, unreadable or left out.

A *rank* is one participant that issues calls, as the format identifies it (a GPU of a process for NCCL
logs, the profiled rank of a PyTorch trace, ...; see docs/workload-traces.md). Calls are tallied per
(rank, collective, bytes, group size), so memory grows with the distinct messages, never with the file.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from microbench.workload.messages import Message, merge


MAX_BYTES = 2 ** 62  #: the largest message (bytes) and call count a trace may state
MAX_GROUP = 2 ** 31 - 1  #: the largest group (NCCL's rank count is an int)
IMPOSSIBLE = f"call of more than 2**62 bytes or calls, or in a group of more than {MAX_GROUP} ranks"


@dataclass
class TraceTally:
    """The calls of a trace and everything that was not counted, with the reason."""

    path: str
    format: str
    unit: str = "lines"  #: what ``entries`` counts: "lines" (text formats) or "events" (JSON formats)
    entries: int = 0
    calls: Counter = field(default_factory=Counter)  #: (rank, collective, bytes, group, splits) -> calls
    unattributed: Counter = field(default_factory=Counter)  #: (collective, bytes, group, splits) -> calls
    uncurved: Counter = field(default_factory=Counter)  #: collective name -> calls (no curve to price them)
    unreadable: int = 0
    skipped: Counter = field(default_factory=Counter)  #: reason -> entries left out
    notes: list[str] = field(default_factory=list)
    communicator_ranks: int = 0  #: (process, communicator) pairs seen, where the format prints communicators

    def add(self, rank: str | None, collective: str, nbytes: int, group: int | None, count: int = 1,
            splits: str | None = None) -> None:
        """Count ``count`` calls; rank None is a call no rank could be credited with. A call no machine makes
        (more than 2**62 bytes, a group beyond 2**31 ranks, more than 2**62 calls) is left out and counted.
        ``splits``: an all-to-all-v's split pattern (``peer_sizes.pattern_of``; None where the trace has no sizes)."""
        if nbytes > MAX_BYTES or (group is not None and not 0 < group <= MAX_GROUP) or count > MAX_BYTES:
            self.skipped[IMPOSSIBLE] += min(count, MAX_BYTES)
        elif nbytes == 0:  # an empty tensor moves nothing and has no place on a size axis
            self.skipped["zero-size call (moves no data)"] += count
        elif rank is None:
            self.unattributed[(collective, nbytes, group, splits)] += count
        else:
            self.calls[(rank, collective, nbytes, group, splits)] += count

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def ranks(self) -> list[str]:
        return sorted({key[0] for key in self.calls})

    def calls_per_rank(self) -> Counter:
        per_rank: Counter = Counter()
        for (rank, *_), n in self.calls.items():
            per_rank[rank] += n
        return per_rank

    def rank_spread(self) -> dict:
        """Calls per rank: min, median, max over the ranks seen (a partial log shows as a spread)."""
        counts = sorted(self.calls_per_rank().values())
        if not counts:
            return {"min": 0, "median": 0, "max": 0}
        return {"min": counts[0], "median": statistics.median(counts), "max": counts[-1]}

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def messages(self, iterations: int = 1) -> list[Message]:
        """Calls per rank per iteration: the calls of all ranks over (ranks seen x ``iterations``)."""
        per_rank = max(len(self.ranks), 1) * iterations
        tally: Counter = Counter()
        for (_, collective, nbytes, group, splits), n in self.calls.items():
            tally[(collective, nbytes, group, splits)] += n
        return merge(Message(coll, nbytes, n / per_rank, group, "trace", splits)
                     for (coll, nbytes, group, splits), n in tally.items())

    def split_patterns(self) -> dict:
        """All-to-all-v calls per split pattern (``unknown``: the trace names no per-peer sizes)."""
        out: Counter = Counter()
        for (_, collective, _, _, splits), n in self.calls.items():
            if collective == "alltoallv":
                out[splits or "unknown"] += n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def absorb(self, other: TraceTally) -> None:
        """Add another file's tally to this one; ranks of the same name are the same rank."""
        self.path = f"{self.path}, {other.path}"
        if other.format not in self.format.split("+"):
            self.format = f"{self.format}+{other.format}"
        self.unit = self.unit if self.unit == other.unit else "lines and events"
        self.entries += other.entries
        self.unreadable += other.unreadable
        self.communicator_ranks += other.communicator_ranks
        for mine, theirs in ((self.calls, other.calls), (self.unattributed, other.unattributed),
                             (self.uncurved, other.uncurved), (self.skipped, other.skipped)):
            mine.update(theirs)
        for text in other.notes:
            self.note(text)

    def summary(self) -> dict:
        per_rank = self.calls_per_rank()
        return {
            "file": self.path, "format": self.format, "entries": self.entries, "entries_are": self.unit,
            "calls": self.total_calls, "ranks": len(per_rank), "calls_per_rank": self.rank_spread(),
            "rank_calls": dict(sorted(per_rank.items())), "communicator_ranks": self.communicator_ranks,
            "unattributed_calls": sum(self.unattributed.values()),
            "unattributed": [{"collective": c, "bytes": b, "group_size": g, "calls": n,
                              **({"splits": sp} if sp else {})}
                             for (c, b, g, sp), n in sorted(self.unattributed.items(), key=str)],
            "alltoallv_splits": self.split_patterns(),
            "uncurved": dict(sorted(self.uncurved.items())), "unreadable": self.unreadable,
            "skipped": dict(sorted(self.skipped.items())), "notes": self.notes,
        }

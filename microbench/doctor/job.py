"""What the coordinator knows of the job: every rank that checked in (its host, pid, the launcher's view), and
the nodes they make (one leader rank per host across hosts; every rank a node on one host, as the pairs test)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from microbench.cluster.nodes import Nodes


@dataclass
class RankInfo:
    rank: int
    host: str
    pid: int
    conn: int  #: its connection on the plane
    local_rank: int | None
    local_size: int | None
    size: int | None
    launcher: str | None
    view: dict = field(default_factory=dict)  #: the launcher's own variables this rank saw
    clock_offset_s: float = 0.0  #: its clock minus the coordinator's when its hello arrived


@dataclass
class Job:
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    expected: int | None = None  #: ranks the launch should have (--np, or what the launcher told the ranks)

    def add(self, info: RankInfo) -> None:
        self.ranks[info.rank] = info

    def host_of(self, rank: int) -> str:
        info = self.ranks.get(rank)
        return info.host if info else "?"

    @property
    def hosts_by_rank(self) -> list[str]:
        """Each rank's host, ranks 0..N-1 (only meaningful once every rank checked in)."""
        return [self.ranks[r].host for r in sorted(self.ranks)]

    @property
    def ranks_per_host(self) -> dict[str, int]:
        return dict(Counter(self.hosts_by_rank))

    def nodes(self) -> Nodes:
        return Nodes.of(self.hosts_by_rank)

    def by_host(self, ranks) -> dict[str, list[int]]:
        """``ranks`` grouped by host, hosts in the order of their lowest rank."""
        out: dict[str, list[int]] = {}
        for r in sorted(ranks):
            out.setdefault(self.host_of(r), []).append(r)
        return out

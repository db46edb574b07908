"""What a run's results are judged against: every host's links (read once per host by its lowest rank, gathered
to rank 0), the peak of the path each benchmark's data crosses, and NCCL's algorithm and protocol per size.

``gather`` is collective; the ``RunPeaks`` it returns lives on rank 0 (None elsewhere). docs/peaks.md says how
the peak and the share are made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from microbench.benchmarks.table import Collective
from microbench.cluster import links as host_links
from microbench.cluster import path_peak
from microbench.cluster.nccl_tuning import InspectorLog, TuningLog
from microbench.cluster.world import Layout


@dataclass
class RunPeaks:
    """Rank 0's view: each host's links, the path peaks (across hosts, and inside hosts for pairs that stay on
    one), and this rank's NCCL debug file when ``--nccl-algo`` asked for one."""

    links: dict[str, dict]
    across: dict  #: the path peak of a collective over every rank
    inside: dict  #: the path peak when no pair crosses hosts (point-to-point benchmarks)
    tuning: TuningLog | InspectorLog | None = None  #: where NCCL's algorithm per size is read from
    _cache: dict = field(default_factory=dict)

    def path_for(self, coll: Collective, layout: Layout, nranks: int) -> dict:
        if coll.point_to_point and layout.pairs_inter_node(nranks) == 0:
            return self.inside
        return self.across

    def result_fields(self, coll: Collective, layout: Layout, nranks: int, result: dict) -> dict:
        """``peak`` and ``nccl_algo`` of a result (its busbw against the path's peak; NCCL's choice)."""
        out = {}
        algo = self.tuning.choice(coll.name, result["size_bytes"], nranks) if self.tuning else None
        if algo:
            out["nccl_algo"] = algo
        block = path_peak.peak_block(self.path_for(coll, layout, nranks), result.get("busbw_gbps"),
                                     coll.directions, (algo or {}).get("algorithm"))
        if block is not None:
            out["peak"] = block
        return out

    def crosses_a_link(self, coll: Collective, layout: Layout, nranks: int) -> bool:
        """Whether the benchmark's data crosses a link (the table then shows its share of the link's peak)."""
        return self.path_for(coll, layout, nranks)["tier"] != "shared memory"

    def section_line(self, coll: Collective, layout: Layout, nranks: int) -> str:
        """The '#' line above a benchmark's table naming the path's peak, or why there is none."""
        peak = self.path_for(coll, layout, nranks)
        if peak.get("gbps") is None:
            return f"peak share: no peak for the path ({peak['tier']}): {peak['link']}"
        twice = " x 2 (both directions)" if coll.directions == 2 else ""
        return (f"peak share: busbw / {peak['gbps'] * coll.directions:.4g} GB/s{twice}, the path's peak "
                f"({peak['tier']}): {peak['link']}")


def gather(reducer, layout: Layout, device: str, gpus: list,
           tuning: TuningLog | InspectorLog | None = None) -> RunPeaks | None:
    """Collective: each host's lowest rank reads its links; rank 0 gets them all and makes the path peaks."""
    rank = reducer.rank
    hosts = layout.hosts_by_rank
    mine = _read_links() if hosts.index(hosts[rank]) == rank else None
    found = reducer.gather(mine)
    if rank != 0:
        return None
    by_host = {hosts[r]: links for r, links in enumerate(found) if links is not None}
    gpus_by_rank = [g if isinstance(g, dict) else None for g in gpus] if gpus else None
    across = path_peak.path_peak(hosts, by_host, device, gpus_by_rank)
    inside = path_peak.path_peak(hosts, by_host, device, gpus_by_rank, crosses_hosts=False)
    return RunPeaks(by_host, across, inside, tuning)


def _read_links() -> dict:
    """This host's links; a failure to read them is a note in the record, never a rank that stops alone (the
    others would wait for it in the gather)."""
    try:
        return host_links.read_host()
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on without this host's links
        return {"read_from": "sysfs, tc and NVML of the host", "notes": [f"links not read: {type(exc).__name__}: {exc}"]}

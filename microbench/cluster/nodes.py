"""Nodes: what diagnostics attribute figures to, and the control-plane path that summarises per node.

A node is a host when the job spans several hosts, else a rank ("on one host, ranks stand for nodes", as in
the pairwise test, whose ``choose_participants`` defines both). ``NodePlane.per_node`` reduces one small row
per rank to one row per node on rank 0 without sending every rank's row there:

- several hosts under MPI: the control-plane communicator is split once per run into one communicator per
  host and one of the hosts' lowest ranks; a row is reduced inside each host (``MPI_Reduce``, shared memory),
  then the host leaders' rows are gathered to rank 0 (``MPI_Gather``). Rank 0 receives nodes x row bytes;
- one host (ranks are the nodes): every rank's row is gathered to rank 0 (again nodes x row bytes);
- several hosts under torchrun (gloo control plane, no split here): every rank's row is gathered and reduced
  per host at rank 0, ranks x row bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Nodes:
    """The nodes of a job: their labels, their lowest ranks, and each rank's node."""

    unit: str  #: "host" or "rank"
    labels: list[str]
    leaders: list[int]  #: the lowest rank of each node
    node_of_rank: list[int]

    @classmethod
    def of(cls, hosts_by_rank: list[str]) -> "Nodes":
        leaders, labels, unit = choose_participants(hosts_by_rank)
        if unit == "rank":
            return cls(unit, labels, leaders, list(range(len(hosts_by_rank))))
        index = {host: i for i, host in enumerate(labels)}
        return cls(unit, labels, leaders, [index[h] for h in hosts_by_rank])


class NodePlane:
    """Per-node reductions on the control plane (collective: every rank calls ``per_node`` together)."""

    def __init__(self, reducer, nodes: Nodes, host_comm=None, leader_comm=None):
        self.reducer, self.nodes = reducer, nodes
        self.host_comm, self.leader_comm = host_comm, leader_comm

    @classmethod
    def build(cls, reducer, hosts_by_rank: list[str]) -> "NodePlane":
        """Collective: the plane of this job (splits the MPI control plane once when there are several hosts)."""
        nodes = Nodes.of(hosts_by_rank)
        comm = getattr(reducer, "comm", None)
        if nodes.unit == "rank" or comm is None:
            return cls(reducer, nodes)
        rank = reducer.rank
        host_comm = comm.Split(nodes.node_of_rank[rank], rank)
        is_leader = host_comm.Get_rank() == 0
        leader_comm = comm.Split(0 if is_leader else reducer.MPI.UNDEFINED, rank)
        return cls(reducer, nodes, host_comm, None if leader_comm == reducer.MPI.COMM_NULL else leader_comm)

    def per_node(self, sums: np.ndarray, maxima: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Rank 0: (nodes x len(sums)) of per-node sums and (nodes x len(maxima)) of per-node maxima of every
        rank's rows; None elsewhere. (A minimum is the maximum of the negated value.)"""
        sums, maxima = np.asarray(sums, dtype=np.float64), np.asarray(maxima, dtype=np.float64)
        if self.host_comm is None:
            return self._gathered(sums, maxima)
        MPI = self.reducer.MPI
        node_sums, node_max = np.empty_like(sums), np.empty_like(maxima)
        self.host_comm.Reduce(sums, node_sums, op=MPI.SUM, root=0)
        self.host_comm.Reduce(maxima, node_max, op=MPI.MAX, root=0)
        if self.leader_comm is None:
            return None
        row = np.concatenate([node_sums, node_max])
        table = np.empty((self.leader_comm.Get_size(), row.size)) if self.reducer.rank == 0 else None
        self.leader_comm.Gather(row, table, root=0)
        if table is None:
            return None
        return table[:, :sums.size], table[:, sums.size:]

    def _gathered(self, sums: np.ndarray, maxima: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Every rank's row gathered to rank 0 and reduced per node there."""
        rows = self.reducer.gather((sums.tolist(), maxima.tolist()))
        if rows is None:
            return None
        n = len(self.nodes.labels)
        node_sums, node_max = np.zeros((n, sums.size)), np.full((n, maxima.size), -np.inf)
        for rank, (s, m) in enumerate(rows):
            node = self.nodes.node_of_rank[rank]
            node_sums[node] += s
            node_max[node] = np.maximum(node_max[node], m)
        return node_sums, node_max


def choose_participants(hosts_by_rank: list[str]) -> tuple[list[int], list[str], str]:
    """(ranks that take part, their labels, 'host' or 'rank'): one rank per host across hosts, else all ranks."""
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts_by_rank):
        first.setdefault(host, rank)
    if len(first) > 1:
        return list(first.values()), list(first.keys()), "host"
    return list(range(len(hosts_by_rank))), [f"rank {r}" for r in range(len(hosts_by_rank))], "rank"

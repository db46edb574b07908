"""Straggler attribution of one measured size: which rank and which node were slowest and fastest, by how much.

Every timing rank has one figure, its mean latency over the timed iterations (us). From it, per size:

- ``slowest`` / ``fastest``: the rank with the highest / lowest mean, its host and its mean (two allreduces
  of two numbers each: the extreme means, then the lowest rank holding each);
- ``skew`` = slowest mean / fastest mean (1.0 when every rank took as long);
- per-node means (``microbench.cluster.nodes``: hosts across hosts, ranks on one host): the mean of the node's
  per-rank means, reduced inside each node and gathered to rank 0 (nodes x 40 bytes; never a sample);
  the record lists them all up to ``LISTED_NODES`` nodes, else the ``LISTED_NODES // 2`` slowest and fastest;
- ``outliers``: nodes whose mean stands out among all node means by the pairwise test's rule (modified
  z-score beyond ``outliers.OUTLIER_Z``, MAD floored at 5 % of the median; at least 4 nodes), on either side.
  A *slow* node spent longer in its calls than the others. A *fast* node in a collective where every rank
  waits for every other (allreduce, allgather, reduce_scatter, alltoall) is the one the others waited for:
  it arrived last, so its own calls were short (a straggler outside the call). Rooted collectives differ
  between root and leaves by design.

The same per-node reduction carries the data check's mismatches, so a failed ``--check`` names the nodes
whose received data was wrong (``check_failures``).
"""

from __future__ import annotations

import math

import numpy as np

from microbench.cluster.nodes import NodePlane
from microbench.measure.outliers import OUTLIER_Z, flag_outliers, median

LISTED_NODES = 16  #: most nodes a record lists by name (means, outliers, check failures)


def summarize(plane: NodePlane, hosts_by_rank: list[str], samples_us: np.ndarray | None,
              check_errors: int | None) -> tuple[dict | None, list | None]:
    """Collective: (the ``stragglers`` block, the ``check_failures`` list) on rank 0; (None, None) elsewhere.

    The block is None when fewer than two ranks time; the list is None when the data was not checked."""
    reducer = plane.reducer
    timing = samples_us is not None and len(samples_us) > 0
    mean = float(np.mean(samples_us)) if timing else None
    extremes = reducer.allreduce(np.array([mean if timing else -np.inf, -mean if timing else -np.inf]), "max")
    slow_mean, fast_mean = float(extremes[0]), float(-extremes[1])
    n = reducer.size
    who = reducer.allreduce(np.array([reducer.rank if timing and mean == slow_mean else n,
                                      reducer.rank if timing and mean == fast_mean else n], dtype=np.int64), "min")
    table = plane.per_node(np.array([mean or 0.0, float(timing), float(check_errors or 0)]),
                           np.array([float(check_errors is not None)]))
    if table is None:
        return None, None
    sums, checked = table
    labels = plane.nodes.labels
    failures = None
    if checked[:, 0].max() > 0:
        failures = [{"label": labels[i], "mismatches": int(sums[i, 2])} for i in np.flatnonzero(sums[:, 2])]
        failures = failures[:LISTED_NODES]
    ranks_timing = int(sums[:, 1].sum())
    if ranks_timing < 2:
        return None, failures
    node_means = {labels[i]: float(sums[i, 0] / sums[i, 1]) for i in range(len(labels)) if sums[i, 1] > 0}
    block = {
        "slowest": _rank(int(who[0]), hosts_by_rank, slow_mean),
        "fastest": _rank(int(who[1]), hosts_by_rank, fast_mean),
        "skew": _ratio(slow_mean, fast_mean),
        "unit": plane.nodes.unit,
        "nodes": len(node_means),
        **_node_fields(node_means),
    }
    return block, failures


def _rank(rank: int, hosts_by_rank: list[str], mean_us: float) -> dict:
    return {"rank": rank, "host": hosts_by_rank[rank], "mean_us": mean_us}


def _ratio(high: float, low: float) -> float | None:
    return high / low if low > 0 and math.isfinite(high) else None


def _node_fields(node_means: dict[str, float]) -> dict:
    """The per-node part of the block: bounded listing, node skew, and the nodes that stand out."""
    ordered = sorted(node_means.items(), key=lambda kv: kv[1], reverse=True)
    half = LISTED_NODES // 2
    listed = ordered if len(ordered) <= LISTED_NODES else ordered[:half] + ordered[-half:]
    values = [v for _, v in ordered]
    found, rule = [], {"median_us": float(median(values)), "z_limit": OUTLIER_Z}
    if len(values) >= 4:
        for side, higher in (("slow", True), ("fast", False)):
            flagged, numbers = flag_outliers(values, higher_is_worse=higher, z_limit=OUTLIER_Z)
            rule["mad_us"] = numbers["mad"]
            found += [{"label": ordered[k][0], "mean_us": ordered[k][1], "z": round(z, 2), "side": side}
                      for k, z in flagged]
    return {
        "node_means_us": dict(listed),
        "listed": "all" if len(listed) == len(ordered) else "extremes",
        "node_skew": _ratio(values[0], values[-1]),
        "outliers": sorted(found, key=lambda o: -abs(o["z"]))[:LISTED_NODES],
        "outlier_rule": {"statistic": "modified z-score 0.6745 (x - median) / MAD over node means, "
                                      "MAD floored at 5 % of the median; slow above, fast below", **rule},
    }

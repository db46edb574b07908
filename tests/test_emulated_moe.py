"""Issue 42 on the emulated cluster (2 nodes x 2 ranks, node1's link throttled): a mixture-of-experts layout whose
expert-parallel group crosses the slow link pays for it in its all-to-alls; one whose expert groups stay inside a
node does not, while its expert-data-parallel group (across the nodes) does. Read from the same launch's isolated
per-call latencies (one group at a time): the iteration's per-group seconds also carry the waits for peers that
other groups' slow calls held up.

Ranks placed node by node: 0, 1 on node0 and 2, 3 on node1. Megatron-Core's expert order (etp-ep-edp-pp) makes
the ep groups consecutive ranks: with ep 2 they are (0, 1) and (2, 3), inside the nodes, and the expert-data-
parallel groups (0, 2) and (1, 3) cross; with ep 4 the one ep group spans both nodes.

The tests judge the throttled runs against what the throttle implies, not against open-link runs (whose times a
loaded machine inflates: an open ep-2 all-to-all 50 times slower than the throttled one was seen at load 9, as in
tests/test_emulated_replay.py): a token bucket of rate R and depth D lets at most D + R x t bytes through in t
seconds, so a call that must move B bytes out of node1 (or into it) takes at least (B - D) x 8 / R seconds; the
bytes an all-to-all-v moves across follow from its split matrix (``benchmarks.splits``), whose busiest sender
sends the row's ``bytes``.
"""

from __future__ import annotations

import inspect
import json

import pytest

from conftest import run_process
from emulated_cluster import EmulatedCluster
from microbench.benchmarks.splits import parse


SLOW, RATE_MBIT = "node1", 50
BURST_BYTES = inspect.signature(EmulatedCluster.throttle).parameters["burst_kib"].default * 1024  # tc's kb: KiB
NODE0, NODE1 = (0, 1), (2, 3)  # global ranks on each node (placed node by node)
RUN_LIMIT_S = 240
pytestmark = pytest.mark.timeout(2 * RUN_LIMIT_S + 60)
MODEL = ["--hidden", "128", "--layers", "1", "--heads", "4", "--family", "llama", "--kv-heads", "2", "--experts", "4",
         "--top-k", "2", "--seq", "512", "--vocab", "512", "--micro-batch", "1", "--scheme", "moe", "--dp", "4",
         "--routing", "zipf:1.2", "--iterations", "2", "--json"]


@pytest.fixture(scope="module")
def replays(emulated_cluster, mpi_lib):
    """{ep: summary} of the MoE replay with ep 2 and ep 4, node1 throttled (no open runs: nothing is judged
    against them)."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    out = {}
    for ep in (2, 4):
        cmd, env = emulated_cluster.microbench_command(["replay", *MODEL, "--ep", str(ep)], per_node=2,
                                                       hosts=emulated_cluster.hosts[:2])
        with emulated_cluster.throttled(SLOW, RATE_MBIT):
            proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
        assert proc.returncode == 0, proc.output
        out[ep] = json.loads(proc.stdout)
    return out


def largest(summary: dict, group: str, collective: str) -> dict:
    """The per-call row of the largest call of ``collective`` on ``group``."""
    rows = [c for c in summary["per_call"] if c["group"] == group and c["collective"] == collective]
    assert rows, (group, collective, summary["per_call"])
    return max(rows, key=lambda c: c["bytes"])


def link_floor_s(nbytes: float) -> float:
    """The least time NBYTES one way take through the throttled link (a full bucket to start with)."""
    return max(0.0, nbytes - BURST_BYTES) * 8 / (RATE_MBIT * 1e6)


def crossing_bytes(row: dict, members: tuple[int, ...]) -> float:
    """The most bytes an all-to-all-v row moves one way across the link: out of node1's members to node0's, or in.
    ``members`` are the group's global ranks in group order; the busiest sender sends the row's ``bytes``."""
    count = 1 << 20
    m = parse(row.get("splits", "uniform")).matrix(count, len(members)) / count * row["bytes"]
    on1 = [i for i, r in enumerate(members) if r in NODE1]
    on0 = [i for i, r in enumerate(members) if r in NODE0]
    return max(m[on1][:, on0].sum(), m[on0][:, on1].sum())


def test_an_expert_group_across_the_slow_link_slows_its_all_to_alls(replays):
    # ep 4: the one expert group is ranks 0..3, across the link: each all-to-all-v takes what the link allows
    row = largest(replays[4], "ep", "alltoallv")
    floor = link_floor_s(crossing_bytes(row, (0, 1, 2, 3)))
    assert floor > 0.005, row  # the model's tokens are well above the bucket: the bound is not empty
    assert row["isolated_s_per_call"] >= floor, (row, floor)
    # ep 2: the expert groups (0, 1) and (2, 3) stay inside a node; had one crossed, its all-to-all-v would have
    # taken at least this long
    inside = largest(replays[2], "ep", "alltoallv")
    assert inside["isolated_s_per_call"] < link_floor_s(crossing_bytes(inside, (0, 2))), inside


def test_expert_groups_inside_a_node_leave_the_cost_to_the_groups_that_cross(replays):
    # ep 2: the expert data-parallel group (the experts' gradients, ranks (0, 2) and (1, 3)) crosses: a 2-rank
    # allreduce of B bytes moves at least B bytes each way; the expert group's all-to-all-v does not cross
    edp, ep = largest(replays[2], "edp", "allreduce"), largest(replays[2], "ep", "alltoallv")
    assert edp["isolated_s_per_call"] >= link_floor_s(edp["bytes"]) > 0.005, edp
    assert edp["isolated_s_per_call"] > ep["isolated_s_per_call"], (edp, ep)
    calls = {(c["collective"], c.get("splits")) for c in replays[4]["per_call"] if c["group"] == "ep"}
    assert ("alltoallv", "zipf:1.2") in calls and ("alltoallv", "zipf:1.2/T") in calls

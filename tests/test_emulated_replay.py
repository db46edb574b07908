"""A replay on the emulated cluster (2 nodes x 2 ranks) with one node's link throttled: the slowdown shows
in the group that crosses it.

Layout tp 2 x dp 2 in Megatron order on ranks placed node by node: tensor-parallel groups (0, 1) and (2, 3)
stay inside a node (shared memory), data-parallel groups (0, 2) and (1, 3) cross between the nodes. With
node1 capped at 50 Mbit/s each way the data-parallel group's time grows by two orders of magnitude (measured
0.48 ms -> 195 ms for this model) while the tensor-parallel group's stays (0.52 -> 0.55 ms).

The tests judge the throttled run against what the throttle implies, not against the open run (whose times a
loaded machine inflates: 23 ms instead of 0.48 ms was seen): a token bucket of rate R and depth D lets at most
D + R x t bytes through in t seconds, and a 2-rank allreduce of B bytes moves at least B bytes each way between
its ranks (each must end with the sum of the other's B bytes), so a call whose ranks sit on both sides of the link
takes at least (B - D) x 8 / R seconds. Load only adds to that.
"""

from __future__ import annotations

import inspect
import json

import pytest

from conftest import run_process
from emulated_cluster import EmulatedCluster

SLOW, RATE_MBIT = "node1", 50
BURST_BYTES = inspect.signature(EmulatedCluster.throttle).parameters["burst_kib"].default * 1024  # tc's kb: KiB
RUN_LIMIT_S = 180
pytestmark = pytest.mark.timeout(RUN_LIMIT_S + 60)
MODEL = ["--hidden", "128", "--layers", "1", "--heads", "4", "--seq", "64", "--vocab", "512",
         "--scheme", "tp", "--tp", "2", "--dp", "2", "--iterations", "2", "--json"]


@pytest.fixture(scope="module")
def replays(emulated_cluster, mpi_lib):
    """{"throttled": summary} of the replay with node1 throttled (no open run: nothing is judged against it)."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    cmd, env = emulated_cluster.microbench_command(["replay", *MODEL], per_node=2,
                                                   hosts=emulated_cluster.hosts[:2])
    with emulated_cluster.throttled(SLOW, RATE_MBIT):
        proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
    assert proc.returncode == 0, proc.output
    return {"throttled": json.loads(proc.stdout)}


def link_floor_s(nbytes: int) -> float:
    """The least time NBYTES each way take through the throttled link (a full bucket to start with)."""
    return max(0, nbytes - BURST_BYTES) * 8 / (RATE_MBIT * 1e6)


def group_rows(summary: dict, group: str) -> list[dict]:
    return [c for c in summary["per_call"] if c["group"] == group]


def test_the_group_that_crosses_the_throttled_link_slows_down_and_the_other_does_not(replays):
    slow = replays["throttled"]
    dp, tp = group_rows(slow, "dp"), group_rows(slow, "tp")
    assert {c["collective"] for c in dp + tp} == {"allreduce"} and {c["group_ranks"] for c in dp + tp} == {2}
    dp_floor = sum(c["calls"] * link_floor_s(c["bytes"]) for c in dp)
    assert dp_floor > 0.02, dp  # the model's gradients are well above the bucket: the bound is not empty
    # dp crosses the link: its calls take at least what the link allows for their bytes, and so does the iteration
    assert slow["per_group_s"]["dp"] >= dp_floor, (slow["per_group_s"], dp_floor)
    assert slow["wall_s"] >= dp_floor
    # tp does not: it moves more bytes an iteration than dp, and in less time than dp's calls take
    assert sum(c["calls"] * c["bytes"] for c in tp) > sum(c["calls"] * c["bytes"] for c in dp)
    assert slow["per_group_s"]["tp"] < slow["per_group_s"]["dp"], slow["per_group_s"]


def test_the_calibrated_per_call_latencies_see_the_link_too(replays):
    """The same launch's isolated latency of the data-parallel allreduce carries the throttled link: at least
    what the link allows for its bytes."""
    rows = group_rows(replays["throttled"], "dp")
    largest = max(rows, key=lambda c: c["bytes"])
    assert largest["isolated_s_per_call"] >= link_floor_s(largest["bytes"]) > 0.02, largest

"""A replay on the emulated cluster (2 nodes x 2 ranks) with one node's link throttled: the slowdown shows
in the group that crosses it.

Layout tp 2 x dp 2 in Megatron order on ranks placed node by node: tensor-parallel groups (0, 1) and (2, 3)
stay inside a node (shared memory), data-parallel groups (0, 2) and (1, 3) cross between the nodes. With
node1 capped at 50 Mbit/s each way the data-parallel group's time grows by two orders of magnitude (measured
0.48 ms -> 195 ms for this model) while the tensor-parallel group's stays (0.52 -> 0.55 ms).
"""

from __future__ import annotations

import json

import pytest

from conftest import run_process

SLOW, RATE_MBIT = "node1", 50
RUN_LIMIT_S = 180
pytestmark = pytest.mark.timeout(2 * RUN_LIMIT_S + 60)
MODEL = ["--hidden", "128", "--layers", "1", "--heads", "4", "--seq", "64", "--vocab", "512",
         "--scheme", "tp", "--tp", "2", "--dp", "2", "--iterations", "2", "--json"]


@pytest.fixture(scope="module")
def replays(emulated_cluster, mpi_lib):
    """{"open": summary, "throttled": summary} of the same replay without and with node1 throttled."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    cmd, env = emulated_cluster.microbench_command(["replay", *MODEL], per_node=2,
                                                   hosts=emulated_cluster.hosts[:2])
    out = {}
    for state in ("open", "throttled"):
        if state == "throttled":
            with emulated_cluster.throttled(SLOW, RATE_MBIT):
                proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
        else:
            proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
        assert proc.returncode == 0, proc.output
        out[state] = json.loads(proc.stdout)
    return out


def test_the_group_that_crosses_the_throttled_link_slows_down_and_the_other_does_not(replays):
    open_, slow = replays["open"]["per_group_s"], replays["throttled"]["per_group_s"]
    dp_slowdown, tp_slowdown = slow["dp"] / open_["dp"], slow["tp"] / open_["tp"]
    assert dp_slowdown > 10 * tp_slowdown, (open_, slow)
    assert replays["throttled"]["wall_s"] > 5 * replays["open"]["wall_s"]


def test_the_calibrated_per_call_latencies_see_the_link_too(replays):
    """The same launch's isolated latency of the data-parallel allreduce carries the throttled link."""
    def dp_calls(summary):
        return {c["bytes"]: c["isolated_s_per_call"] for c in summary["per_call"] if c["group"] == "dp"}

    before, after = dp_calls(replays["open"]), dp_calls(replays["throttled"])
    largest = max(before)
    assert after[largest] > 10 * before[largest], (before, after)

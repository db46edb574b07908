"""Issue 42 on the emulated cluster (2 nodes x 2 ranks, node1's link throttled): a mixture-of-experts layout whose
expert-parallel group crosses the slow link pays for it in its all-to-alls; one whose expert groups stay inside a
node does not, while its expert-data-parallel group (across the nodes) does. Read from the same launch's isolated
per-call latencies (one group at a time): the iteration's per-group seconds also carry the waits for peers that
other groups' slow calls held up.

Ranks placed node by node: 0, 1 on node0 and 2, 3 on node1. Megatron-Core's expert order (etp-ep-edp-pp) makes
the ep groups consecutive ranks: with ep 2 they are (0, 1) and (2, 3), inside the nodes, and the expert-data-
parallel groups (0, 2) and (1, 3) cross; with ep 4 the one ep group spans both nodes.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_process

SLOW, RATE_MBIT = "node1", 50
RUN_LIMIT_S = 240
pytestmark = pytest.mark.timeout(4 * RUN_LIMIT_S + 60)
MODEL = ["--hidden", "128", "--layers", "1", "--heads", "4", "--family", "llama", "--kv-heads", "2", "--experts", "4",
         "--top-k", "2", "--seq", "512", "--vocab", "512", "--micro-batch", "1", "--scheme", "moe", "--dp", "4",
         "--routing", "zipf:1.2", "--iterations", "2", "--json"]


@pytest.fixture(scope="module")
def replays(emulated_cluster, mpi_lib):
    """{(ep, "open" | "throttled"): summary} of the MoE replay with ep 2 and ep 4."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    out = {}
    for ep in (2, 4):
        cmd, env = emulated_cluster.microbench_command(["replay", *MODEL, "--ep", str(ep)], per_node=2,
                                                       hosts=emulated_cluster.hosts[:2])
        for state in ("open", "throttled"):
            if state == "throttled":
                with emulated_cluster.throttled(SLOW, RATE_MBIT):
                    proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
            else:
                proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
            assert proc.returncode == 0, proc.output
            out[(ep, state)] = json.loads(proc.stdout)
    return out


def isolated(summary: dict, group: str, collective: str) -> float:
    """Seconds per call, alone, of the largest call of ``collective`` on ``group`` (slowest rank)."""
    rows = [c for c in summary["per_call"] if c["group"] == group and c["collective"] == collective]
    return max(rows, key=lambda c: c["bytes"])["isolated_s_per_call"]


def slowdown(replays, ep: int, group: str, collective: str) -> float:
    return isolated(replays[(ep, "throttled")], group, collective) / isolated(replays[(ep, "open")], group, collective)


def figures(replays) -> dict:
    return {f"ep{ep} {state}": s["per_group_s"] for (ep, state), s in replays.items()}


def test_an_expert_group_across_the_slow_link_slows_its_all_to_alls(replays):
    across, inside = slowdown(replays, 4, "ep", "alltoallv"), slowdown(replays, 2, "ep", "alltoallv")
    assert across > 10 and across > 5 * inside, (across, inside, figures(replays))


def test_expert_groups_inside_a_node_leave_the_cost_to_the_groups_that_cross(replays):
    # ep 2: the expert data-parallel group (the experts' gradients) crosses, the expert group does not
    assert slowdown(replays, 2, "edp", "allreduce") > 5 * slowdown(replays, 2, "ep", "alltoallv"), figures(replays)
    calls = {(c["collective"], c.get("splits")) for c in replays[(4, "throttled")]["per_call"] if c["group"] == "ep"}
    assert ("alltoallv", "zipf:1.2") in calls and ("alltoallv", "zipf:1.2/T") in calls

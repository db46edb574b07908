"""Finding the slow node across the emulated cluster's nodes: bisection with a throttled link, straggler
attribution and the skew rule with a slowed rank, each naming the node by its host name."""

from __future__ import annotations

import sys

import emulated_cluster as emu
import pytest

from conftest import read_jsonl, results_of, run_process

pytestmark = pytest.mark.skipif(emu.missing() is not None, reason=emu.missing() or "")

SLOW = "node2"
DELAY_US = 20000  #: MICROBENCH_TEST_SLOW_RANK's delay of the straggler test (us)


@pytest.fixture(scope="module")
def cluster(emulated_cluster, mpi_lib):
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    return emulated_cluster


def _run(cluster, nodes: int, per_node: int, args: list[str], env: dict | None = None, timeout: float = 300):
    cmd, extra = cluster.microbench_command(args, per_node, cluster.hosts[:nodes])
    return run_process(cmd, env={**extra, **(env or {})}, timeout=timeout)


def test_bisection_names_the_node_behind_a_throttled_link(cluster, tmp_path):
    # node2 at 50 Mbit/s: any allreduce that includes it waits for its link
    out = tmp_path / "bisect.jsonl"
    with cluster.throttled(SLOW, 50):
        proc = _run(cluster, 4, 1, ["run", "bisect", "--bisect-size", "256K", "-i", "30", "-x", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.output
    (rec,) = [r for r in read_jsonl(out) if r["type"] == "bisect"]
    assert rec["unit"] == "host" and rec["nodes"] == 4
    assert rec["verdict"] == "found" and [s["label"] for s in rec["suspects"]] == [SLOW], rec
    assert len(rec["rounds"]) == 2  # log2(4)
    assert f"# bisect suspect: {SLOW} (rank 2) after 2 round(s)" in proc.stdout


def test_stragglers_and_the_skew_rule_name_the_slowed_node(cluster, tmp_path):
    # 2 ranks per node, filled node by node: rank 4 is on node2; it starts every call DELAY_US late, so the other
    # ranks wait for it and it is the fastest rank (it never waits)
    out = tmp_path / "r.jsonl"
    proc = _run(cluster, 4, 2, ["run", "allreduce", "-m", "8,1K", "-i", "10", "-x", "1", "--straggler-columns",
                                "--out", str(out)], env={"MICROBENCH_TEST_SLOW_RANK": f"4:{DELAY_US}"})
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["size_bytes"] for r in res] == [8, 1024]
    for r in res:
        s = r["stragglers"]
        assert s["fastest"]["rank"] == 4 and s["fastest"]["host"] == SLOW, s
        # judged on what the delay implies, not on ratios of noise (a loaded machine inflates every figure):
        # an iteration lasts at least DELAY_US (rank 4 sleeps that long before its call), and a rank that is not
        # slowed spends it waiting in its call, less only its own lateness; rank 4's calls wait for nobody. So
        # every other node's mean is near DELAY_US and node2's (rank 4 near 0, rank 5 near DELAY_US) about
        # DELAY_US / 2 lower: half of each margin is kept for load
        means = s["node_means_us"]
        others = [m for label, m in means.items() if label != SLOW]
        assert s["listed"] == "all" and len(others) == 3 and SLOW in means, s
        assert min(others) >= DELAY_US / 2 and means[SLOW] <= min(others) - DELAY_US / 4, means
        # the slowed node is flagged, on the fast side, and first (the furthest from the median); another node
        # may be flagged on load noise, never on the fast side of the slowed one
        first, *rest = s["outliers"]
        assert (first["label"], first["side"]) == (SLOW, "fast") and SLOW not in [n["label"] for n in rest], s
        assert all(n["mean_us"] > means[SLOW] for n in rest), s
    spec = tmp_path / "skew.toml"
    # the skew rule (slowest rank's mean / fastest's) at 1.5: the others wait about DELAY_US a call longer than
    # rank 4, which passes only if rank 4's own calls took over 2 x DELAY_US (load made them 4 ms, a skew of 4.8)
    spec.write_text('[[rule]]\nname = "no straggler"\nbenchmark = "allreduce"\nmax_rank_skew = 1.5\n')
    check = run_process([sys.executable, "-m", "microbench", "check", str(out), "--spec", str(spec)], timeout=60)
    assert check.returncode == 1 and SLOW in check.stdout, check.output

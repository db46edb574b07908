"""A throttled node on the emulated cluster: the pairwise link test across nodes, and check against a spec.

node2's veth is capped at 50 Mbit/s each way (tc tbf); one rank per node runs ``microbench run pairs``.
The bandwidth cells of node2's links come out 10 to 90 times below the others.

- Bandwidth outliers are judged on the reciprocal of each cell (the time per byte): in GB/s, which is bounded
  below by 0, a link spread (MAD) above 0.6745 / 3.5 = 19 % of the median put the low threshold below zero
  and no link, not even a dead one, could be flagged. The measured matrices below pin that.
- ``check``'s ``max_outliers`` counts outlier nodes as well as links: with 4 nodes a slow node spoils half the
  links, so only the node rule can see it, and the check must fail and name it.
"""

from __future__ import annotations

import sys

import pytest

from microbench.measure import outliers as outlier_rule

from conftest import REPO, read_jsonl, results_of, run_process

SLOW, RATE_MBIT = "node2", 50
RUN_LIMIT_S = 240  #: run_process's limit for one pairs run across the nodes
# pytest-timeout's limit covers the module fixture's setup too: its two throttled runs, plus a minute of margin
# for the check and the cluster's own commands (the project's 300 s default would cut the second run short)
pytestmark = pytest.mark.timeout(2 * RUN_LIMIT_S + 60)
SPEC = REPO / "scripts" / "specs" / "emulated-cluster.toml"

# Bandwidth matrices (GB/s, 64 KiB, window 8) measured on the emulated cluster with node2 at 50 Mbit/s.
MEASURED_4_NODES = [[None, 0.549, 0.006, 0.119], [0.549, None, 0.006, 0.179], [0.006, 0.006, None, 0.006],
                    [0.119, 0.179, 0.006, None]]  # --serial; the run's node_outliers were empty
MEASURED_5_NODES = [[None, 0.119, 0.006, 0.131, 0.139], [0.119, None, 0.006, 0.408, 0.176],
                    [0.006, 0.006, None, 0.006, 0.006], [0.131, 0.408, 0.006, None, 0.196],
                    [0.139, 0.176, 0.006, 0.196, None]]  # round robin; outliers empty (threshold -0.37 GB/s)


def per_message_us(matrix: list[list[float | None]], size_bytes: int) -> list[list[float | None]]:
    """The bandwidth matrix back in the unit each cell was measured in: the p50 time per message (us)."""
    return [[None if v is None else size_bytes / (v * 1e3) for v in row] for row in matrix]


def links_of(index: int, n: int) -> set[tuple[int, int]]:
    return {(min(index, j), max(index, j)) for j in range(n) if j != index}


def test_link_rule_flags_the_throttled_nodes_links_in_a_measured_matrix():
    found, rule = outlier_rule.outliers(MEASURED_5_NODES, higher_is_worse=False)
    assert {(o.i, o.j) for o in found} == links_of(2, 5), rule


def test_node_rule_names_the_throttled_node_in_a_measured_matrix():
    found, rule = outlier_rule.node_outliers(MEASURED_4_NODES, higher_is_worse=False)
    assert [i for i, _, _ in found] == [2], rule


def test_the_same_rules_on_per_message_time_name_exactly_the_throttled_node():
    found, _ = outlier_rule.outliers(per_message_us(MEASURED_5_NODES, 65536), higher_is_worse=True)
    assert {(o.i, o.j) for o in found} == links_of(2, 5)
    for matrix in (MEASURED_4_NODES, MEASURED_5_NODES):
        assert [i for i, _, _ in outlier_rule.node_outliers(per_message_us(matrix, 65536), higher_is_worse=True)[0]] == [2]


@pytest.fixture(scope="module")
def throttled_runs(emulated_cluster, mpi_lib, tmp_path_factory):
    """{nodes: records file} of ``microbench run pairs`` on 4 and on 5 nodes with node2 throttled (the run's
    terminal output in ``runs["stdout", nodes]``)."""
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    runs = {}
    with emulated_cluster.throttled(SLOW, RATE_MBIT):
        assert f"rate {RATE_MBIT}Mbit" in emulated_cluster.qdisc(SLOW)
        for nodes in (4, 5):
            out = tmp_path_factory.mktemp(f"pairs{nodes}") / "links.jsonl"
            cmd, env = emulated_cluster.microbench_command(
                ["run", "pairs", "-m", "8,64K", "-i", "10", "-x", "2", "-W", "8", "--out", str(out)],
                per_node=1, hosts=emulated_cluster.hosts[:nodes])
            proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
            assert proc.returncode == 0, proc.output
            runs[nodes] = out
            runs["stdout", nodes] = proc.stdout
    return runs


def _bandwidth(path) -> dict:
    found = [r for r in results_of(path) if r["metric"] == "bandwidth"]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("nodes", [4, 5])
def test_every_link_of_the_throttled_node_is_far_below_the_rest(throttled_runs, nodes):
    bw = _bandwidth(throttled_runs[nodes])
    hosts = [f"node{i}" for i in range(nodes)]
    assert bw["unit"] == "host" and bw["labels"] == hosts and bw["participant_ranks"] == list(range(nodes))
    assert read_jsonl(throttled_runs[nodes])[0]["ranks_per_host"] == {h: 1 for h in hosts}
    slow = hosts.index(SLOW)
    cells = {(i, j): v for i, row in enumerate(bw["matrix"]) for j, v in enumerate(row) if j > i}
    assert None not in cells.values()
    throttled = [v for k, v in cells.items() if slow in k]
    others = [v for k, v in cells.items() if slow not in k]
    assert len(throttled) == nodes - 1 and max(throttled) * 5 < min(others), bw["matrix"]
    assert max(throttled) < RATE_MBIT / 8e3  # below the cap in GB/s: the tbf is what limits them


@pytest.mark.parametrize("nodes", [4, 5])
def test_pairs_rules_on_per_message_time_name_the_throttled_node(throttled_runs, nodes):
    bw = _bandwidth(throttled_runs[nodes])
    times = per_message_us(bw["matrix"], bw["size_bytes"])
    assert [bw["labels"][i] for i, _, _ in outlier_rule.node_outliers(times, higher_is_worse=True)[0]] == [SLOW]
    if nodes == 5:  # with 4 nodes half the links are node2's: the median itself moves, as the docs say
        found = outlier_rule.outliers(times, higher_is_worse=True)[0]
        assert {(o.i, o.j) for o in found} == links_of(2, 5)


def test_the_runs_own_table_names_the_throttled_node(throttled_runs):
    """The terminal prints every outlier the record holds: with 4 nodes only the node rule sees node2."""
    text = throttled_runs["stdout", 4]
    bw = _bandwidth(throttled_runs[4])
    assert [n["label"] for n in bw["node_outliers"]] == [SLOW]
    bandwidth = text[text.index("# pairs: bandwidth"):]  # the bandwidth matrix and the lines under it
    node_lines = [line for line in bandwidth.splitlines() if line.startswith("# OUTLIER node")]
    assert len(node_lines) == 1 and node_lines[0].startswith(f"# OUTLIER node {SLOW}: row median"), text
    assert "# no node stands out" not in bandwidth and "no outliers" not in text, text


def _check(path) -> tuple[int, str]:
    proc = run_process([sys.executable, "-m", "microbench", "check", str(path), "--spec", str(SPEC)], timeout=60)
    return proc.returncode, proc.stdout


def test_check_fails_the_throttled_cluster_on_its_slowest_link(throttled_runs):
    code, out = _check(throttled_runs[4])
    assert code == 1
    assert "rule 2 FAIL: slowest link above 160 Mbit/s" in out


def test_check_names_the_throttled_node_and_asks_for_more_runs(throttled_runs):
    """One run flags node2, but the spec's outlier rule asks for 3 runs: INCONCLUSIVE, naming it (issue 39)."""
    code, out = _check(throttled_runs[4])
    assert code == 1 and "rule 1 INCONCLUSIVE: no link stands out" in out and SLOW in out, out
    assert "repeat before acting" in out


def test_check_passes_the_same_cluster_unthrottled(emulated_cluster, tmp_path):
    out = tmp_path / "links.jsonl"
    cmd, env = emulated_cluster.microbench_command(
        ["run", "pairs", "-m", "8,64K", "-i", "10", "-x", "2", "-W", "8", "--out", str(out)],
        per_node=1, hosts=emulated_cluster.hosts[:4])
    assert "tbf" not in emulated_cluster.qdisc(SLOW)
    proc = run_process(cmd, env=env, timeout=RUN_LIMIT_S)
    assert proc.returncode == 0, proc.output
    code, text = _check(out)
    assert "rule 2 PASS: slowest link above 160 Mbit/s" in text, text
    # rule 1 asks for 3 runs (issue 39): on one it is INCONCLUSIVE whatever the noise of unthrottled veth links
    # (0.07 to 0.5 GB/s on a loaded machine) made the run flag, and never a FAIL
    rule1 = next(line for line in text.splitlines() if line.lstrip().startswith("rule 1 "))
    assert rule1.startswith("rule 1 INCONCLUSIVE") and code == 4, text

"""microbench under Open MPI across the emulated cluster's nodes: what the records say about hosts, and
what really crosses a node's link."""

from __future__ import annotations

import json
import subprocess

import emulated_cluster as emu
import pytest

from conftest import read_jsonl, results_of, run_process

pytestmark = pytest.mark.skipif(emu.missing() is not None, reason=emu.missing() or "")


@pytest.fixture(scope="module")
def cluster(emulated_cluster, mpi_lib):
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    return emulated_cluster


def _run(cluster, hosts: int, per_node: int, args: list[str], map_by: str = "slot", env: dict | None = None,
         timeout: float = 180):
    cmd, extra = cluster.microbench_command(args, per_node, cluster.hosts[:hosts], map_by)
    return run_process(cmd, env={**extra, **(env or {})}, timeout=timeout)


def _rx_bytes(cluster, node: str) -> int:
    """Bytes received so far on the node's interface (its link to the switch)."""
    out = subprocess.run(["ip", "-n", cluster.node(node).netns, "-j", "-s", "link", "show", emu.IFACE],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["stats64"]["rx"]["bytes"]


# (nodes, ranks per node, placement, pairs crossing nodes): the point-to-point benchmarks pair rank i with
# rank i + n/2; "slot" fills node0 first (0,1 | 2,3), "node" deals ranks round robin (0,2 | 1,3).
PLACEMENTS = [(2, 2, "slot", 2), (2, 2, "node", 0), (3, 1, "slot", 1), (4, 1, "slot", 2)]


@pytest.mark.parametrize("nodes,per_node,map_by,inter", PLACEMENTS,
                         ids=[f"{n}nodes-{p}per-node-by-{m}" for n, p, m, _ in PLACEMENTS])
def test_run_records_hosts_and_pairs_across_nodes(cluster, tmp_path, nodes, per_node, map_by, inter):
    out = tmp_path / "r.jsonl"
    proc = _run(cluster, nodes, per_node, ["run", "allreduce", "latency", "bw", "-m", "8,64K", "-i", "20", "-x", "2",
                                           "-c", "--out", str(out)], map_by)
    assert proc.returncode == 0, proc.output
    hosts = cluster.hosts[:nodes]
    run = read_jsonl(out)[0]
    assert run["launcher"] == "openmpi" and run["ranks"] == nodes * per_node
    assert run["hosts"] == hosts and run["ranks_per_host"] == {h: per_node for h in hosts}
    listed = ", ".join(f"{h} ({per_node})" for h in hosts)
    assert f"# {nodes * per_node} ranks on {nodes} host(s): {listed}" in proc.stdout
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == \
        [(b, s) for b in ("allreduce", "latency", "bw") for s in (8, 65536)]
    assert all(r["check"] == "pass" for r in res)
    assert [r["pairs_inter_node"] for r in res if r["benchmark"] != "allreduce"] == [inter] * 4


def test_data_between_nodes_crosses_the_nodes_link(cluster, tmp_path):
    size, window, iters, warmup = 1 << 20, 8, 10, 2
    before = _rx_bytes(cluster, "node1")
    proc = _run(cluster, 2, 1, ["run", "bw", "-m", "1M", "-W", str(window), "-i", str(iters), "-x", str(warmup),
                                "--out", str(tmp_path / "bw.jsonl")])
    assert proc.returncode == 0, proc.output
    # rank 0 (node0) sends the windows to rank 1 (node1): at least that much arrived on node1's veth
    assert _rx_bytes(cluster, "node1") - before >= size * window * (iters + warmup)


def test_ranks_inside_one_node_use_shared_memory(cluster, tmp_path):
    before = _rx_bytes(cluster, "node0")
    proc = _run(cluster, 1, 2, ["run", "bw", "-m", "1M", "-W", "8", "-i", "10", "-x", "2",
                                "--out", str(tmp_path / "r.jsonl")], env={"OMPI_MCA_btl": "self,sm"})
    assert proc.returncode == 0, proc.output
    assert read_jsonl(tmp_path / "r.jsonl")[0]["ranks_per_host"] == {"node0": 2}
    assert _rx_bytes(cluster, "node0") - before < 1 << 20  # the 96 MiB stayed off the link


def test_without_tcp_ranks_on_two_nodes_cannot_reach_each_other(cluster, tmp_path):
    proc = _run(cluster, 2, 1, ["run", "latency", "-m", "8", "-i", "5"], env={"OMPI_MCA_btl": "self,sm"}, timeout=120)
    assert proc.returncode != 0
    assert "unable to reach each other" in proc.output or "unreachable" in proc.output.lower(), proc.output

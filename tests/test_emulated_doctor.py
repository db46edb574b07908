"""microbench doctor on the emulated cluster (4 nodes, tests/emulated_cluster.py): a healthy cluster passes every
layer, launched from outside the launcher (``microbench doctor -- mpiexec ...`` on node0) and under it
(``mpiexec ... microbench doctor``, rank 0 forking the coordinator); then one fault of node2 at a time, injected the
way it happens, is named at its layer and at node2 alone, within 30 s of the doctor's start (the record's
``wall_s``: the issue's bound, far above the 2 to 16 s these take here, so a guard rather than a timing).

| fault | how it is made | layer |
|---|---|---|
| the node's link down | its interface set down (a pulled cable) | 1 launch |
| another microbench | a copy of ``microbench/__init__.py`` with another version bound over it on node2 | 2 software |
| another MPI | a copy of libmpi whose version string says v4.1.6, bound over the library on node2 | 2 software |
| a rank that stalls at MPI init | the test hook ``MICROBENCH_TEST_DOCTOR_STALL=2:mpi_init`` | 3 mpi |
| a port blocked | TCP to the rendezvous port dropped on its way out of node2 (tc filter) | 4 network |
| a wrong interface for the bootstrap | node2's interface named ens3, GLOO_SOCKET_IFNAME=emu0 for every rank | 4 network |
| a throttled link | tc tbf at 50 Mbit/s on node2's link | 7 bandwidth |
"""

from __future__ import annotations

import importlib.util

import os
import sys
from pathlib import Path

import pytest

import microbench
from microbench.doctor import network

from conftest import read_jsonl, run_process

NODES, FAULTY = 4, "node2"
RUN_LIMIT_S = 120  #: run_process's hang guard for one doctor launch
WITHIN_S = 30  #: the issue's bound on naming a fault

#: every layer passes; the torch layer (6) is skipped where torch is not installed (a newcomer's machine)
HEALTHY = ["pass"] * 5 + ["pass" if importlib.util.find_spec("torch") else "skipped"] + ["pass"]


@pytest.fixture(scope="module")
def cluster(emulated_cluster, mpi_lib):
    if mpi_lib[1].abi != "openmpi":
        pytest.skip(f"the emulated cluster launches with Open MPI's prterun; this environment has {mpi_lib[1].abi}")
    return emulated_cluster


def doctor_on(cluster, tmp_path: Path, *args: str, env: dict | None = None, per_node: int = 1,
              under_launcher: bool = False) -> tuple:
    """``microbench doctor`` over the first 4 nodes: from node0 with the launcher after ``--`` (default), or
    under the launcher; (the finished process, the doctor record)."""
    hosts = cluster.hosts[:NODES]
    out = tmp_path / "doctor.jsonl"
    ours = ["--out", str(out), *args]
    if under_launcher:
        cmd, launch_env = cluster.microbench_command(["doctor", "--rendezvous", str(tmp_path / "meet"), *ours],
                                                     per_node=per_node, hosts=hosts)
    else:
        launcher, launch_env = cluster.mpiexec_args(per_node * NODES, per_node, hosts)
        cmd = cluster.command(hosts[0], [sys.executable, "-m", "microbench", "doctor", *ours, "--", *launcher])
    done = run_process(cmd, env={**launch_env, **(env or {})}, timeout=RUN_LIMIT_S)
    records = read_jsonl(out) if out.exists() else []
    assert records, done.output
    return done, records[-1]


def assert_named(done, rec: dict, layer: int, words: str) -> None:
    """The doctor failed at ``layer`` naming node2 alone, with ``words`` in its summary, within 30 s."""
    assert done.returncode == 1, done.output
    assert rec["verdict"] == "fail" and rec["failed_layer"] == layer, done.output
    failed = rec["layers"][layer - 1]
    assert {f["host"] for f in failed["findings"] if not f["note"]} == {FAULTY}, failed
    assert words in failed["summary"], failed
    assert f"doctor: FAIL at layer {layer}" in done.stdout and FAULTY in done.stdout.splitlines()[-1]
    assert rec["wall_s"] < WITHIN_S, rec["wall_s"]


def test_a_healthy_cluster_passes_every_layer(cluster, tmp_path):
    done, rec = doctor_on(cluster, tmp_path)
    assert done.returncode == 0, done.output
    assert rec["verdict"] == "pass" and rec["hosts"] == cluster.hosts[:NODES]
    assert [layer["status"] for layer in rec["layers"]] == HEALTHY, done.output
    network_ = rec["layers"][3]["details"]
    assert {c["gloo"] for c in network_["chosen"].values()} == {"emu0"}  # the node's own interface, not lo
    assert len(rec["layers"][6]["details"]["matrix_gbps"]) == NODES
    assert done.stdout.splitlines()[-1].startswith("doctor: PASS") and rec["wall_s"] < WITHIN_S


def test_a_healthy_cluster_passes_under_the_launcher_with_two_ranks_a_node(cluster, tmp_path):
    done, rec = doctor_on(cluster, tmp_path, per_node=2, under_launcher=True)
    assert done.returncode == 0, done.output
    assert rec["ranks"] == 2 * NODES and rec["ranks_per_host"] == {h: 2 for h in cluster.hosts[:NODES]}
    assert [layer["status"] for layer in rec["layers"]] == HEALTHY, done.output
    assert not list((tmp_path / "meet").glob("coordinator-*")), "rank 0 withdraws the address it published"


def test_a_nodes_link_down_is_named_at_the_launch(cluster, tmp_path):
    with cluster.link_down(FAULTY):
        done, rec = doctor_on(cluster, tmp_path)
    assert_named(done, rec, 1, f"its message names {FAULTY}")
    assert rec["ranks"] == 0 and rec["layers"][0]["details"]["launcher_status"] != 0


@pytest.mark.parametrize("what", ["microbench", "MPI library"])
def test_a_node_with_another_version_is_named_at_the_software(cluster, mpi_lib, tmp_path, what):
    if what == "microbench":
        target = Path(microbench.__file__)
        other = tmp_path / "__init__.py"
        other.write_text(target.read_text().replace(f'"{microbench.__version__}"', '"0.0.9"'))
        words = "microbench 0.0.9 where the other ranks have"
    else:
        target = Path(os.path.realpath(mpi_lib[1].path))
        data = bytearray(target.read_bytes())
        old, new = b"Open MPI v%d.%d.%d\x00", b"Open MPI v4.1.6\x00\x00\x00\x00"  # the same length, another version
        assert data.count(old) == 1, "this libmpi builds its version string otherwise"
        data[data.find(old):data.find(old) + len(old)] = new
        other = tmp_path / target.name
        other.write_bytes(bytes(data))
        words = "MPI library Open MPI v4.1.6 where the other ranks have Open MPI v"
    with cluster.bound(FAULTY, other, target):
        done, rec = doctor_on(cluster, tmp_path)
    assert_named(done, rec, 2, words)


def test_a_rank_that_stalls_at_mpi_init_is_named(cluster, tmp_path):
    stall = {"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_DOCTOR_STALL": "2:mpi_init"}  # rank 2 is node2's
    done, rec = doctor_on(cluster, tmp_path, env=stall)
    assert_named(done, rec, 3, "rank 2 stopped at the start of layer 3 (mpi)")
    assert "wait inside MPI_Init" in rec["layers"][2]["summary"]


def test_a_port_blocked_on_a_node_is_named_at_the_network(cluster, tmp_path):
    # the doctor's store port: MASTER_PORT, else torchrun's default (tests/conftest.py gives each pytest-xdist
    # worker a MASTER_PORT of its own)
    port = int(os.environ.get("MASTER_PORT") or network.DEFAULT_STORE_PORT)
    with cluster.port_blocked(FAULTY, port):
        done, rec = doctor_on(cluster, tmp_path)
    assert_named(done, rec, 4, f"{FAULTY} cannot reach the rendezvous node0:{port}")
    assert "a firewall drops it" in rec["layers"][3]["summary"]


def test_a_wrong_bootstrap_interface_is_named_at_the_network(cluster, tmp_path):
    with cluster.renamed(FAULTY, "ens3"):
        done, rec = doctor_on(cluster, tmp_path, env={"GLOO_SOCKET_IFNAME": "emu0"})
    assert_named(done, rec, 4, f"{FAULTY}: GLOO_SOCKET_IFNAME=emu0 names no interface there")


def test_a_throttled_link_is_named_at_the_bandwidth(cluster, tmp_path):
    with cluster.throttled(FAULTY, 50):
        done, rec = doctor_on(cluster, tmp_path)
    assert_named(done, rec, 7, f"{FAULTY}: its best pair moves")
    assert [layer["status"] for layer in rec["layers"][:6]] == HEALTHY[:6]  # slow, not broken

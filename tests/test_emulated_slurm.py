"""microbench under Slurm across the emulated cluster: a slurmd per node (its own NodeName and NodeAddr),
slurmctld and the clients on node0; srun -N 2 and the acceptance sbatch script on 2 nodes."""

from __future__ import annotations

import importlib.util
import sys

import emulated_cluster as emu
import pytest
import slurm_cluster
from test_slurm import assert_campaign_complete, srun_mpi  # noqa: F401 (srun_mpi: a fixture on this module's cluster)

from conftest import read_jsonl, results_of, run_process

why_not = emu.missing() or slurm_cluster.missing()
pytestmark = pytest.mark.skipif(why_not is not None, reason=why_not or "")


@pytest.fixture(scope="module")
def cluster(emulated_cluster, tmp_path_factory):
    """Slurm on the first two emulated nodes."""
    nodes = [(n.name, n.address) for n in emulated_cluster.nodes[:2]]
    c = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("emulated-slurm"), nodes, emulated_cluster.command)
    c.start()
    yield c
    c.stop()


@pytest.mark.parametrize("distribution,inter", [("block", 2), ("cyclic", 0)])
def test_srun_on_two_nodes_records_the_hosts(emulated_cluster, cluster, srun_mpi, tmp_path, distribution, inter):
    out = tmp_path / "r.jsonl"
    cmd = cluster.client(["srun", f"--mpi={srun_mpi}", "-N", "2", "--ntasks-per-node=2",
                          f"--distribution={distribution}", sys.executable, "-m", "microbench", "run", "allreduce",
                          "latency", "-m", "8,1K", "-i", "10", "-c", "--out", str(out)])
    proc = run_process(cmd, env={**cluster.env, **emulated_cluster.mpi_env()}, timeout=180)
    assert proc.returncode == 0, proc.output + cluster.log_tail()
    run = read_jsonl(out)[0]
    assert run["launcher"] == "srun" and run["ranks"] == 4
    assert run["hosts"] == ["node0", "node1"] and run["ranks_per_host"] == {"node0": 2, "node1": 2}
    assert run["slurm"]["nodelist"] == "node[0-1]" and run["slurm"]["tasks_per_node"] == "2(x2)"
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == \
        [("allreduce", 8), ("allreduce", 1024), ("latency", 8), ("latency", 1024)]
    assert all(r["check"] == "pass" for r in res)
    # block: tasks 0,1 on node0 and 2,3 on node1, so both pairs (0,2), (1,3) cross; cyclic: neither does
    assert [r["pairs_inter_node"] for r in res if r["benchmark"] == "latency"] == [inter] * 2


def test_acceptance_sbatch_on_two_nodes(emulated_cluster, cluster, srun_mpi, tmp_path):
    job, text, out = cluster.acceptance(tmp_path, srun_mpi, ["-N", "2", "--ntasks-per-node=1"],
                                      env=emulated_cluster.mpi_env())
    assert "check exit 0" in text, text[-3000:] + cluster.log_tail()
    mpi, pairs = assert_campaign_complete(out, job)
    assert mpi[0]["hosts"] == ["node0", "node1"] and mpi[0]["slurm"]["nodelist"] == "node[0-1]"
    # the campaign runs torch.distributed where torch is installed (assert_campaign_complete checks the step ran):
    # gloo across the nodes, rank 0's store found by its hostname
    if importlib.util.find_spec("torch") is not None:
        assert read_jsonl(out / "torch.jsonl")[0]["hosts"] == ["node0", "node1"]
    assert all(r["pairs_inter_node"] == 1 for r in mpi if r["type"] == "result" and r["benchmark"] == "latency")
    assert all(p["unit"] == "host" and p["labels"] == ["node0", "node1"] for p in pairs)

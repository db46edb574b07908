"""microbench under a real (one-node) Slurm: srun launches and an sbatch script from scripts/."""

from __future__ import annotations

import sys

import pytest

import slurm_cluster
from conftest import read_jsonl, results_of, run_process

why_not = slurm_cluster.missing()
pytestmark = pytest.mark.skipif(why_not is not None, reason=why_not or "")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def srun_mpi():
    """The PMI flavour srun must offer this MPI: pmix for Open MPI, pmi2 for MPICH."""
    from microbench.backends.mpi import import_mpi, library

    return "pmix" if library(import_mpi(initialize=False)).abi == "openmpi" else "pmi2"


def test_srun_two_tasks_records_the_job(cluster, srun_mpi, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = run_process(["srun", f"--mpi={srun_mpi}", "-n", "2", sys.executable, "-m", "microbench", "run",
                        "allreduce", "latency", "-m", "8:1K", "-i", "20", "--check", "--out", str(out)],
                       env=cluster.env, timeout=180)
    assert proc.returncode == 0, proc.output + cluster.log_tail()
    run = read_jsonl(out)[0]
    assert run["launcher"] == "srun" and run["ranks"] == 2
    slurm = run["slurm"]
    assert slurm["job_id"].isdigit() and slurm["nodelist"] == cluster.host and slurm["tasks_per_node"] == "2"
    assert slurm["ntasks"] == "2"
    res = results_of(out)
    assert len(res) == 16 and all(r["check"] == "pass" for r in res)
    assert all(r["pairs_inter_node"] == 0 for r in res if r["benchmark"] == "latency")


def test_srun_bad_input_ends_every_task(cluster, srun_mpi):
    proc = run_process(["srun", f"--mpi={srun_mpi}", "-n", "2", sys.executable, "-m", "microbench", "run",
                        "allreduce", "-m", "1M:1K"], env=cluster.env, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("microbench: error:") == 1

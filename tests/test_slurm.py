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
def srun_mpi(cluster):
    """The PMI flavour srun must offer this MPI: pmix for Open MPI, pmi2 for MPICH."""
    from microbench.backends.mpi import import_mpi, library

    flavour = "pmix" if library(import_mpi(initialize=False)).abi == "openmpi" else "pmi2"
    listed = run_process(["srun", "--mpi=list"], env=cluster.env, timeout=30).output
    if flavour not in listed or "can not load" in listed:
        pytest.skip(f"this Slurm cannot start {flavour} tasks (srun --mpi=list: {listed.strip()!r}); "
                    f"for pmix: apt-get install libpmix-dev")
    return flavour


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


def test_acceptance_sbatch_campaign(cluster, srun_mpi, tmp_path):
    from conftest import REPO

    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = ["allreduce", "latency"]\nrequire_check = true\n'
                    '[[rule]]\nbenchmark = "latency"\nsizes = "8"\nmax_latency_us = 100000\n')
    out = tmp_path / "campaign"
    env = {**cluster.env, "MB_OUT": str(out), "MB_SIZES": "8:1K", "MB_ITERS": "10", "MB_REPEATS": "1",
           "MB_SPEC": str(spec), "MB_SRUN_MPI": srun_mpi, "MB_PYTHON": sys.executable}
    log = tmp_path / "job.out"
    proc = run_process(["sbatch", "--parsable", "-N", "1", "-n", "2", "--ntasks-per-node=2", f"--chdir={REPO}", f"--output={log}",
                        str(REPO / "scripts" / "launch" / "acceptance.sbatch")], env=env, timeout=60)
    assert proc.returncode == 0, proc.output
    job = proc.stdout.strip().split(";")[0]
    cluster.wait_job(job, timeout=600)
    text = log.read_text()
    assert "check exit 0" in text, text[-3000:] + cluster.log_tail()
    mpi = read_jsonl(out / "mpi.jsonl")
    assert mpi[0]["slurm"]["job_id"] == job and mpi[-1]["status"] == "complete"
    assert {r["benchmark"] for r in mpi if r["type"] == "result"} >= {"allreduce", "latency", "bw", "bibw"}
    pairs = [r for r in read_jsonl(out / "pairs.jsonl") if r["type"] == "result"]
    assert [r["metric"] for r in pairs] == ["latency", "bandwidth"]
    assert any((out / "plots").glob("allreduce.png")) and any((out / "plots").glob("pairs-latency-*.png"))
    assert (out / "junit.xml").read_text().startswith("<?xml")
    try:
        import torch  # noqa: F401
        torch_recs = read_jsonl(out / "torch.jsonl")
        assert torch_recs[0]["torch"]["backend"] == "gloo" and torch_recs[-1]["status"] == "complete"
    except ImportError:
        assert not (out / "torch.jsonl").exists()

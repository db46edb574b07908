"""microbench under a real (one-node) Slurm: srun launches and an sbatch script from scripts/."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import slurm_cluster

from conftest import assert_figure, read_jsonl, results_of, run_process

why_not = slurm_cluster.missing()
pytestmark = pytest.mark.skipif(why_not is not None, reason=why_not or "")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def srun_mpi(cluster, mpi_lib):
    """The PMI flavour srun must offer this MPI: pmix for Open MPI, pmi2 for MPICH."""
    flavour, why = cluster.srun_mpi(mpi_lib[1].abi)
    if why:
        pytest.skip(why)
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
    # one line, from rank 0, saying what is wrong; every task ends within seconds, none waits for the others
    errors = [line for line in proc.stderr.splitlines() if line.startswith("microbench: error:")]
    assert errors == ["microbench: error: bad size range '1M:1K': MIN (1048576 B) is larger than MAX (1024 B)"], \
        proc.output
    # a task left waiting would hang until its watchdog's default --timeout of 600 s, 5 times run_process's 120
    assert "timeout:" not in proc.stderr, proc.output


def test_acceptance_sbatch_campaign(cluster, srun_mpi, tmp_path):
    # MB_TORCH=none leaves the torch.distributed step out (the 2-node campaign of tests/test_emulated_slurm.py
    # runs it across the nodes): it is the step a site without torch sets, and the costliest here
    job, text, out = cluster.acceptance(tmp_path, srun_mpi, ["-N", "1", "-n", "2", "--ntasks-per-node=2"],
                                        env={"MB_TORCH": "none"})
    assert "check exit 0" in text, text[-3000:] + cluster.log_tail()
    assert_campaign_complete(out, job, torch_step=False)


def assert_campaign_complete(out, job: str, torch_step: bool = True) -> tuple[list[dict], list[dict]]:
    """Every step of scripts/launch/acceptance.sbatch left its output (the torch.distributed step where torch is
    installed and ``torch_step``); (MPI records, pairs results)."""
    mpi = read_jsonl(out / "mpi.jsonl")
    assert mpi[0]["slurm"]["job_id"] == job and mpi[-1]["status"] == "complete"
    assert {r["benchmark"] for r in mpi if r["type"] == "result"} >= {"allreduce", "latency", "bw", "bibw"}
    pairs = [r for r in read_jsonl(out / "pairs.jsonl") if r["type"] == "result"]
    assert [r["metric"] for r in pairs] == ["latency", "bandwidth"]
    figures = [out / "plots" / "allreduce.png", *sorted((out / "plots").glob("pairs-latency-*.png"))]
    assert len(figures) >= 2, sorted((out / "plots").iterdir())
    for figure in figures:
        assert_figure(figure)
    assert (out / "junit.xml").read_text().startswith("<?xml")
    if torch_step and importlib.util.find_spec("torch") is not None:
        torch_recs = read_jsonl(out / "torch.jsonl")
        assert torch_recs[0]["torch"]["backend"] == "gloo" and torch_recs[-1]["status"] == "complete"
    else:
        assert not (out / "torch.jsonl").exists()
    return mpi, pairs

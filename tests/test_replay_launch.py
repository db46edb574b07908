"""``replay --np`` and ``run --np`` go through one path (``cluster.launch.start_ranks``): the same refusals in the
parent, before any rank starts, and the ranks themselves ignore ``--np``."""

from __future__ import annotations

import pytest

from conftest import microbench
from microbench.cluster import launch
from test_replay_mpi import MODEL

VERBS = [("run", ["allreduce", "-m", "8", "-i", "2"]), ("replay", [*MODEL, "--scheme", "ddp", "--dp", "2"])]


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("microbench: error:")]


@pytest.mark.parametrize("verb,args", VERBS)
def test_np_below_one_is_the_same_line_from_both_verbs(verb, args):
    result = microbench(verb, "--np", "0", *args, timeout=60)
    assert result.returncode == 2 and _errors(result) == ["microbench: error: --np must be at least 1 (got 0)"]
    assert "Traceback" not in result.stderr and "prterun" not in result.stderr


@pytest.mark.parametrize("verb,args,message", [
    ("run", ["broadcast", "-m", "8", "--root", "5"], "--root 5 is not a rank of this 2-rank run"),
    ("replay", [*MODEL, "--scheme", "tp", "--tp", "4"], "--tp 4 x --pp 1 x --dp 1 = 4 ranks, but the job has 2"),
])
def test_the_parent_refuses_what_the_ranks_would_before_starting_them(verb, args, message):
    result = microbench(verb, "--np", "2", *args, timeout=60)
    assert result.returncode == 2 and len(_errors(result)) == 1 and message in _errors(result)[0], result.stderr
    assert "prterun" not in result.stderr and "Traceback" not in result.stderr


def test_np_makes_a_parent_only_outside_a_launcher(monkeypatch):
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    assert launch.is_np_parent(2) and not launch.is_np_parent(None)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")  # a rank mpiexec started (the parent's own ranks included)
    assert not launch.is_np_parent(2)

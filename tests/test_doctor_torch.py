"""microbench doctor under torchrun (2 local ranks): launched by torchrun (rank 0 forks the coordinator, the ranks
meet through a folder named after torchrun's run id) and from outside it (``microbench doctor -- torchrun ...``).
torchrun starts no MPI job: layers 3 and 7 are skipped, and layer 6 joins torchrun's own store."""

from __future__ import annotations

import shutil
import socket
import sys

import pytest

from conftest import read_jsonl, run_process

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")

RUN_LIMIT_S = 120


def free_port() -> int:
    """A port nothing listens on now (torchrun's --master-port 0 leaves its workers no store: they hang)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("outside", [False, True])
def test_doctor_under_torchrun_skips_the_mpi_layers_and_passes_the_rest(tmp_path, outside):
    exe = shutil.which("torchrun")
    assert exe, "torchrun is installed with torch"
    out = tmp_path / "doctor.jsonl"
    launcher = [exe, "--nproc-per-node=2", f"--master-port={free_port()}"]
    ours = ["doctor", "--out", str(out)]
    cmd = ([sys.executable, "-m", "microbench", *ours, "--", *launcher] if outside else
           [*launcher, "--no-python", "microbench", *ours, "--rendezvous", str(tmp_path / "meet")])
    done = run_process(cmd, timeout=RUN_LIMIT_S)
    assert done.returncode == 0, done.output
    rec = read_jsonl(out)[-1]
    assert rec["launcher"] == "torchrun" and rec["ranks"] == 2 and rec["verdict"] == "pass"
    assert [layer["status"] for layer in rec["layers"]] == ["pass", "pass", "skipped", "pass", "pass", "pass",
                                                            "skipped"], done.output
    assert rec["layers"][5]["details"]["backend"] == "gloo"
    assert "doctor: PASS: every layer that ran passed (2 skipped" in done.stdout

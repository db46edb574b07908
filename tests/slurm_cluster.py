"""A one-node Slurm cluster for the tests: slurmctld and slurmd started by hand, no munge (auth/none).

Debian's slurmctld, slurmd and slurm-client (and libpmix-dev for srun --mpi=pmix) are installed by
.ci/run where apt is available; without them the Slurm tests skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo")


def missing() -> str | None:
    """Why a cluster cannot be started here (None when it can)."""
    absent = [d for d in DAEMONS if not shutil.which(d)]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing; apt-get install slurmctld slurmd slurm-client)"
    if os.geteuid() != 0:
        return "the test cluster runs slurmd as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """Start with ``start()``; ``env`` holds SLURM_CONF for clients; ``stop()`` ends jobs and daemons."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.host = socket.gethostname().split(".")[0]

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def _write_conf(self) -> None:
        for d in ("state", "spool"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        cpus = os.cpu_count() or 1
        r = self.root
        self.conf.write_text(f"""ClusterName=microbench-test
SlurmctldHost={self.host}
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
KillWait=5
NodeName={self.host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")

    def start(self, timeout: float = 30) -> None:
        self._write_conf()
        env = {**os.environ, **self.env}
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.root / f"{daemon}.out", "w")
            self.procs.append(subprocess.Popen([daemon, "-D", "-f", str(self.conf)], stdout=log, stderr=log, env=env,
                                               start_new_session=True))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
            if out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the test Slurm cluster did not come up: {self.log_tail()}")

    def log_tail(self) -> str:
        text = ""
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.root / name
            if p.exists():
                text += f"\n== {name}\n" + "\n".join(p.read_text().splitlines()[-15:])
        return text

    def stop(self) -> None:
        env = {**os.environ, **self.env}
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=env)
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs = []

    def wait_job(self, job_id: str, timeout: float) -> None:
        """Wait until the job has left the queue."""
        env = {**os.environ, **self.env}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, env=env)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.5)
        subprocess.run(["scancel", job_id], env=env)
        raise TimeoutError(f"job {job_id} still queued or running after {timeout} s")

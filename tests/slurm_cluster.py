"""A Slurm cluster for the tests: slurmctld and slurmd started by hand, no munge (auth/none).

By default one node, this machine. Given the nodes of an emulated cluster (``emulated_cluster.py``), one
slurmd per node runs inside that node's namespaces under its own NodeName and NodeAddr, slurmctld and the
client commands on the first node; spool, log and TmpFS directories are per node (``%n``), since the
nodes share one filesystem (srun's PMIx plugin keeps per-step directories under TmpFS).

Debian's slurmctld, slurmd and slurm-client (and libpmix-dev for srun --mpi=pmix) are installed by
.ci/run where apt is available; without them the Slurm tests skip with the reason.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

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
    """Start with ``start()``; ``env`` holds SLURM_CONF for clients, ``client(argv)`` runs one where the
    controller is; ``stop()`` ends jobs and daemons.

    ``nodes``: [(NodeName, NodeAddr)] (default: this host, no address); ``on_node(name)``: the command
    prefix that runs a program on that node (default: none, this host)."""

    def __init__(self, root: Path, nodes: list[tuple[str, str | None]] | None = None,
                 on_node: Callable[[str], list[str]] | None = None):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.nodes = nodes or [(socket.gethostname().split(".")[0], None)]
        self.host = self.nodes[0][0]
        self.on_node = on_node or (lambda name: [])

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def client(self, argv: list[str]) -> list[str]:
        """A client command (srun, sbatch, squeue...) run on the controller's node."""
        return [*self.on_node(self.host), *argv]

    def _write_conf(self) -> None:
        """slurm.conf. Job ids start at a random number, not at 1 as in every fresh test cluster before: Open MPI
        names its shared-memory segments (/dev/shm/sm_segment.HOST.UID.JOBID.RANK) after a hash of the job's
        PMIx namespace, slurm.pmix.JOBID.STEP, so job 1 of one session met the segments job 1 of another left
        behind (a killed job leaves them), and its ranks crashed in the shared-memory transport."""
        (self.root / "state").mkdir(parents=True, exist_ok=True)
        for name, _ in self.nodes:
            for d in ("spool", "tmp"):
                (self.root / f"{d}-{name}").mkdir(parents=True, exist_ok=True)
        cpus = os.cpu_count() or 1
        r = self.root
        addr = dict(self.nodes)
        controller = self.host + (f"({addr[self.host]})" if addr[self.host] else "")
        node_lines = "\n".join(f"NodeName={name}" + (f" NodeAddr={a}" if a else "") + f" CPUs={cpus} State=UNKNOWN"
                               for name, a in self.nodes)
        self.conf.write_text(f"""ClusterName=microbench-test
SlurmctldHost={controller}
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
FirstJobId={random.randrange(1000, 60_000_000)}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool-%n
TmpFS={r}/tmp-%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
KillWait=5
{node_lines}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")

    def start(self, timeout: float = 30) -> None:
        self._write_conf()
        env = {**os.environ, **self.env}
        daemons = [("slurmctld", self.host, ["slurmctld"])] + \
            [(f"slurmd-{name}", name, ["slurmd", "-N", name]) for name, _ in self.nodes]
        for label, node, argv in daemons:
            with open(self.root / f"{label}.out", "w") as log:
                self.procs.append(subprocess.Popen([*self.on_node(node), *argv, "-D", "-f", str(self.conf)],
                                                   stdout=log, stderr=log, env=env, start_new_session=True))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = subprocess.run(self.client(["sinfo", "-h", "-N", "-o", "%t"]), capture_output=True, text=True,
                                 env=env)
            states = out.stdout.split()
            if out.returncode == 0 and len(states) == len(self.nodes) and \
                    all(s in ("idle", "mix", "alloc") for s in states):
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the test Slurm cluster did not come up: {self.log_tail()}")

    def log_tail(self) -> str:
        text = ""
        for name in ("slurmctld.log", *(f"slurmd-{n}.log" for n, _ in self.nodes)):
            p = self.root / name
            if p.exists():
                text += f"\n== {name}\n" + "\n".join(p.read_text().splitlines()[-15:])
        return text

    def stop(self) -> None:
        env = {**os.environ, **self.env}
        subprocess.run(self.client(["scancel", "--full", "-u", "root"]), capture_output=True, env=env)
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
            out = subprocess.run(self.client(["squeue", "-h", "-j", job_id]), capture_output=True, text=True,
                                 env=env)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.5)
        subprocess.run(self.client(["scancel", job_id]), env=env)
        raise TimeoutError(f"job {job_id} still queued or running after {timeout} s")

    def srun_mpi(self, abi: str) -> tuple[str, str | None]:
        """srun's PMI plugin for this MPI (pmix for Open MPI, pmi2 for MPICH), and why it cannot be used (or None)."""
        flavour = "pmix" if abi == "openmpi" else "pmi2"
        proc = subprocess.run(self.client(["srun", "--mpi=list"]), capture_output=True, text=True, timeout=30,
                              env={**os.environ, **self.env})
        listed = proc.stdout + proc.stderr
        if flavour not in listed or "can not load" in listed:
            return flavour, (f"this Slurm cannot start {flavour} tasks (srun --mpi=list: {listed.strip()!r}); "
                             f"for pmix: apt-get install libpmix-dev")
        return flavour, None

    def acceptance(self, workdir: Path, srun_mpi: str, sbatch_args: list[str], env: dict | None = None,
                   timeout: float = 600) -> tuple[str, str, Path]:
        """Submit scripts/launch/acceptance.sbatch with two small sizes (8 B and 1 KiB), one repeat and a lenient spec (checked data,
        8 B latency under 0.1 s), and wait for it: (job id, the job's log, its results folder)."""
        repo = Path(__file__).resolve().parent.parent
        spec = workdir / "spec.toml"
        spec.write_text('[[rule]]\nbenchmark = ["allreduce", "latency"]\nrequire_check = true\n'
                        '[[rule]]\nbenchmark = "latency"\nsizes = "8"\nmax_latency_us = 100000\n')
        out, log = workdir / "campaign", workdir / "job.out"
        env = {**os.environ, **(env or {}), **self.env, "MB_OUT": str(out), "MB_SIZES": "8,1K", "MB_ITERS": "10",
               "MB_REPEATS": "1", "MB_SPEC": str(spec), "MB_SRUN_MPI": srun_mpi, "MB_PYTHON": sys.executable}
        proc = subprocess.run(self.client(["sbatch", "--parsable", *sbatch_args, f"--chdir={repo}", f"--output={log}",
                                           str(repo / "scripts" / "launch" / "acceptance.sbatch")]),
                              capture_output=True, text=True, env=env, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch failed: {proc.stdout}{proc.stderr}")
        job = proc.stdout.strip().split(";")[0]
        self.wait_job(job, timeout)
        return job, log.read_text() if log.exists() else "", out

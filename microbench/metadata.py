"""What every run record says about the conditions: time, versions, CPU, Slurm job, transport environment."""

from __future__ import annotations

import datetime as dt
import os
import platform

import numpy as np

import microbench

ENV_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "MPIR_CVAR_", "MPICH_", "UCX_", "FI_", "I_MPI_", "NCCL_",
                 "GLOO_", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MICROBENCH_")


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def relevant_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def slurm_metadata() -> dict | None:
    """The Slurm job this run belongs to (None outside Slurm)."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    keys = {"job_id": "SLURM_JOB_ID", "step_id": "SLURM_STEP_ID", "nodelist": "SLURM_JOB_NODELIST",
            "nnodes": "SLURM_JOB_NUM_NODES", "ntasks": "SLURM_NTASKS", "tasks_per_node": "SLURM_TASKS_PER_NODE",
            "cpus_per_task": "SLURM_CPUS_PER_TASK", "partition": "SLURM_JOB_PARTITION", "cluster": "SLURM_CLUSTER_NAME"}
    return {k: env[v] for k, v in keys.items() if v in env}


def versions() -> dict:
    out = {"microbench": microbench.__version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        import mpi4py

        out["mpi4py"] = mpi4py.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def cpu_model() -> str | None:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None

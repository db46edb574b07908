"""System facts: what every run record says about the conditions (time, versions, CPU, Slurm job, transport
environment) and the memory facts the buffers and the preflight rely on (page size, THP mode, available memory)."""

from __future__ import annotations

import datetime as dt
import mmap
import os
import platform
import re

import numpy as np

import microbench

from microbench.cluster.conditions import split_env


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def relevant_env() -> dict:
    """The recorded environment variables that are conditions (``cluster.conditions``): what may explain a step."""
    return split_env(dict(os.environ))[0]


def per_launch_env() -> dict:
    """The recorded environment variables that differ by launch or only steer the display (never a cause)."""
    return split_env(dict(os.environ))[1]


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


def thp_mode() -> str | None:
    """The kernel's transparent-huge-page mode (always, madvise, never), or None if unknown."""
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else None


def page_size() -> int:
    """Base page size in bytes."""
    return mmap.PAGESIZE


def mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover
        return None


_CAPPED: set[str] = set()  #: the worker variables already noted as capped


def fork_workers(variable: str, limit: int) -> int:
    """How many forked worker processes a tool may start: ``$variable`` if set (a whole number of at least 1; more
    than ``limit`` is read as ``limit``, said once in a note), else the CPUs this process may run on, at most
    ``limit``; 1 where fork is not available or not safe (this process runs more than one thread)."""
    import multiprocessing
    import sys
    import threading

    from microbench.errors import UsageError, printable

    text = os.environ.get(variable, "").strip()
    if text:
        if not (text.isascii() and text.isdigit()) or not text.strip("0"):
            raise UsageError(f"{variable}={printable(text[:40])!r}: expected a whole number of at least 1")
        chosen = int(text) if len(text) <= 18 else limit + 1
        if chosen > limit:
            if variable not in _CAPPED:
                _CAPPED.add(variable)
                print(f"# note: {variable}={printable(text[:40])}: at most {limit} workers are started",
                      file=sys.stderr)
            chosen = limit
    else:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        chosen = min(cpus, limit)
    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return 1
    return chosen

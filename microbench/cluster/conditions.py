"""What may explain a step: the conditions a run records, each with the reason it can change a result, and the
per-launch values that never can (one list; ``gate/conditions.py`` compares runs by it, ``records/build.py``
records the environment by it).

A *condition* describes the system and its software: the MPI library and its build, the versions of
microbench, Python and the packages, torch and its backend, the hosts, the launcher, and the environment
variables that steer the transport. Two runs that differ in one of these may differ in their results because of it.

A *per-launch value* differs between two launches by construction (a temporary file, the working directory, a
job or step id, a process id, a port, a time) or only says how microbench shows and reads things (terminal
width, progress bar, index folder). Such values are kept in the run record's ``per_launch`` block, apart from
the conditions, and never explain a step: if they did, every run would differ from the one before it and every
step would look explained (issue 39: the signal-note path of ``run --np`` did exactly that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One kind of recorded value: how it is named, whether it may explain a step, and why."""

    name: str  #: a run-line field (``MPI``, ``hosts``...) or an environment pattern (``OMPI_MCA_*``)
    explains: bool  #: True: a condition; False: a per-launch value or a display setting
    reason: str


#: The run-line fields that are conditions (``gate.conditions.facts`` flattens them under these names).
FIELDS = (
    Entry("MPI", True, "the MPI library's name and version: a new library changes every collective"),
    Entry("MPI library", True, "the library's whole version text: two builds of one version differ in it"),
    Entry("hosts", True, "other machines, other links, other CPUs"),
    Entry("launcher", True, "mpiexec, srun and torchrun place and bind ranks differently"),
    Entry("backend", True, "MPI or torch.distributed: another transport"),
    Entry("version *", True, "microbench, Python, numpy, mpi4py: the code that times and the code that calls"),
    Entry("torch *", True, "torch's version, its process-group backend and NCCL's version"),
    Entry("env *", True, "an environment variable that steers the transport (the prefixes below)"),
)

#: Environment prefixes recorded at all: the variables that steer the transport (or microbench itself).
RECORDED_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "MPIR_CVAR_", "MPICH_", "UCX_", "FI_", "I_MPI_", "NCCL_",
                     "GLOO_", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MICROBENCH_")

#: Recorded variables that are not conditions: (pattern, reason). Matched on the whole name (``fnmatch``-like:
#: ``*`` is any run of characters). Everything else under ``RECORDED_PREFIXES`` is a condition.
PER_LAUNCH = (
    ("MICROBENCH_SIGNAL_NOTE", "a temporary file each `run --np` launch makes for the signal it may receive"),
    ("MICROBENCH_LAUNCHED_BY", "says which parent started the ranks; the launcher field records how"),
    ("MICROBENCH_PROGRESS", "whether a progress bar is drawn"),
    ("MICROBENCH_COLUMNS", "the terminal's width"),
    ("MICROBENCH_INDEX", "where the gate tools keep their index of decoded files"),
    ("MICROBENCH_READ_WORKERS", "how many processes decode records files"),
    ("MICROBENCH_DRAW_WORKERS", "how many processes draw figures"),
    ("MICROBENCH_MAX_FILE_BYTES", "the largest records file a reader takes"),
    ("MICROBENCH_MAX_TRACE_BYTES", "the largest trace a reader takes"),
    ("MICROBENCH_DEBUG", "whether an internal error prints its traceback"),
    ("MICROBENCH_MASTER_ADDR", "the address torch's rendezvous uses for this launch"),
    ("OMPI_MCA_initial_wdir", "the launch's working directory (a dated folder, ReFrame's stage directory)"),
    ("OMPI_MCA_orte_hnp_uri", "the launch daemon's address and port (Open MPI 4)"),
    ("OMPI_MCA_orte_local_daemon_uri", "the local daemon's address and port (Open MPI 4)"),
    ("OMPI_MCA_orte_precondition_transports", "a random key made for each job (Open MPI 4)"),
    ("OMPI_MCA_orte_*session_dir", "the job's session directory (Open MPI 4)"),
    ("OMPI_MCA_orte_ess_*", "the job's id, node rank and process count as the launcher numbers them (Open MPI 4)"),
    ("OMPI_MCA_ess_base_*", "the job id and this process's rank (Open MPI 4)"),
    ("OMPI_MCA_orte_app_num", "the application context's number (Open MPI 4)"),
    ("OMPI_MCA_orte_launch", "set by the launch daemon for each launch (Open MPI 4)"),
    ("OMPI_MCA_orte_num_nodes", "the job's node count, recorded with the hosts (Open MPI 4)"),
    ("OMPI_MCA_pmix_*", "the PMIx server's address for this job"),
    ("PMIX_MCA_*_uri*", "the PMIx server's address and port"),
    ("*_URI", "an address with a port, made for this launch"),
    ("*_uri", "an address with a port, made for this launch"),
    ("*JOBID*", "a job id"),
    ("*jobid*", "a job id"),
    ("NCCL_COMM_ID", "NCCL's rendezvous address and port for this launch"),
    ("I_MPI_HYDRA_*_FILE", "a file Intel MPI's launcher writes for this launch"),
    ("I_MPI_MPIRUN", "which command started this launch"),
)

_PER_LAUNCH_RE = [(re.compile("^" + ".*".join(map(re.escape, p.split("*"))) + "$"), p, why) for p, why in PER_LAUNCH]


def per_launch_reason(name: str) -> str | None:
    """Why the environment variable ``name`` is a per-launch value (None: it is a condition)."""
    for pattern, _, why in _PER_LAUNCH_RE:
        if pattern.match(name):
            return why
    return None


def recorded(name: str) -> bool:
    """Whether ``microbench run`` records the environment variable ``name`` at all."""
    return name.startswith(RECORDED_PREFIXES)


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(conditions, per-launch values) of the recorded variables of ``env``, each sorted by name."""
    conditions, per_launch = {}, {}
    for name, value in sorted(env.items()):
        if recorded(name):
            (per_launch if per_launch_reason(name) else conditions)[name] = value
    return conditions, per_launch


def table_lines() -> list[str]:
    """The list as text (``microbench info --conditions`` and docs/regressions.md): what may explain a step and
    what never does, each with its reason."""
    lines = ["may explain a step (conditions):"]
    lines += [f"  {e.name}: {e.reason}" for e in FIELDS]
    lines.append(f"  env prefixes: {', '.join(RECORDED_PREFIXES)}")
    lines.append("never explains a step (per-launch values and display settings, kept in per_launch):")
    lines += [f"  {pattern}: {why}" for pattern, why in PER_LAUNCH]
    lines.append("  machine state (load, steal, other processes): may explain a change, never hides one: "
                 "a gate that sees a change the machine's state could explain says INCONCLUSIVE, not PASS")
    return lines

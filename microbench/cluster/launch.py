"""Who am I: rank discovery from the launcher's environment, and self-launch of local ranks.

Read before MPI is initialised, so that errors can be printed by rank 0 only and so that
``--np N`` can start N ranks with the mpiexec that belongs to the installed MPI.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

from microbench.errors import RunError, UsageError

#: (rank, size, local rank, local size) variables of each launcher, most specific first. torchrun comes first
#: when it started this process (TORCHELASTIC_RUN_ID): under ``srun ... torchrun`` its workers inherit the srun
#: task's (and PMIx's) variables, which describe the task, not the worker.
_LAUNCHER_VARS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmix", "PMIX_RANK", None, None, None),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
    ("torchrun-like", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
)
#: Local-rank variables of launchers whose rank variables are read above, most specific first: Open MPI, MPICH
#: hydra, Cray PALS, PMI, MVAPICH, Flux, LSF jsrun, Slurm, torchrun.
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK",
                   "MV2_COMM_WORLD_LOCAL_RANK", "FLUX_TASK_LOCAL_ID", "JSM_NAMESPACE_LOCAL_RANK", "SLURM_LOCALID",
                   "LOCAL_RANK")


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher told it (before any MPI call)."""

    launcher: str | None  #: openmpi, mpich, srun, pmix, torchrun, or None when started alone
    rank: int
    size: int | None  #: None when the launcher does not say (PMIx without a size variable)
    local_rank: int | None
    local_size: int | None
    host: str

    @property
    def under_launcher(self) -> bool:
        return self.launcher is not None


def _int_env(name: str | None, env: dict) -> int | None:
    if not name or name not in env:
        return None
    try:
        return int(env[name])
    except ValueError:
        return None


def _under_srun_step(env: dict) -> bool:
    # The batch script of sbatch has SLURM_PROCID too; only tasks of an srun step have SLURM_STEP_ID
    # other than the batch/extern steps, and SLURM_STEPID is set there as well.
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    return step is not None and step not in ("batch", "extern", "4294967294", "4294967295")


def _launcher_name(found: str, env: dict) -> str:
    """Name the program that started this rank: openmpi, mpich (hydra), srun, pmix, torchrun."""
    if found == "torchrun":  # torchrun's workers, also under srun (the srun task is torchrun itself)
        return "torchrun"
    if found == "openmpi":
        return "openmpi"
    if found == "mpich" and "MPI_LOCALRANKID" in env:
        return "mpich"
    if _under_srun_step(env):
        return "srun"
    return found


def discover(env: dict | None = None) -> LaunchInfo:
    """Read rank, size and local rank from the environment of mpiexec, srun or torchrun."""
    env = os.environ if env is None else env
    host = socket.gethostname()
    for name, rank_var, size_var, local_var, local_size_var in _LAUNCHER_VARS:
        if rank_var not in env:
            continue
        if name == "slurm" and not _under_srun_step(env):
            continue
        if name == "torchrun" and "TORCHELASTIC_RUN_ID" not in env:
            continue
        if name == "torchrun-like":  # RANK/WORLD_SIZE set by hand for torch.distributed's env:// rendezvous
            if "MASTER_ADDR" not in env:
                continue
            name = "torchrun"
        rank = _int_env(rank_var, env)
        if rank is None:
            continue
        local_rank = _int_env(local_var, env)
        if local_rank is None:
            for var in LOCAL_RANK_VARS:
                local_rank = _int_env(var, env)
                if local_rank is not None:
                    break
        size = _int_env(size_var, env)
        if size is None:
            size = _int_env("SLURM_NTASKS", env) if _under_srun_step(env) else None
        return LaunchInfo(_launcher_name(name, env), rank, size, local_rank, _int_env(local_size_var, env), host)
    return LaunchInfo(None, 0, 1, 0, 1, host)


def is_rank0(env: dict | None = None) -> bool:
    """True on the process that should print (rank 0, or a process started alone)."""
    return discover(env).rank == 0


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def mpiexec_command(mpi_prefix: str | None, abi: str, nranks: int) -> tuple[list[str], dict[str, str]]:
    """The mpiexec that belongs to the loaded MPI, its arguments for ``nranks`` local ranks, and env additions.

    ``mpi_prefix`` is the installation prefix of the loaded libmpi (``<prefix>/lib/libmpi.so``);
    its ``bin/mpiexec`` is used so that the launcher always matches the library.
    """
    exe = None
    if mpi_prefix:
        candidate = os.path.join(mpi_prefix, "bin", "mpiexec")
        if os.access(candidate, os.X_OK):
            exe = candidate
    if exe is None:
        exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        raise FileNotFoundError("no mpiexec found beside the MPI library or on PATH")
    args = [exe, "-n", str(nranks)]
    extra_env: dict[str, str] = {}
    if abi == "openmpi":
        if os.geteuid() == 0:
            extra_env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            extra_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if nranks > cpu_count():
            extra_env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
        # The libfabric transport is not needed between local ranks and makes MPI_Init take ~1 s.
        if "OMPI_MCA_btl" not in os.environ:
            extra_env["OMPI_MCA_btl"] = "^ofi"
        if "OMPI_MCA_mtl" not in os.environ:
            extra_env["OMPI_MCA_mtl"] = "^ofi"
    elif abi == "mpich" and nranks <= cpu_count():
        args += ["-bind-to", "core"]
    return args, extra_env


def self_launch_argv(argv: list[str]) -> list[str]:
    """The command each launched rank runs: this Python, this package, the same verb and options."""
    return [sys.executable, "-m", "microbench", *argv]


def is_np_parent(nranks: int | None) -> bool:
    """Whether this process is an ``--np N`` parent: ``--np`` given and no launcher started it. A verb's ranks
    (under mpiexec, srun, torchrun, or started by the parent) ignore ``--np``."""
    return nranks is not None and not discover().under_launcher


def start_ranks(argv: list[str], nranks: int, check: Callable[[], None] | None = None) -> int:
    """The ``--np N`` parent of any verb: refuse N below 1, run ``check()`` (what the verb can refuse before a rank
    exists: a refusal here is one line, as on the ranks), then start N local ranks running ``argv`` without
    ``--np`` under the matching mpiexec (``self_launch``). Returns the ranks' exit status."""
    if nranks < 1:
        raise UsageError(f"--np must be at least 1 (got {nranks})")
    if check is not None:
        check()
    return self_launch(argv, nranks)


def _terminate_with_parent() -> None:
    """(In the child, before exec.) SIGTERM this process when its parent dies (Linux ``PR_SET_PDEATHSIG``);
    elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def self_launch(argv: list[str], nranks: int) -> int:
    """Start ``nranks`` local ranks with the mpiexec of the loaded MPI, running the same command."""
    from microbench.cluster.mpi_runtime import import_mpi, library

    MPI = import_mpi(initialize=False)
    lib = library(MPI)
    try:
        cmd, extra_env = mpiexec_command(lib.prefix, lib.abi, nranks)
    except FileNotFoundError as exc:
        raise RunError(f"cannot start {nranks} ranks: {exc}") from exc
    cmd += self_launch_argv(_strip_np(argv))
    env = {**os.environ, **extra_env, "MICROBENCH_LAUNCHED_BY": "microbench --np"}
    # rank 0's output reaches the terminal through mpiexec's pipes: say whether a person is watching
    env.setdefault("MICROBENCH_PROGRESS", "1" if (sys.stdout.isatty() and sys.stderr.isatty()) else "0")
    env.setdefault("MICROBENCH_COLUMNS", str(shutil.get_terminal_size((100, 24)).columns))
    # The signal this process gets, for the ranks' end record (mpiexec turns a Ctrl-C into SIGTERM for them).
    note = tempfile.NamedTemporaryFile(prefix="microbench-signal-", delete=False)
    note.close()
    os.unlink(note.name)
    env["MICROBENCH_SIGNAL_NOTE"] = note.name
    sys.stdout.flush()
    # mpiexec in a session of its own: a Ctrl-C reaches this process alone, which notes it for the ranks and
    # then passes it on (mpiexec forwards it to the ranks, which close their records); should this process be
    # killed outright (SIGKILL: a test's or a job's time limit), mpiexec gets SIGTERM, so no rank is left behind
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_terminate_with_parent)
    received: list[int] = []

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        if not received:
            with open(note.name, "w") as f:
                f.write(name)
            print(f"microbench: {name}: the ranks close the records (finished sizes are on disk) and stop",
                  file=sys.stderr, flush=True)
        received.append(signum)
        proc.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, on_signal),
                signal.SIGTERM: signal.signal(signal.SIGTERM, on_signal)}
    try:
        status = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if os.path.exists(note.name):
            os.unlink(note.name)
    # signalled, this process ends as a signalled command does: 128 + the signal number, whatever mpiexec says
    return 128 + received[0] if received else status


def _strip_np(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--np":
            skip = True
            continue
        if a.startswith("--np="):
            continue
        out.append(a)
    return out

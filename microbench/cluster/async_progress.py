"""Progress conditions of a run: what lets a posted collective advance while the rank computes.

Without an asynchronous progress agent an MPI library moves a non-blocking collective only inside MPI
calls (post, MPI_Test, MPI_Wait), so a message that needs more than the post's share of work waits for
MPI_Wait and overlaps little with compute. The run record's ``conditions.progress`` says which agent was
asked for: the MPI thread level granted, every progress-related variable of the environment (MPICH's
MPIR_CVAR_*, Cray MPICH, Intel MPI, MVAPICH, Open MPI's MCA variables, UCX, libfabric, NCCL), and a
verdict ``asynchronous`` (true, false, or null when this module cannot tell) with the reason. The verdict counts
only the variables of the MPI family actually loaded (MPICH and its derivatives read MPIR_CVAR_*, MPICH_*, I_MPI_*,
MV2_*; Open MPI reads OMPI_MCA_*): the others are recorded as ``ignored``.
"""

from __future__ import annotations

import os

#: environment prefixes whose ASYNC / PROGRESS variables are recorded
PREFIXES = ("MPIR_CVAR_", "MPICH_", "I_MPI_", "MV2_", "OMPI_MCA_", "UCX_", "FI_", "NCCL_", "PSM2_")
#: variable -> what turning it on asks for
AGENTS = {
    "MPIR_CVAR_ASYNC_PROGRESS": "MPICH progress thread (effective with MPI_THREAD_MULTIPLE)",
    "MPICH_ASYNC_PROGRESS": "Cray MPICH progress thread",
    "I_MPI_ASYNC_PROGRESS": "Intel MPI progress threads",
    "MV2_ASYNC_PROGRESS": "MVAPICH progress thread",
    "OMPI_MCA_btl_tcp_progress_thread": "Open MPI TCP BTL progress thread (TCP traffic only)",
}
#: variable -> the MPI ABI family (mpi4py's ``openmpi`` or ``mpich``) that reads it
FAMILY = {"MPIR_CVAR_ASYNC_PROGRESS": "mpich", "MPICH_ASYNC_PROGRESS": "mpich", "I_MPI_ASYNC_PROGRESS": "mpich",
          "MV2_ASYNC_PROGRESS": "mpich", "OMPI_MCA_btl_tcp_progress_thread": "openmpi"}
_TRUE = {"1", "yes", "on", "true", "enable"}


def variables(env: dict | None = None) -> dict[str, str]:
    """The progress-related variables set in ``env`` (os.environ by default)."""
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items())
            if k.startswith(PREFIXES) and ("ASYNC" in k.upper() or "PROGRESS" in k.upper())}


def describe(backend: str, torch_backend: str | None, thread_level: str | None,
             env: dict | None = None, mpi_abi: str | None = None) -> dict:
    """``conditions.progress`` of the run record; ``mpi_abi``: the loaded MPI's family (None: not known)."""
    found = variables(env)
    out = {"thread_level": thread_level, "variables": found}
    if backend == "torch":
        how = {"gloo": "gloo runs each collective on its own worker threads",
               "nccl": "NCCL runs each collective as kernels on its own CUDA stream"}.get(torch_backend)
        return {**out, "asynchronous": True if how else None, "how": how or f"{torch_backend}: not known here"}
    on = [k for k in AGENTS if found.get(k, "").strip().lower() in _TRUE]
    ignored = [k for k in on if mpi_abi is not None and FAMILY[k] != mpi_abi]
    if ignored:
        out["ignored"] = {k: f"read by {FAMILY[k]}-family MPIs, not by the loaded {mpi_abi} library" for k in ignored}
        on = [k for k in on if k not in ignored]
    if not on:
        return {**out, "asynchronous": False,
                "how": "no progress thread asked for: collectives advance inside MPI calls only"}
    if on == ["MPIR_CVAR_ASYNC_PROGRESS"] and thread_level != "multiple":
        return {**out, "asynchronous": None, "how": f"{AGENTS[on[0]]}, but the thread level is {thread_level}"}
    return {**out, "asynchronous": True, "how": "; ".join(AGENTS[k] for k in on)}

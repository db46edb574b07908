"""What a run recorded about where it ran, and what changed from one run to the next.

Compared fields of the run line: the MPI library (its version text), the versions of microbench, Python
and the packages it records (``versions``), torch and its process-group backend, the hosts, the launcher,
and the environment that steers the transport (``conditions.env``: Open MPI's OMPI_/PRTE_/PMIX_, MPICH's
MPIR_CVAR_/MPICH_, UCX_, FI_, NCCL_, OMP_ and the like, as ``microbench run`` records them). A step that
starts at a run where one of these changed is "explained" by it; one where nothing changed is not.
"""

from __future__ import annotations

from typing import Any

from microbench.gate.select import host_set, mpi_text


def facts(meta: dict) -> dict[str, Any]:
    """The comparable conditions of a run line, flattened to ``name -> value``."""
    out: dict[str, Any] = {"MPI": mpi_text(meta) or None, "hosts": ",".join(host_set(meta)) or None,
                           "launcher": meta.get("launcher"), "backend": meta.get("backend")}
    mpi = meta.get("mpi")
    if isinstance(mpi, dict) and isinstance(mpi.get("library_version"), str):
        out["MPI library"] = " ".join(mpi["library_version"].split())[:200]
    for name, value in (meta.get("versions") or {}).items() if isinstance(meta.get("versions"), dict) else ():
        out[f"version {name}"] = value
    torch = meta.get("torch")
    if isinstance(torch, dict):
        for name in ("version", "backend", "nccl_version"):
            if torch.get(name) is not None:
                out[f"torch {name}"] = torch.get(name)
    conditions = meta.get("conditions")
    env = conditions.get("env") if isinstance(conditions, dict) else None
    for name, value in (env or {}).items() if isinstance(env, dict) else ():
        out[f"env {name}"] = value
    return out


def changes(before: dict, after: dict) -> list[str]:
    """``name: old -> new`` for every condition that differs between two run lines (sorted by name)."""
    old, new = facts(before), facts(after)
    if old.get("MPI library") and old.get("MPI library") == new.get("MPI library"):
        old.pop("MPI library"), new.pop("MPI library")
    elif old.get("MPI") != new.get("MPI"):  # the first line says it; the full text would repeat it
        old.pop("MPI library", None), new.pop("MPI library", None)
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append(f"{name}: {_show(old.get(name))} -> {_show(new.get(name))}")
    return out


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)

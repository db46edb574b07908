"""What a run recorded about where it ran, and what changed from one run to the next.

Compared fields of the run line: the MPI library (its version text), the versions of microbench, Python
and the packages it records (``versions``), torch and its process-group backend, the hosts, the launcher,
and the environment that steers the transport (``conditions.env``: Open MPI's OMPI_/PRTE_/PMIX_, MPICH's
MPIR_CVAR_/MPICH_, UCX_, FI_, NCCL_, OMP_ and the like, as ``microbench run`` records them). A step that
starts at a run where one of these changed is "explained" by it; one where nothing changed is not.
"""

from __future__ import annotations

from typing import Any

from microbench.results.selection import host_set, mpi_text


def facts(meta: dict) -> dict[str, Any]:
    """The comparable conditions of a run line, flattened to ``name -> value``: ``MPI`` is the library's
    name and version (``Open MPI v5.0.11``); ``MPI library`` its whole version text, shown only when two
    builds share a name and version."""
    out: dict[str, Any] = {"MPI": mpi_text(meta).split(",")[0].strip() or None, "hosts": ",".join(host_set(meta)) or None,
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
    if old.get("MPI library") == new.get("MPI library") or old.get("MPI") != new.get("MPI"):
        old.pop("MPI library", None), new.pop("MPI library", None)  # the name and version say it (or all is equal)
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append(f"{name}: {_show(old.get(name))} -> {_show(new.get(name))}")
    return out


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)

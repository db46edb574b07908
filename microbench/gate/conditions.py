"""What a run recorded about where it ran, what changed from one run to the next, and what else the machine was
doing: the explanations a gate may give for a change.

Compared (the one list, with the reason for each: ``cluster/conditions.py``): the MPI library (its version
text), the versions of microbench, Python and the packages it records (``versions``), torch and its
process-group backend, the hosts, the launcher, and the environment that steers the transport
(``conditions.env``: Open MPI's OMPI_/PRTE_/PMIX_ MCA variables, MPICH's MPIR_CVAR_/MPICH_, UCX_, FI_, NCCL_,
OMP_ and the like). Never compared: per-launch values (a temporary file, the working directory, job ids,
ports), also where an older record kept them among its conditions. A step that starts at a run where one of
the conditions changed is "explained" by it; one where nothing changed is not.

The machine's state (``machine`` of the run and end lines: ``cluster/machine.py``) is not a condition: it may
explain a change but must not hide one. ``busy_cpus`` reads one figure per run (the other processes' CPU
demand), and ``machine_change`` says when two groups of runs differ in it in the direction that would explain a
change for the worse; a gate then says INCONCLUSIVE (it could not tell the machine from the code), never PASS.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from microbench.cluster.conditions import per_launch_reason
from microbench.results.selection import host_set, mpi_text

#: Two groups of runs whose medians of ``busy_cpus`` differ by at least this much (CPUs' worth of other
#: processes' demand) ran on machines in different states.
MACHINE_STEP_CPUS = 0.5


def facts(meta: dict) -> dict[str, Any]:
    """The comparable conditions of a run line, flattened to ``name -> value``: ``MPI`` is the library's
    name and version (``Open MPI v5.0.11``); ``MPI library`` its whole version text, shown only when two
    builds share a name and version. Per-launch values are left out (``cluster.conditions.PER_LAUNCH``)."""
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
        if not per_launch_reason(str(name)):
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


# ------------------------------------------------------------------------------------------ the machine's state
def _states(run) -> list[dict]:
    """The run's machine states: the end line's (over the whole run) where present, else the run line's."""
    end = getattr(run, "end", None) or {}
    for holder in (end, getattr(run, "meta", None) or {}):
        states = holder.get("machine") if isinstance(holder, dict) else None
        if isinstance(states, list) and states:
            return [s for s in states if isinstance(s, dict)]
    return []


def busy_cpus(run) -> float | None:
    """The other processes' demand for CPUs while the run measured (None: not recorded): on each host, the
    1-minute load average less the run's own ranks there, plus the CPU time the hypervisor stole, at the end of
    the run (else at its start); the busiest host's figure. A load average counts runnable tasks, so it keeps
    rising with the demand where the CPUs are full and the other processes' CPU time cannot."""
    per_host = (run.meta.get("ranks_per_host") if isinstance(getattr(run, "meta", None), dict) else None) or {}
    out = None
    for s in _states(run):
        load = s.get("load_avg")
        if not (isinstance(load, list) and load and isinstance(load[0], (int, float))):
            continue
        mine = per_host.get(s.get("host"), 0) if isinstance(per_host, dict) else 0
        steal = s.get("steal_cpus") if isinstance(s.get("steal_cpus"), (int, float)) else 0.0
        value = max(0.0, float(load[0]) - (mine if isinstance(mine, int) else 0)) + float(steal)
        out = value if out is None else max(out, value)
    return out


def busy_median(runs: Iterable) -> float | None:
    """The median of ``busy_cpus`` over the runs that recorded it (None: none did)."""
    values = [v for v in (busy_cpus(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def machine_text(runs: list) -> str:
    """``load of others 1.2 CPUs (median of 8 runs, 0.9..1.6)``, or ``not recorded``."""
    values = sorted(v for v in (busy_cpus(r) for r in runs) if v is not None)
    if not values:
        return "not recorded"
    median = statistics.median(values)
    spread = f", {values[0]:.1f}..{values[-1]:.1f}" if len(values) > 1 else ""
    return f"other processes' load {median:.1f} CPUs (median of {len(values)} run(s){spread})"


def machine_change(before: list, after: list, worse: bool = True) -> str | None:
    """Why the machine may explain a change between ``before`` and ``after`` (runs), or None: their medians of
    ``busy_cpus`` differ by ``MACHINE_STEP_CPUS`` or more, and in the direction that would explain it (busier
    after a change for the worse, quieter after one for the better)."""
    a, b = busy_median(before), busy_median(after)
    if a is None or b is None or abs(b - a) < MACHINE_STEP_CPUS or (b > a) != worse:
        return None
    return f"machine: other processes' load {a:.1f} -> {b:.1f} CPUs"

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
explain a change but must not hide one. ``busy_cpus`` reads the other processes' CPU demand of a run and
``contention`` how oversubscribed its busiest host was (every runnable task, the run's own ranks included, per
CPU; 1 when each has a CPU); ``machine_change`` says when two groups of runs differ in contention by a factor of
``MACHINE_STEP`` or more, in the direction that would explain a change for the worse; a gate then says
INCONCLUSIVE (it could not tell the machine from the code), never PASS.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from microbench.cluster.conditions import per_launch_reason
from microbench.results.selection import host_set, mpi_text

#: Two groups of runs whose medians of ``contention`` differ by at least this factor ran on machines in different
#: states (a quiet 2-CPU host against one with a third busy process: 1.0 against 1.5; a host whose other tenants
#: kept 15 or 17 tasks runnable: 8.5 against 9.5, the same state).
MACHINE_STEP = 1.25


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


def contention(run) -> float | None:
    """How oversubscribed the run's busiest host was: (other processes' demand + the run's ranks there) / CPUs,
    at least 1 (None: not recorded)."""
    per_host = (run.meta.get("ranks_per_host") if isinstance(getattr(run, "meta", None), dict) else None) or {}
    out = None
    for s in _states(run):
        load, cpus = s.get("load_avg"), s.get("cpus")
        if not (isinstance(load, list) and load and isinstance(load[0], (int, float)) and isinstance(cpus, int)
                and cpus > 0):
            continue
        mine = per_host.get(s.get("host"), 0) if isinstance(per_host, dict) else 0
        mine = mine if isinstance(mine, int) else 0
        steal = s.get("steal_cpus") if isinstance(s.get("steal_cpus"), (int, float)) else 0.0
        others = max(0.0, float(load[0]) - mine) + float(steal)
        value = max(1.0, (others + mine) / cpus)
        out = value if out is None else max(out, value)
    return out


def _median(runs: Iterable, figure) -> float | None:
    values = [v for v in (figure(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def machine_text(runs: list) -> str:
    """``other processes' load 1.2 CPUs, contention x1.6 (median of 8 runs)``, or ``not recorded``."""
    values = sorted(v for v in (busy_cpus(r) for r in runs) if v is not None)
    if not values:
        return "not recorded"
    spread = f", {values[0]:.1f}..{values[-1]:.1f}" if len(values) > 1 else ""
    return (f"other processes' load {statistics.median(values):.1f} CPUs{spread}, contention "
            f"x{_median(runs, contention):.2f} (median of {len(values)} run(s))")


def machine_change(before: list, after: list, worse: bool = True) -> str | None:
    """Why the machine may explain a change between ``before`` and ``after`` (runs), or None: their medians of
    ``contention`` differ by a factor of ``MACHINE_STEP`` or more, in the direction that would explain it (busier
    after a change for the worse, quieter after one for the better)."""
    a, b = _median(before, contention), _median(after, contention)
    if a is None or b is None or max(a, b) < MACHINE_STEP * min(a, b) or (b > a) != worse:
        return None
    return (f"machine: contention x{a:.2f} -> x{b:.2f} (other processes' load {_median(before, busy_cpus):.1f} -> "
            f"{_median(after, busy_cpus):.1f} CPUs)")

"""Layer 1, launch: the launcher starts a process on every node.

On each rank, ``hello``: who the launcher says this process is (rank, size, local rank and size), its host, pid
and the launcher's own variables. On the coordinator, ``judge``: every rank 0..N-1 checked in once, the ranks agree
on N, every expected node has a rank, no two nodes answer to one hostname; or, where ranks are missing, what the
launcher did (exited with what status and message, or still running) and which nodes have no process.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

from microbench.cluster import launch
from microbench.doctor.job import Job
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, ranks_phrase, verdict

LAYER = BY_NAME["launch"]
#: the launcher's own variables a rank reports (what the launcher thinks it did)
VIEW_VARS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NNODES",
             "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_JOB_END_TIME",
             "PMIX_NAMESPACE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_UNIVERSE_SIZE", "MPI_LOCALNRANKS",
             "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


def hello(token: str) -> dict:
    """This rank as the launcher started it (layer 1's facts)."""
    info = launch.discover()
    return {"k": "hello", "token": token, "rank": info.rank, "size": info.size, "local_rank": info.local_rank,
            "local_size": info.local_size, "launcher": info.launcher, "host": socket.gethostname(),
            "pid": os.getpid(), "view": {k: os.environ[k] for k in VIEW_VARS if k in os.environ},
            "clock_s": time.time()}


@dataclass
class LauncherState:
    """The launcher as the parent saw it (None fields: no parent, or it is still running)."""

    command: list[str] = field(default_factory=list)
    status: int | None = None  #: its exit status once it exited
    seconds: float | None = None  #: when it exited, from the start
    tail: list[str] = field(default_factory=list)  #: its last lines of output
    expected_hosts: list[str] = field(default_factory=list)
    local_host: str = field(default_factory=socket.gethostname)  #: where the launcher runs (named in its messages)

    def named(self) -> list[str]:
        """Expected hosts its output names; the launch host itself only when no other is named."""
        found = [h for h in self.expected_hosts if _mentions(list(self.tail), h)]
        others = [h for h in found if _short(h) != _short(self.local_host)]
        return others or found

    @property
    def name(self) -> str:
        return os.path.basename(self.command[0]) if self.command else "the launcher"


def judge(job: Job, launcher: LauncherState | None, seconds: float, problems: list[Finding]) -> LayerResult:
    """Layer 1's verdict from the ranks that checked in (``problems``: hellos refused on the way)."""
    findings = list(problems)
    sizes = sorted({i.size for i in job.ranks.values() if i.size is not None})
    expected = job.expected or (sizes[0] if len(sizes) == 1 else None)
    if len(sizes) > 1:
        findings.append(Finding(f"the ranks disagree on the job's size ({', '.join(map(str, sizes))}): two "
                                f"launches, or a launcher that is not the one that started the others"))
    arrived = sorted(job.ranks)
    short = expected is None or len(arrived) < expected
    exited = launcher is not None and launcher.status is not None
    if (short and (exited or not arrived)) or (expected is not None and len(arrived) < expected):
        findings += _missing(job, expected, launcher, seconds)
    elif expected is not None and any(r >= expected for r in arrived):
        findings.append(Finding(f"ranks beyond the job's size {expected}: {ranks_phrase([r for r in arrived if r >= expected])}"))
    findings += _shared_hostnames(job)
    findings += _absent_hosts(job, launcher)
    per_host = job.ranks_per_host
    counts = sorted(set(per_host.values())) or [0]
    layout = (f"{len(arrived)} rank(s) on {len(per_host)} node(s) "
              f"({counts[0] if len(counts) == 1 else f'{counts[0]} to {counts[-1]}'} per node)")
    who = next((i.launcher for i in job.ranks.values() if i.launcher), None)
    summary = f"{layout}, started by {who or 'no launcher'} in {seconds:.1f} s"
    details = {"expected": expected, "arrived": len(arrived), "ranks_per_host": per_host,
               "launcher": who, "view": next((i.view for i in job.ranks.values() if i.rank == 0), {}),
               "expected_hosts": launcher.expected_hosts if launcher else []}
    if exited:
        details["launcher_status"] = launcher.status
    failed = [f for f in findings if not f.note]
    if failed:
        summary = failed[0].what
    return verdict(summary, findings, LAYER, seconds=seconds, details=details,
                   next=_next(launcher, len(arrived)) if failed else None)


def _absent_hosts(job: Job, launcher: LauncherState | None) -> list[Finding]:
    """Expected nodes without a process: the ones the launcher's message names first; with no rank anywhere the
    rest are a consequence (Open MPI starts no rank until every node's daemon called back), said as a note."""
    expected = launcher.expected_hosts if launcher else []
    present = {_short(h) for h in job.ranks_per_host}
    absent = [h for h in expected if _short(h) not in present]
    named = [h for h in absent if h in launcher.named()] if launcher else []
    out = [Finding(f"no process started on {h}: the launcher's message names it", host=h) for h in named]
    rest = [h for h in absent if h not in named]
    if rest and (job.ranks or not named):
        out += [Finding(f"no process started on {h}", host=h) for h in rest]
    elif rest:
        out.append(Finding(f"no process started on {', '.join(rest)} either (the launcher starts none until every "
                           f"node is reached)", note=True))
    return out


def _missing(job: Job, expected: int | None, launcher: LauncherState | None, seconds: float) -> list[Finding]:
    """Why ranks are missing: the launcher's exit (with the hosts its message names), or nothing checking in, or
    the ranks that never did; nodes with fewer ranks than the launcher put there."""
    out = []
    missing = [r for r in range(expected) if r not in job.ranks] if expected else []
    got = f"{len(job.ranks)} of {expected} ranks checked in" if expected else f"{len(job.ranks)} rank(s) checked in"
    tail = list(launcher.tail) if launcher else []
    named = launcher.named() if launcher else []
    if launcher and launcher.status is not None:
        where = f"; its message names {', '.join(named)}" if named else ""
        out.append(Finding(f"{launcher.name} exited with status {launcher.status} after {launcher.seconds:.1f} s; "
                           f"{got}{where}", host=named[0] if len(named) == 1 else None))
        for line in _quoted(tail, named):
            out.append(Finding(f"{launcher.name} said: {line}", note=True))
    elif not job.ranks:
        still = f"{launcher.name} is still running but " if launcher else ""
        out.append(Finding(f"{still}no rank checked in within {seconds:.0f} s: the launcher started nothing (Open MPI "
                           f"starts no rank until every node's daemon has called back) or the ranks cannot reach the "
                           f"doctor at the launch host" + (f"; its output names {', '.join(named)}" if named else "")))
    else:
        out.append(Finding(f"{got} within {seconds:.0f} s; missing {ranks_phrase(missing)}"))
    for host, ranks in job.by_host(job.ranks).items():
        sizes = {job.ranks[r].local_size for r in ranks} - {None}
        if len(sizes) == 1 and len(ranks) < next(iter(sizes)):
            out.append(Finding(f"{host}: {len(ranks)} of the {next(iter(sizes))} ranks the launcher put there "
                               f"checked in", host=host))
    return out


def _shared_hostnames(job: Job) -> list[Finding]:
    """More ranks under one hostname than the launcher put on one node: two nodes answer to one name."""
    out = []
    for host, ranks in job.by_host(job.ranks).items():
        local = {job.ranks[r].local_size for r in ranks} - {None}
        locals_seen = [job.ranks[r].local_rank for r in ranks if job.ranks[r].local_rank is not None]
        duplicated = len(locals_seen) != len(set(locals_seen))
        if (len(local) == 1 and len(ranks) > next(iter(local))) or duplicated:
            out.append(Finding(f"{len(ranks)} ranks report the hostname {host}, more than the launcher put on one "
                               f"node (local ranks repeat): several nodes answer to one name, which MPI and torch "
                               f"take for one node", host=host, ranks=ranks))
    return out


def _short(host: str) -> str:
    return host.split(".")[0]


def _mentions(lines: list[str], host: str) -> bool:
    import re

    pattern = re.compile(rf"(?<![\w.-]){re.escape(_short(host))}(?![\w-])")
    return any(pattern.search(line) for line in lines)


def _quoted(tail: list[str], named: list[str], limit: int = 4) -> list[str]:
    """The launcher's lines worth quoting: those naming an expected host, else its last non-blank ones."""
    lines = [line.strip() for line in tail if line.strip() and not set(line.strip()) <= set("-=*")]
    chosen = [line for line in lines if any(_mentions([line], h) for h in named)] or lines[-limit:]
    return [line[:200] for line in chosen[:limit]]


def _next(launcher: LauncherState | None, arrived: int) -> str:
    if launcher and launcher.status is not None:
        return f"{launcher.name}'s own message (above, and quoted here); {LAYER.next.split('; ', 1)[1]}"
    if not arrived:
        return ("whether the nodes can reach the launch host (the doctor listens there; the ranks' own lines say if "
                "they could not), then " + LAYER.next)
    return ("the nodes named: whether the missing ranks' processes exist there (ps) and what they wait on (py-spy "
            "dump, gdb), the node's load and shared file systems (a Python start-up stuck on one); then "
            + LAYER.next.split("; ", 1)[1])

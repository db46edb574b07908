"""What else a host was doing while a run measured: load averages, runnable tasks, CPU time taken by other
processes and by the hypervisor (steal), the other processes that used the most CPU, and on GPUs the other
processes with a context on them.

Read from Linux's ``/proc`` (``/proc/loadavg``, ``/proc/stat``, ``/proc/PID/stat``): a ``Snapshot`` holds the
counters at one moment, and ``state`` turns two snapshots into the record's ``MachineState`` (CPU figures in
CPUs' worth of time over the window between them: 1.0 is one CPU busy throughout). "Other processes" are every
process but the run's own ranks and their parents (the launcher's daemon, the ``--np`` parent); CPU time of
processes that ended within the window is counted too (from ``/proc/stat``'s totals). Where ``/proc`` is
missing (not Linux) there is no snapshot and no state is recorded. GPU processes come from ``nvidia-smi``
(NVIDIA's driver), asked with a time limit; ROCm's are not read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from microbench.cluster.facts import utc_now

TOP_BUSY = 5  #: other processes listed per state
MIN_BUSY_CPUS = 0.05  #: a process that used less over the window is not listed
MAX_PROCESSES = 100_000  #: the most /proc entries one snapshot reads
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Snapshot:
    """The host's counters at one moment (clock ticks of ``/proc/stat`` and of each process)."""

    wall: float  #: time.monotonic()
    time_utc: str
    cpus: int
    load_avg: list[float]
    running: int
    busy_ticks: int  #: user + nice + system + irq + softirq of every CPU
    steal_ticks: int
    processes: dict[int, tuple[str, int, int]] = field(default_factory=dict)  #: pid -> (name, ticks, parent pid)


def snapshot(proc: str = "/proc") -> Snapshot | None:
    """The host's counters now, or None where ``proc`` cannot be read."""
    try:
        with open(os.path.join(proc, "loadavg")) as f:
            parts = f.read().split()
        load = [float(x) for x in parts[:3]]
        with open(os.path.join(proc, "stat")) as f:
            stat = f.read().splitlines()
    except (OSError, ValueError, IndexError):
        return None
    busy = steal = 0
    running = 0
    cpus = 0
    for line in stat:
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:]] + [0] * 10
            busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]
            steal = ticks[7]
        elif fields[0].startswith("cpu") and fields[0][3:].isdigit():
            cpus += 1
        elif fields[0] == "procs_running" and len(fields) > 1:
            running = int(fields[1])
    return Snapshot(time.monotonic(), utc_now(), max(cpus, 1), load, running, busy, steal, _processes(proc))


def _processes(proc: str) -> dict[int, tuple[str, int, int]]:
    out: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names[:MAX_PROCESSES]:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as f:
                text = f.read()
        except OSError:  # it ended meanwhile, or is not ours to read
            continue
        head, _, rest = text.rpartition(")")
        comm = head.partition("(")[2]
        fields = rest.split()
        try:  # state ppid ... utime (14th field of the line: 12th after the name) stime
            out[int(name)] = (comm, int(fields[11]) + int(fields[12]), int(fields[1]))
        except (IndexError, ValueError):
            continue
    return out


def own_processes(pids: set[int], snap: Snapshot | None) -> set[int]:
    """``pids`` (the run's ranks on this host) and their parents (the launcher's daemon, the ``--np`` parent)."""
    out = set(pids)
    if snap is not None:
        for pid in pids:
            parent = snap.processes.get(pid, ("", 0, 0))[2]
            if parent > 1:
                out.add(parent)
                grand = snap.processes.get(parent, ("", 0, 0))[2]
                if grand > 1:
                    out.add(grand)
    return out


def state(start: Snapshot | None, end: Snapshot, own: set[int], host: str,
          gpu_processes: list[dict] | None = None) -> dict:
    """The record's ``MachineState`` at ``end``; with ``start``, the CPU figures over the window between them."""
    out: dict = {"host": host, "time_utc": end.time_utc, "cpus": end.cpus,
                 "load_avg": [round(x, 2) for x in end.load_avg], "running": end.running}
    window = end.wall - start.wall if start is not None else 0.0
    if start is not None and window > 0:
        per_second = _HZ * window
        mine = sum(max(0, end.processes[p][1] - start.processes.get(p, ("", 0, 0))[1])
                   for p in own if p in end.processes)
        busy = sorted(((end.processes[p][1] - start.processes[p][1], p) for p in end.processes
                       if p in start.processes and p not in own), reverse=True)
        out["window_s"] = round(window, 3)
        out["others_cpus"] = round(max(0.0, (end.busy_ticks - start.busy_ticks - mine) / per_second), 3)
        out["steal_cpus"] = round(max(0.0, (end.steal_ticks - start.steal_ticks) / per_second), 3)
        out["busy"] = [{"pid": pid, "name": end.processes[pid][0], "cpus": round(ticks / per_second, 3)}
                       for ticks, pid in busy[:TOP_BUSY] if ticks / per_second >= MIN_BUSY_CPUS]
    if gpu_processes is not None:
        out["gpu_processes"] = gpu_processes
    return out


def gpu_processes(own: set[int], gpus: set[str] | None = None, timeout: float = 5.0) -> list[dict] | None:
    """Other processes with a context on this host's NVIDIA GPUs (only ``gpus``, UUIDs, when given), from
    ``nvidia-smi``; None where it is missing or does not answer in ``timeout`` seconds."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    out = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        pid, name, memory, uuid = int(parts[0]), parts[1], parts[2], parts[3]
        if pid in own or (gpus and uuid not in gpus):
            continue
        used = int(float(memory) * 1024 * 1024) if memory.replace(".", "", 1).isdigit() else None
        out.append({"pid": pid, "name": name[:200], "gpu": uuid or None, "used_bytes": used})
    return out

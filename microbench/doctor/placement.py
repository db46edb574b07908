"""Layer 5, placement: each rank's CPU binding, NUMA node, GPU and nearest NIC; no two ranks sharing a core or
a GPU.

On each rank, ``collect``: the CPUs it may run on (its affinity), their NUMA nodes, its GPU (the one microbench
would give it: its local rank modulo the GPUs it sees, as ``measure.device.index_for_rank``; PCI address and NUMA
node from sysfs, nothing initialised) and the network devices on the same NUMA node (the nearest NICs). On the
coordinator, ``judge``, per node: a set of CPUs that more ranks are bound inside than it has CPUs (ranks that
take turns on one core), two ranks on one GPU; a GPU on another NUMA node than its rank's CPUs is noted, as are
ranks not bound at all.
"""

from __future__ import annotations

import os

from microbench.doctor.job import Job
from microbench.doctor.sysfs import listdir as _listdir, read as _read
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, ranks_phrase, verdict

LAYER = BY_NAME["placement"]
GPU_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD"}


def cpulist(cpus) -> str:
    """``{0, 1, 2, 5}`` -> ``0-2,5``."""
    cpus = sorted(cpus)
    out, start = [], None
    for k, c in enumerate(cpus):
        if start is None:
            start = c
        if k + 1 == len(cpus) or cpus[k + 1] != c + 1:
            out.append(f"{start}" if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def parse_cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in (text or "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def numa_nodes(root: str = "/") -> dict[int, set[int]]:
    """NUMA node -> its CPUs (sysfs); one node 0 with every CPU where the kernel says nothing."""
    base = os.path.join(root, "sys/devices/system/node")
    found = {}
    for name in _listdir(base):
        if name.startswith("node") and name[4:].isdigit():
            text = _read(os.path.join(base, name, "cpulist"))
            if text is not None:
                found[int(name[4:])] = parse_cpulist(text)
    return found or {0: set(range(os.cpu_count() or 1))}


def gpus(root: str = "/") -> list[dict]:
    """GPUs on the PCI bus (NVIDIA, AMD display or 3D controllers), in bus order, with their NUMA node."""
    base = os.path.join(root, "sys/bus/pci/devices")
    out = []
    for bdf in sorted(_listdir(base)):
        cls = _read(os.path.join(base, bdf, "class")) or ""
        vendor = _read(os.path.join(base, bdf, "vendor"))
        if vendor in GPU_VENDORS and (cls.startswith("0x0300") or cls.startswith("0x0302")):
            numa = _read(os.path.join(base, bdf, "numa_node"))
            out.append({"pci": bdf, "vendor": GPU_VENDORS[vendor],
                        "numa": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None})
    return out


def nics(root: str = "/") -> list[dict]:
    """Network devices backed by hardware (sysfs ``device`` link): name and NUMA node; InfiniBand HCAs too."""
    out = []
    for base, kind in (("sys/class/net", "net"), ("sys/class/infiniband", "ib")):
        for name in sorted(_listdir(os.path.join(root, base))):
            numa = _read(os.path.join(root, base, name, "device/numa_node"))
            if numa is None:
                continue
            out.append({"name": name, "kind": kind,
                        "numa": int(numa) if numa.lstrip("-").isdigit() and int(numa) >= 0 else None})
    return out


def visible_gpus(all_gpus: list[dict], env: dict) -> list[dict]:
    """The GPUs this rank sees: CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES by index (bus
    order stands for CUDA's order, which CUDA_DEVICE_ORDER=PCI_BUS_ID makes exact); UUIDs cannot be mapped here."""
    for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        text = env.get(var)
        if text is None:
            continue
        picked = []
        for item in text.split(","):
            item = item.strip()
            if item.isdigit() and int(item) < len(all_gpus):
                picked.append(all_gpus[int(item)])
            elif item:
                picked.append({"pci": item, "vendor": None, "numa": None})
        return picked
    return all_gpus


def collect(local_rank: int | None, root: str = "/", env: dict | None = None) -> dict:
    env = os.environ if env is None else env
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    topology = numa_nodes(root)
    mine = {n for n, cpus in topology.items() if cpus & set(affinity)}
    seen = visible_gpus(gpus(root), env)
    gpu = None
    if seen:
        gpu = dict(seen[(local_rank or 0) % len(seen)])
        gpu["index"] = (local_rank or 0) % len(seen)
    near_numa = {gpu["numa"]} if gpu and gpu.get("numa") is not None else mine
    devices = nics(root)
    return {"cpus": cpulist(affinity), "ncpus": len(affinity), "host_cpus": os.cpu_count(),
            "numa": sorted(mine), "gpu": gpu, "visible_gpus": len(seen),
            "nearest_nics": [d["name"] for d in devices if d["numa"] in near_numa],
            "nics": len(devices)}


def judge(reports: dict[int, dict], job: Job) -> LayerResult:
    findings: list[Finding] = []
    unbound = []
    for host, ranks in job.by_host(reports).items():
        sets = {r: parse_cpulist(reports[r]["cpus"]) for r in ranks}
        for r, cpus in sets.items():
            if reports[r].get("host_cpus") and len(cpus) >= reports[r]["host_cpus"] and len(ranks) > 1:
                unbound.append(r)
        findings += _crowded(host, sets)
        by_gpu: dict[str, list[int]] = {}
        for r in ranks:
            g = reports[r].get("gpu")
            if g:
                by_gpu.setdefault(g["pci"], []).append(r)
                if g.get("numa") is not None and reports[r]["numa"] and g["numa"] not in reports[r]["numa"]:
                    findings.append(Finding(f"{host}: rank {r} runs on NUMA node(s) {reports[r]['numa']} but its GPU "
                                            f"{g['pci']} sits on NUMA node {g['numa']}", host=host, ranks=[r],
                                            note=True))
        for pci, shared in by_gpu.items():
            if len(shared) > 1:
                findings.append(Finding(f"{host}: {ranks_phrase(shared)} share the GPU {pci}", host=host, ranks=shared))
    if unbound:
        for host, ranks in job.by_host(unbound).items():
            findings.append(Finding(f"{host}: {ranks_phrase(ranks)} not bound (every CPU): the kernel may move "
                                    f"them, and latency moves with them", host=host, ranks=ranks, note=True))
    failed = [f for f in findings if not f.note]
    with_gpu = sum(1 for rep in reports.values() if rep.get("gpu"))
    if failed:
        summary = failed[0].what + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "")
    else:
        bound = len(reports) - len(unbound)
        summary = (f"{bound} of {len(reports)} rank(s) bound, no core shared"
                   + (f"; {with_gpu} rank(s) on a GPU each" if with_gpu else "; no GPU"))
    return verdict(summary, findings, LAYER, details={
        "ranks": {str(r): {"cpus": rep["cpus"], "numa": rep["numa"], "gpu": (rep.get("gpu") or {}).get("pci"),
                           "nearest_nics": rep["nearest_nics"]} for r, rep in sorted(reports.items())[:1024]}})


def _crowded(host: str, sets: dict[int, set[int]]) -> list[Finding]:
    """Sets of CPUs more ranks are confined to than they hold: those ranks take turns on the cores."""
    out, seen = [], set()
    for r, cpus in sets.items():
        key = frozenset(cpus)
        if key in seen or not cpus:
            continue
        seen.add(key)
        inside = sorted(q for q, other in sets.items() if other and other <= cpus)
        if len(inside) > len(cpus):
            out.append(Finding(f"{host}: {ranks_phrase(inside)} are bound inside CPU(s) {cpulist(cpus)} "
                               f"({len(inside)} ranks on {len(cpus)} CPU(s)): they take turns on the cores",
                               host=host, ranks=inside))
    return out

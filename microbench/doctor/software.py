"""Layer 2, software: every rank runs the same microbench, Python, MPI library, torch and NCCL, on the same
driver, with the same limits and a clock that agrees.

On each rank, ``collect``: versions read without initialising anything (the MPI library's version string is
MPI_Get_library_version before MPI_Init; torch's and NCCL's from their installed metadata, so torch is not imported
here), the GPU driver from the kernel module, the locked-memory and open-file limits (RDMA needs the first),
and the rank's clock. On the coordinator, ``judge``: per key, the value most ranks have; every node whose ranks
differ is named with its value beside the others'.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections import Counter
from importlib import metadata

from microbench.doctor.job import Job
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, verdict

LAYER = BY_NAME["software"]
#: compared across ranks: a difference fails the layer (name -> how it is shown)
COMPARED = {"microbench": "microbench", "python": "Python", "numpy": "numpy", "mpi4py": "mpi4py",
            "mpi_library": "MPI library", "mpi_library_path": "libmpi", "torch": "torch", "nccl": "NCCL",
            "gpu_driver": "GPU driver", "memlock": "locked-memory limit", "nofile": "open-file limit"}
#: said when they differ, never a failure by themselves (one install may sit at two paths)
NOTED = {"microbench_path": "microbench from", "python_executable": "Python at"}
CLOCK_LIMIT_S = 2.0  #: a rank whose clock is further than this from the coordinator's fails the layer
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11")


def collect() -> dict:
    """This rank's software, limits and clock (nothing initialised)."""
    import microbench

    out = {"microbench": microbench.__version__, "microbench_path": os.path.dirname(microbench.__file__),
           "python": platform.python_version(), "python_executable": sys.executable,
           "numpy": _dist_version("numpy"), "mpi4py": _dist_version("mpi4py"), "torch": _dist_version("torch"),
           "nccl": next((v for d in NCCL_DISTRIBUTIONS if (v := _dist_version(d))), None),
           "gpu_driver": gpu_driver(), "memlock": _limit(resource.RLIMIT_MEMLOCK),
           "nofile": _limit(resource.RLIMIT_NOFILE)}
    out.update(mpi_library())
    out["clock_s"] = time.time()
    return out


def mpi_library() -> dict:
    """The MPI library mpi4py loads here, before MPI_Init (None where none loads: torchrun without MPI)."""
    try:
        from microbench.cluster.mpi_runtime import import_mpi, library

        lib = library(import_mpi(initialize=False))
        return {"mpi_library": lib.version_string.splitlines()[0].strip(), "mpi_library_path": lib.path}
    except Exception as exc:  # noqa: BLE001 - a rank without a loadable MPI says so; the judge compares it
        return {"mpi_library": None, "mpi_library_path": None, "mpi_error": str(exc).splitlines()[0][:200]}


def gpu_driver(root: str = "/") -> str | None:
    """The NVIDIA or AMD kernel driver's version, from the module (None where neither is loaded)."""
    for path in ("sys/module/nvidia/version", "sys/module/amdgpu/version"):
        try:
            with open(os.path.join(root, path)) as f:
                return f"{path.split('/')[2]} {f.read().strip()}"
        except OSError:
            continue
    return None


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _limit(which: int) -> str:
    soft, _ = resource.getrlimit(which)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def judge(reports: dict[int, dict], job: Job) -> LayerResult:
    findings: list[Finding] = []
    same: list[str] = []
    for key, label in {**COMPARED, **NOTED}.items():
        values = {r: rep.get(key) for r, rep in reports.items()}
        common, _ = Counter(values.values()).most_common(1)[0]
        odd = {r: v for r, v in values.items() if v != common}
        if not odd:
            if key in COMPARED and common is not None and key not in ("mpi_library_path", "memlock", "nofile"):
                same.append(f"{label} {_short(common)}")
            continue
        note = key in NOTED
        for host, ranks in job.by_host(odd).items():
            theirs = " / ".join(sorted({_against(odd[r], common) for r in ranks}))
            findings.append(Finding(f"{host}: {label} {theirs} where the other ranks have "
                                    f"{_against(common, next(iter(odd.values())))}", host=host, ranks=ranks,
                                    note=note))
    for rank, rep in reports.items():
        if rep.get("mpi_error") and reports[min(reports)].get("mpi_library"):
            findings.append(Finding(f"{job.host_of(rank)}: no MPI library loads ({rep['mpi_error']})",
                                    host=job.host_of(rank), ranks=[rank]))
    skew = {r: job.ranks[r].clock_offset_s for r in reports if r in job.ranks}
    far = {r: s for r, s in skew.items() if abs(s) > CLOCK_LIMIT_S}
    for host, ranks in job.by_host(far).items():
        worst = max((far[r] for r in ranks), key=abs)
        findings.append(Finding(f"{host}: its clock is {worst:+.1f} s off the coordinator's (more than "
                                f"{CLOCK_LIMIT_S:g} s: timeouts and logs disagree; check NTP/chrony there)",
                                host=host, ranks=ranks))
    failed = [f for f in findings if not f.note]
    summary = failed[0].what if failed else ", ".join(same) + " on every rank"
    if len(failed) > 1:
        summary += f" (and {len(failed) - 1} more difference(s))"
    return verdict(summary, findings, LAYER, details={
        "common": {k: Counter(rep.get(k) for rep in reports.values()).most_common(1)[0][0] for k in COMPARED},
        "clock_offset_s": {"min": min(skew.values(), default=0.0), "max": max(skew.values(), default=0.0)}})


def _against(value, other) -> str:
    """A long version string shown by its head and the parts where it differs from ``other`` (MPI libraries say
    their build in one line of comma-separated parts)."""
    text, ref = str(value), str(other)
    parts, theirs = [p.strip() for p in text.split(",")], {p.strip() for p in ref.split(",")}
    if len(parts) < 3:
        return text
    differ = [p for p in parts[1:] if p not in theirs]
    return f"{parts[0]} ({', '.join(differ)})" if differ else parts[0]


def _short(value) -> str:
    text = str(value)
    return text.split(",")[0] if text.startswith("Open MPI") else text

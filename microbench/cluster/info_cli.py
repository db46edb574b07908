"""Show what this machine offers: MPI library and launcher, torch backends, devices, page policy.

Run it first on a new system: it says which libmpi mpi4py loads (the bundled wheel or the site's),
which mpiexec --np would use, and what the torch build can do. Initialises nothing.
"""

from __future__ import annotations

import argparse
import json
import sys

from microbench import __version__
from microbench.cluster import facts
from microbench.cluster import launch


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def collect() -> dict:
    """Facts about the installation, gathered without initialising MPI or CUDA."""
    out: dict = {"microbench": __version__, "python": sys.version.split()[0], "launcher": None}
    info = launch.discover()
    out["launcher"] = info.launcher
    out["rank"], out["size"] = info.rank, info.size
    try:
        from microbench.cluster.mpi_runtime import import_mpi, library, shadow_warning

        MPI = import_mpi(initialize=False)
        lib = library(MPI)
        out["mpi"] = lib.as_record()
        try:
            cmd, env = launch.mpiexec_command(lib.prefix, lib.abi, 2)
            out["mpi"]["mpiexec"] = cmd[0]
        except FileNotFoundError:
            out["mpi"]["mpiexec"] = None
        out["mpi"]["warning"] = shadow_warning(lib)
    except Exception as exc:  # noqa: BLE001 - report, do not fail
        out["mpi"] = {"error": str(exc)}
    try:
        import torch
        import torch.distributed as dist

        out["torch"] = {
            "version": torch.__version__,
            "gloo": dist.is_gloo_available(),
            "nccl": dist.is_nccl_available(),
            "mpi": dist.is_mpi_available(),
            "ucc": bool(getattr(dist, "is_ucc_available", lambda: False)()),
            "cuda": torch.cuda.is_available(),
            "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        }
    except ImportError:
        out["torch"] = None
    out["conditions"] = {"thp": facts.thp_mode(), "page_size": facts.page_size(), "cpus": launch.cpu_count(),
                         "mem_available_bytes": facts.mem_available_bytes()}
    return out


def main(args) -> int:
    found = collect()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    mpi = found.get("mpi") or {}
    print(f"microbench {found['microbench']} on Python {found['python']}")
    if "error" in mpi:
        print(f"MPI: not loadable ({mpi['error']})")
    else:
        print(f"MPI: {mpi['library_version'].splitlines()[0]}")
        print(f"  library: {mpi['library_path']} ({'bundled ' + mpi['bundled_wheel'] + ' wheel' if mpi['bundled_wheel'] else 'site installation'})")
        print(f"  mpiexec for --np: {mpi.get('mpiexec')}")
        if mpi.get("warning"):
            print(f"  warning: {mpi['warning']}")
    t = found.get("torch")
    if t:
        backends = [b for b in ("gloo", "nccl", "mpi", "ucc") if t[b]]
        print(f"torch {t['version']}: backends {', '.join(backends) or 'none'}; CUDA devices {t['cuda_devices']}")
    else:
        from microbench.cluster.torch_runtime import TORCH_INSTALL_HINT
        print(f"torch: not installed, needed for --backend torch ({TORCH_INSTALL_HINT})")
    c = found["conditions"]
    print(f"THP: {c['thp']}, page size {c['page_size']} B, {c['cpus']} CPUs, "
          f"{buffers_fmt(c['mem_available_bytes'])} available")
    print(f"launcher: {found['launcher'] or 'none (use --np N, mpiexec, srun or torchrun)'}")
    return 0


def buffers_fmt(n) -> str:
    from microbench.units import format_bytes

    return format_bytes(n) if n else "unknown"

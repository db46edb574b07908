"""Show what this machine offers: MPI library and launcher, torch backends, devices, page policy, and its links.

Run it first on a new system: it says which libmpi mpi4py loads (the bundled wheel or the site's),
which mpiexec --np would use, what the torch build can do, and the host's links with their speeds (network
interfaces, shaped rates, InfiniBand/RoCE ports, GPUs' NVLinks and PCIe, the NIC nearest each GPU:
``microbench.cluster.links``). Under a launcher each host prints its own (``srun -N 4 --ntasks-per-node 1
microbench info``); ``--from DIR`` shows a host recorded with ``scripts/record_links.py``. Initialises nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from microbench import __version__
from microbench.cluster import facts
from microbench.cluster import launch
from microbench.cluster import links as host_links
from microbench.cluster.links_text import link_lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--from", dest="recorded", action="append", metavar="DIR",
                   help="show the links of a host recorded by scripts/record_links.py (a folder with sys/ and "
                        "nvml.json) instead of this one's; repeatable")
    p.add_argument("--conditions", action="store_true",
                   help="print what may explain a step in history (the recorded conditions) and what never does "
                        "(per-launch values), each with its reason, and this environment's split of them")


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
    if getattr(args, "conditions", False):
        from microbench.cluster import conditions

        kept, apart = conditions.split_env(dict(os.environ))
        if args.json:
            print(json.dumps({"conditions": [{"name": e.name, "reason": e.reason} for e in conditions.FIELDS],
                              "recorded_prefixes": list(conditions.RECORDED_PREFIXES),
                              "per_launch": [{"pattern": p, "reason": w} for p, w in conditions.PER_LAUNCH],
                              "this_environment": {"conditions": sorted(kept), "per_launch": sorted(apart)}},
                             indent=2))
        else:
            print("\n".join(conditions.table_lines()))
            print(f"this environment: conditions {', '.join(sorted(kept)) or 'none'}; per-launch "
                  f"{', '.join(sorted(apart)) or 'none'}")
        return 0
    if args.recorded:
        return _show_recorded(args.recorded, args.json)
    found = collect()
    found["links"] = {launch.discover().host: host_links.read_host()}
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
    for host, links in found["links"].items():
        for line in link_lines(host, links):
            print(line)
    return 0


def _show_recorded(folders: list[str], as_json: bool) -> int:
    from pathlib import Path

    from microbench.errors import UsageError, printable

    found = {}
    for folder in folders:
        if not Path(folder, "sys").is_dir():
            raise UsageError(f"--from {printable(folder)}: no sys/ folder there (record one with "
                             "scripts/record_links.py)")
        found[folder] = host_links.read_host(folder)
    if as_json:
        print(json.dumps({"links": found}, indent=2))
        return 0
    for host, links in found.items():
        for line in link_lines(host, links):
            print(line)
    return 0


def buffers_fmt(n) -> str:
    from microbench.units import format_bytes

    return format_bytes(n) if n else "unknown"

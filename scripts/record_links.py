"""Record what microbench reads of a host's links into a folder, to read back anywhere (``microbench info --from``).

    python scripts/record_links.py OUT_DIR

Copies every sysfs file ``microbench.cluster.links`` reads (network interfaces, RDMA ports, the PCI devices
behind them and behind each GPU), with the symbolic links on the way kept as links (so a PCI path resolves as on
the machine), adds each interface's IPv4 address (``ipv4``: no ioctl can be replayed), NVML's answers
(``nvml.json``) and the root qdiscs (``tc.json``). Run it inside the network namespace whose links you want.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from microbench.cluster import links, links_nvml, links_shaping  # noqa: E402

ATTRIBUTES = ("speed", "operstate", "type", "ifindex", "current_link_speed", "current_link_width", "max_link_speed",
              "max_link_width", "rate", "state", "phys_state", "link_layer")


def copy_path(src: Path, out: Path) -> Path | None:
    """``src`` recreated under ``out``: each symbolic link on its way as the same link, each folder as a folder,
    the file itself copied. Returns where it resolved to (None when absent)."""
    here = Path("/")
    for part in src.parts[1:]:
        here = here / part
        dest = out / here.relative_to("/")
        if here.is_symlink():
            if not dest.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(os.readlink(here), dest)
            here = here.resolve()
            continue
        if not here.exists():
            return None
    dest = out / here.relative_to("/")
    if here.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
    else:
        try:
            text = here.read_text(errors="replace")
        except OSError:
            return here
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    return here


def record(out: Path) -> None:
    net = Path("/sys/class/net")
    for iface in sorted(net.iterdir()) if net.is_dir() else []:
        for attr in ATTRIBUTES[:4]:
            copy_path(iface / attr, out)
        device = copy_path(iface / "device", out)
        if device is not None:
            for attr in ATTRIBUTES[4:8]:
                copy_path(iface / "device" / attr, out)
        address = links._ipv4(iface.name)
        if address:
            (out / "sys" / "class" / "net" / iface.name / "ipv4").write_text(address + "\n")
    ib = Path("/sys/class/infiniband")
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        for attr in ATTRIBUTES[4:8]:
            copy_path(dev / "device" / attr, out)
        if (dev / "device" / "net").is_dir():
            for netdev in (dev / "device" / "net").iterdir():
                copy_path(netdev, out)
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            for attr in ATTRIBUTES[8:]:
                copy_path(port / attr, out)
    answers = links_nvml.answers()
    for gpu in answers.get("gpus", []):
        bus = links_nvml.sysfs_bus_id(gpu.get("bus_id"))
        if bus:
            for attr in ATTRIBUTES[4:8]:
                copy_path(Path("/sys/bus/pci/devices") / bus / attr, out)
    (out / "nvml.json").write_text(json.dumps(answers, indent=1) + "\n")
    shaping = links_shaping.read_all()
    (out / "tc.json").write_text(json.dumps({"qdiscs": shaping.get("qdiscs", []),
                                             "classes": shaping.get("classes", {})}, indent=1) + "\n")
    (out / "README.md").write_text(f"Recorded by scripts/record_links.py on {socket.gethostname()}.\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    record(Path(sys.argv[1]))

"""The links of this host: network interfaces, RDMA ports, GPUs (NVLink, PCIe) and the NIC nearest each GPU.

Read once per host (by its lowest rank) and kept in the run record (``links``, one entry per host). Sources:

- network interfaces: the interfaces of this process's network namespace (``socket.if_nameindex``), each with
  what ``/sys/class/net/IF`` says (``speed`` in Mb/s, ``operstate``, ``type``, the PCI device behind it) when
  sysfs shows this namespace (a sysfs mounted for another namespace shows other interfaces: then only the
  names are known, and said so); its IPv4 address (``SIOCGIFADDR``); a shaped link's rate from its root
  queueing discipline (``tc -j qdisc show``: tbf, htb, cake, fq maxrate; ``links_shaping.py``), because a veth,
  or a NIC rate-limited by a qdisc, reports its nominal speed whatever is shaped on it;
- RDMA ports (InfiniBand and RoCE): ``/sys/class/infiniband/DEV/ports/N/{rate,state,phys_state,link_layer}``;
- PCIe: ``current_link_speed``, ``current_link_width``, ``max_link_speed``, ``max_link_width`` of the device;
- GPUs: NVML (``nvidia-ml-py``) where it loads (``links_nvml.py``), their NVLinks and PCIe links;
- nearest NIC per GPU: the RDMA device (else network interface) whose PCI path shares the most bridges with
  the GPU's (``/sys/bus/pci/devices/BDF`` resolved), as ``nvidia-smi topo -m`` ranks PIX < PXB < PHB < SYS.

``read_host(root)`` reads a recorded host too: ``root`` is a folder holding the same ``sys/`` tree (and
``nvml.json``, the NVML answers) that ``scripts/record_links.py`` copies from a machine.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

from microbench.cluster import links_nvml, links_shaping

#: PCIe transfer rate (GT/s) -> (generation, GB/s per lane and direction after line encoding: 8b/10b for
#: generations 1 and 2, 128b/130b for 3 to 5, FLIT 242/256 for 6; packet headers not counted)
PCIE_GENERATIONS = {2.5: (1, 2.5 * 8 / 10 / 8), 5.0: (2, 5.0 * 8 / 10 / 8), 8.0: (3, 8 * 128 / 130 / 8),
                    16.0: (4, 16 * 128 / 130 / 8), 32.0: (5, 32 * 128 / 130 / 8), 64.0: (6, 64 * 242 / 256 / 8)}
SIOCGIFADDR = 0x8915
#: environment variables that name the NICs a run's traffic uses (names, or subnets for Open MPI's TCP BTL)
SELECTORS = ("NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include")
ARPHRD = {1: "ethernet", 32: "infiniband", 772: "loopback", 65534: "none"}


def _read(path: Path) -> str | None:
    """A sysfs attribute's text (stripped), None when absent or unreadable (a down link's ``speed`` raises)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def pcie_link(device: Path) -> dict | None:
    """The PCIe link of a device folder: current and maximum speed (GT/s) and width, the generation, and the
    data rate per direction (GB/s) of the maximum speed at the current width: an idle GPU trains its link down
    to a lower speed, so the current speed says little, but a narrower width stays narrow."""
    cur_speed, max_speed = _number(_read(device / "current_link_speed")), _number(_read(device / "max_link_speed"))
    cur_width, max_width = _number(_read(device / "current_link_width")), _number(_read(device / "max_link_width"))
    if cur_speed is None and max_speed is None:
        return None
    speed = max_speed or cur_speed
    width = int(cur_width or max_width or 0) or None
    gen = PCIE_GENERATIONS.get(speed)
    return {"speed_gts": cur_speed, "width": int(cur_width) if cur_width else None, "max_speed_gts": max_speed,
            "max_width": int(max_width) if max_width else None, "generation": gen[0] if gen else None,
            "gbps": round(gen[1] * width, 3) if gen and width else None}


def pci_address(device: Path) -> str | None:
    """The PCI address (``0000:18:00.0``) a ``device`` link resolves to, None for a virtual device."""
    try:
        real = device.resolve(strict=True)
    except OSError:
        return None
    name = real.name
    return name if len(name) == 12 and name[4] == ":" and name[7] == ":" else None


def _ipv4(name: str) -> str | None:
    """The interface's IPv4 address in this network namespace, None without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            import fcntl

            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def net_interfaces(root: Path, live: bool, shaping: dict[str, dict] | None = None) -> tuple[list[dict], list[str]]:
    """Every network interface: name, kind, state, sysfs speed (Mb/s), shaped rate, address, PCI device."""
    net = root / "sys" / "class" / "net"
    notes = []
    names = sorted(p.name for p in net.iterdir() if not p.name.startswith(".")) if net.is_dir() else []
    if live:
        here = {name: index for index, name in socket.if_nameindex()}
        seen = {n for n in names if _number(_read(net / n / "ifindex")) == here.get(n)}
        if set(here) - seen:
            notes.append("/sys/class/net shows another network namespace's interfaces: speeds unknown for "
                         + ", ".join(sorted(set(here) - seen)))
        names = sorted(here)
    else:
        seen = set(names)
    out = []
    for name in names:
        folder = net / name
        known = name in seen
        kind = ARPHRD.get(int(_number(_read(folder / "type")) or -1), "other") if known else None
        speed = _number(_read(folder / "speed")) if known else None
        device = folder / "device"
        pci = pci_address(device) if known else None
        virtual = known and "/devices/virtual/" in str(folder.resolve())
        entry = {"name": name, "kind": kind, "operstate": _read(folder / "operstate") if known else None,
                 "speed_mbps": int(speed) if speed is not None and speed > 0 else None,
                 "virtual": virtual, "pci": pci, "pcie": pcie_link(device) if pci else None,
                 "ipv4": _ipv4(name) if live else _read(folder / "ipv4")}
        shaped = (shaping or {}).get(name)
        if shaped:
            entry["shaped_mbps"] = shaped["mbps"]
            entry["shaping"] = shaped["how"]
        out.append(entry)
    return out, notes


def _port_rate_gbps(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0 (Gb/s)."""
    value = _number(text)
    return value if value and value > 0 else None


def rdma_ports(root: Path) -> list[dict]:
    """Every RDMA port (InfiniBand or RoCE): device, port, state, rate (Gb/s), link layer, PCI, netdev."""
    base = root / "sys" / "class" / "infiniband"
    out = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        pci = pci_address(dev / "device")
        netdevs = sorted(p.name for p in (dev / "device" / "net").iterdir()) \
            if (dev / "device" / "net").is_dir() else []
        for port in sorted((dev / "ports").iterdir(), key=lambda p: p.name) if (dev / "ports").is_dir() else []:
            state = _read(port / "state") or ""
            rate = _read(port / "rate")
            out.append({"device": dev.name, "port": int(port.name) if port.name.isdigit() else 0,
                        "state": state.split(":")[-1].strip() or None,
                        "phys_state": (_read(port / "phys_state") or "").split(":")[-1].strip() or None,
                        "rate": rate, "rate_gbps": _port_rate_gbps(rate),
                        "link_layer": _read(port / "link_layer"), "pci": pci,
                        "pcie": pcie_link(dev / "device") if pci else None,
                        "netdev": netdevs[0] if netdevs else None})
    return out


def pci_path(root: Path, address: str) -> list[str]:
    """The chain of PCI devices from the root complex to ``address`` (``/sys/bus/pci/devices/BDF`` resolved)."""
    link = root / "sys" / "bus" / "pci" / "devices" / address
    try:
        real = link.resolve(strict=True)
    except OSError:
        return []
    return [p for p in real.parts if p.startswith("pci") or (len(p) == 12 and p[4] == ":" and p[7] == ":")]


def pci_distance(a: list[str], b: list[str]) -> tuple[int, str]:
    """Steps between two devices' PCI paths and ``nvidia-smi topo``'s name for their relation: PIX (one switch:
    its upstream port is the last device they share), PXB (several switches), PHB (only the root complex
    shared), SYS (different root complexes)."""
    if not a or not b:
        return 99, "unknown"
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    hops = (len(a) - common) + (len(b) - common)
    if common == 0:
        return hops, "SYS"
    if common == 1:
        return hops, "PHB"
    return hops, "PIX" if hops <= 4 else "PXB"  # through one switch: down to its ports and back


def nearest_nics(root: Path, gpus: list[dict], rdma: list[dict], net: list[dict]) -> None:
    """Set each GPU's ``nearest_nic`` (an RDMA device, else a network interface with a PCI device) and how far."""
    nics = [(p["device"], p["pci"]) for p in rdma if p.get("pci")]
    if not nics:
        nics = [(n["name"], n["pci"]) for n in net if n.get("pci") and n.get("kind") != "loopback"]
    nics = list(dict.fromkeys(nics))
    paths = {pci: pci_path(root, pci) for _, pci in nics}
    for gpu in gpus:
        own = pci_path(root, gpu["bus_id"]) if gpu.get("bus_id") else []
        ranked = sorted((pci_distance(own, paths[pci]), name) for name, pci in nics)
        if ranked and ranked[0][0][1] != "unknown":
            (hops, relation), name = ranked[0]
            gpu["nearest_nic"], gpu["nic_relation"] = name, relation


def read_host(root: str | os.PathLike = "/", nvml_answers: dict | None = None) -> dict:
    """This host's links (``root`` "/": the live machine; else a recorded host's folder)."""
    root = Path(root)
    live = root == Path("/")
    notes: list[str] = []
    shaping = links_shaping.read_all() if live else links_shaping.from_recorded(root / "tc.json")
    net, net_notes = net_interfaces(root, live, shaping.get("interfaces"))
    notes += net_notes + shaping.get("notes", [])
    rdma = rdma_ports(root)
    if nvml_answers is None:
        nvml_answers = links_nvml.answers() if live else links_nvml.recorded(root / "nvml.json")
    gpus = links_nvml.gpu_links(nvml_answers)
    for gpu in gpus:
        if gpu.get("bus_id") and gpu.get("pcie") is None:
            gpu["pcie"] = pcie_link(root / "sys" / "bus" / "pci" / "devices" / gpu["bus_id"])
    nearest_nics(root, gpus, rdma, net)
    selectors = {v: os.environ[v] for v in SELECTORS if os.environ.get(v)} if live else {}
    return {"read_from": "sysfs, tc and NVML of the host" if live else str(root), "net": net, "rdma": rdma, "gpus": gpus,
            "selectors": selectors,
            "nvml": nvml_answers.get("about"), "notes": notes + list(nvml_answers.get("notes", []))}

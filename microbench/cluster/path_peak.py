"""The peak of the path a run's data crossed, from the ranks' placement and each host's links, and a result's
busbw as a share of it.

The path's tiers: between hosts the network (each host's NICs that its ranks use, summed; the slowest host sets
the peak); inside a host NVLink when every rank's GPU reaches the next rank's over NVLink (through an NVSwitch,
or directly), else PCIe (each GPU's link); CPU buffers on one host move through shared memory, whose peak is not
read (memory bandwidth is no link): no share then. Across hosts the path's peak is the lower of the network and
the tier inside the hosts. Peaks are per direction, GB/s (1e9 B/s): what nccl-tests' busbw is meant to be
compared with (its doc/PERFORMANCE.md); a bidirectional benchmark (bibw) moves data both ways, so its peak is
twice the link's. The network NICs of a host: those its environment names (``NCCL_IB_HCA``, ``UCX_NET_DEVICES``,
``NCCL_SOCKET_IFNAME``, ``OMPI_MCA_btl_tcp_if_include``: names or subnets), else for GPU ranks the NIC nearest
each GPU, else its active RDMA ports, else its interfaces that are up and have an IPv4 address. A shaped
interface counts at its qdisc's rate when that is below its speed.

Where NCCL chose an algorithm that reduces inside the switch (NVLS, NVLS_TREE: NVLink SHARP; COLLNET_DIRECT,
COLLNET_CHAIN: SHARP in the network), busbw can exceed the wire: the share is not given, and ``beyond_wire``
says why.
"""

from __future__ import annotations

import ipaddress

from microbench.cluster.links import SELECTORS

#: NCCL algorithms whose reduction happens in a switch, so busbw can exceed the link (see the module's text)
BEYOND_WIRE = {"NVLS": "NVLS reduces inside the NVSwitch (NVLink SHARP)",
               "NVLS_TREE": "NVLS_TREE reduces inside the NVSwitch (NVLink SHARP)",
               "NVLSTREE": "NVLSTree reduces inside the NVSwitch (NVLink SHARP)",
               "COLLNET_DIRECT": "CollNet reduces inside the network switches (SHARP)",
               "COLLNET_CHAIN": "CollNet reduces inside the network switches (SHARP)",
               "COLLNETDIRECT": "CollNet reduces inside the network switches (SHARP)",
               "COLLNETCHAIN": "CollNet reduces inside the network switches (SHARP)"}


def _selected_names(value: str) -> tuple[list[str], list]:
    """(names, subnets) of a selector variable's value: ``mlx5_0:1,mlx5_1``, ``=eth0``, ``10.0.0.0/24``."""
    names, nets = [], []
    for item in value.lstrip("=^").split(","):
        item = item.strip().split(":")[0]
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            names.append(item)
    return names, nets


def _iface_mbps(iface: dict) -> float | None:
    rates = [r for r in (iface.get("speed_mbps"), iface.get("shaped_mbps")) if r]
    return min(rates) if rates else None


def _iface_text(host: str, iface: dict) -> str:
    rate = _iface_mbps(iface)
    what = f"{host} {iface['name']} {_mbit(rate)}" if rate else f"{host} {iface['name']}"
    if iface.get("shaped_mbps") and iface.get("shaped_mbps") == rate:
        what += f" ({iface.get('shaping')}; sysfs says {iface.get('speed_mbps') or 'no speed'}"
        what += " Mb/s)" if iface.get("speed_mbps") else ")"
    return what


def _mbit(mbps: float | None) -> str:
    if mbps is None:
        return "?"
    return f"{mbps / 1000:g} Gbit/s" if mbps >= 1000 else f"{mbps:g} Mbit/s"


def host_network(host: str, links: dict, nics_of_gpus: list[str] | None = None) -> tuple[float | None, str]:
    """(GB/s per direction, which links) of one host's NICs that carry the run's traffic; None and why."""
    env = links.get("selectors") or {}
    rdma = [p for p in links.get("rdma") or [] if (p.get("state") or "").upper() == "ACTIVE"]
    net = [n for n in links.get("net") or [] if n.get("kind") != "loopback" and n.get("name") != "lo"]
    chosen_ports = chosen_ifaces = None
    for var in SELECTORS:
        if env.get(var):
            names, nets = _selected_names(env[var])
            ports = [p for p in rdma if p["device"] in names or p.get("netdev") in names]
            ifaces = [n for n in net if n["name"] in names or (n.get("ipv4") and any(
                ipaddress.ip_address(n["ipv4"]) in subnet for subnet in nets))]
            if ports or ifaces:
                chosen_ports, chosen_ifaces = ports, ifaces
                break
    if chosen_ports is None and nics_of_gpus:
        chosen_ports = [p for p in rdma if p["device"] in nics_of_gpus]
        chosen_ifaces = [] if chosen_ports else [n for n in net if n["name"] in nics_of_gpus]
    if chosen_ports is None and chosen_ifaces is None:
        chosen_ports = rdma
        chosen_ifaces = [] if rdma else [n for n in net if n.get("ipv4") and
                                         (n.get("operstate") or "up").lower() in ("up", "unknown")]
    if not chosen_ports and not chosen_ifaces:
        return None, f"{host}: no network interface with an address (links not read?)"
    total, parts = 0.0, []
    for port in chosen_ports or []:
        if not port.get("rate_gbps"):
            return None, f"{host} {port['device']} port {port['port']}: rate unknown"
        total += port["rate_gbps"] * 1000
        parts.append(f"{host} {port['device']}:{port['port']} {port.get('rate')}")
    for iface in chosen_ifaces or []:
        rate = _iface_mbps(iface)
        if rate is None:
            return None, f"{host} {iface['name']}: speed unknown (sysfs gives none, nothing shapes it)"
        total += rate
        parts.append(_iface_text(host, iface))
    return total / 8 / 1000, " + ".join(parts)


def _gpu_of(links: dict, bus_id: str | None) -> dict | None:
    for gpu in links.get("gpus") or []:
        if bus_id and gpu.get("bus_id") == bus_id.lower()[-12:]:
            return gpu
    return None


def _inside_hosts(hosts_by_rank: list[str], links: dict, gpus_by_rank: list) -> tuple[str, float | None, str]:
    """(tier, GB/s, which link) inside the hosts of a GPU run: NVLink where each rank reaches the next, else PCIe."""
    found = []
    for rank, host in enumerate(hosts_by_rank):
        bus = (gpus_by_rank[rank] or {}).get("bus_id") if rank < len(gpus_by_rank) else None
        gpu = _gpu_of(links.get(host) or {}, bus)
        if gpu is None:
            return "pcie", None, f"rank {rank}: its GPU ({bus or 'bus id unknown'}) is not in {host}'s links"
        found.append((host, gpu))
    nvlink = []
    for i, (host, gpu) in enumerate(found):
        nxt_host, nxt = found[(i + 1) % len(found)]
        nv = gpu.get("nvlink") or {}
        if nxt_host != host or nxt is gpu:
            continue
        peers = nv.get("peers") or {}
        links_to = peers.get("switch", 0) and nv.get("active_links") or peers.get(nxt.get("bus_id"), 0)
        if not links_to or not nv.get("gbps_per_link"):
            nvlink = None
            break
        nvlink.append((nv["gbps_per_link"] * links_to, f"{host} GPU {gpu.get('bus_id')} {links_to} NVLink"
                       f"{nv.get('version') or ''} links x {nv['gbps_per_link']:g} GB/s"))
    if nvlink:
        return ("nvlink", *min(nvlink))
    pcie = [((g.get("pcie") or {}).get("gbps"), f"{h} GPU {g.get('bus_id')} PCIe gen"
             f"{(g.get('pcie') or {}).get('generation')} x{(g.get('pcie') or {}).get('width')}") for h, g in found]
    if any(v is None for v, _ in pcie):
        return "pcie", None, "a GPU's PCIe link is unknown"
    return ("pcie", *min(pcie))


def path_peak(hosts_by_rank: list[str], links: dict[str, dict], device: str = "cpu",
              gpus_by_rank: list | None = None, crosses_hosts: bool | None = None) -> dict:
    """The path's peak: ``{"tier", "gbps" (None: unknown), "link" (what sets it, or why unknown)}``."""
    hosts = list(dict.fromkeys(hosts_by_rank))
    crosses = len(hosts) > 1 if crosses_hosts is None else crosses_hosts
    gpu_run = device in ("cuda", "rocm") and gpus_by_rank
    candidates = []
    if gpu_run:
        tier, gbps, link = _inside_hosts(hosts_by_rank, links, gpus_by_rank)
        if gbps is None and not crosses:
            return {"tier": tier, "gbps": None, "link": link}
        if gbps is not None:
            candidates.append((gbps, tier, link))
    if crosses:
        per_host = []
        for host in hosts:
            host_links = links.get(host)
            if not host_links:
                return {"tier": "network", "gbps": None, "link": f"{host}: its links were not read"}
            nics = None
            if gpu_run:
                nics = [g.get("nearest_nic") for r, h in enumerate(hosts_by_rank) if h == host
                        for g in [_gpu_of(host_links, (gpus_by_rank[r] or {}).get("bus_id"))] if g]
                nics = [n for n in nics if n] or None
            gbps, link = host_network(host, host_links, nics)
            if gbps is None:
                return {"tier": "network", "gbps": None, "link": link}
            per_host.append((gbps, "network", link))
        candidates.append(min(per_host))
    if not candidates:
        return {"tier": "shared memory", "gbps": None,
                "link": "shared memory inside one host: no peak known (memory bandwidth is not read)"}
    gbps, tier, link = min(candidates)
    return {"tier": tier, "gbps": round(gbps, 6), "link": link}


def peak_block(peak: dict | None, busbw_gbps: float | None, directions: int = 1,
               algorithm: str | None = None) -> dict | None:
    """A result's ``peak``: the path's tier, its peak for this benchmark (``directions`` x the link's), the link,
    and busbw / peak (``share``); no share where the peak is unknown, the busbw missing, or NCCL's algorithm
    reduces in a switch (``beyond_wire`` says so)."""
    if not peak:
        return None
    gbps = peak["gbps"] * directions if peak.get("gbps") else None
    out = {"tier": peak["tier"], "gbps": gbps, "link": peak["link"], "share": None}
    beyond = BEYOND_WIRE.get((algorithm or "").upper())
    if beyond:
        out["beyond_wire"] = f"{beyond}: busbw can exceed the wire, so no share of it is given"
    elif gbps and busbw_gbps is not None:
        out["share"] = round(busbw_gbps / gbps, 6)
    return out

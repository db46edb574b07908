"""A host's links as text lines (``microbench info``, the report): speeds per direction, shaped rates, NICs."""

from __future__ import annotations


def _gbps(value) -> str:
    return "?" if value is None else f"{value:.4g} GB/s"


def _pcie(link: dict | None) -> str:
    if not link:
        return ""
    return f"PCIe gen{link.get('generation') or '?'} x{link.get('width') or '?'} ({_gbps(link.get('gbps'))} per direction)"


def link_lines(host: str, links: dict) -> list[str]:
    """A host's links as text: interfaces, RDMA ports, GPUs (speeds per direction)."""
    out = [f"links of {host} ({links.get('read_from')}):"]
    for n in links.get("net") or []:
        if n.get("kind") == "loopback":
            continue
        speed = f"{n['speed_mbps']} Mb/s" if n.get("speed_mbps") else "speed unknown"
        if n.get("shaped_mbps"):
            speed += f", shaped to {n['shaped_mbps']:g} Mbit/s ({n.get('shaping')})"
        where = ", ".join(filter(None, [n.get("ipv4"), "virtual" if n.get("virtual") else None, _pcie(n.get("pcie"))]))
        out.append(f"  {n['name']}: {n.get('kind') or '?'} {n.get('operstate') or '?'}, {speed}"
                   + (f" [{where}]" if where else ""))
    for p in links.get("rdma") or []:
        out.append(f"  {p['device']}:{p['port']}: {p.get('link_layer') or '?'} {p.get('state') or '?'}, "
                   f"{p.get('rate') or 'rate unknown'}" + (f" [{_pcie(p.get('pcie'))}]" if p.get("pcie") else "")
                   + (f", netdev {p['netdev']}" if p.get("netdev") else ""))
    for g in links.get("gpus") or []:
        nv = g.get("nvlink")
        text = f"  GPU {g.get('index')} {g.get('name')} {g.get('bus_id')}: "
        if nv:
            text += (f"NVLink{nv.get('version') or '?'} x{nv['active_links']} = {_gbps(nv.get('gbps'))} per direction "
                     f"({nv.get('gbps_per_link')} GB/s per link; NVML reports {nv.get('nvml_gbps_per_link')} GB/s "
                     "signalling), ")
        text += _pcie(g.get("pcie")) or "PCIe unknown"
        if g.get("nearest_nic"):
            text += f", nearest NIC {g['nearest_nic']} ({g.get('nic_relation')})"
        out.append(text)
    if len(out) == 1:
        out.append("  none found")
    out += [f"  note: {note}" for note in links.get("notes") or []]
    return out

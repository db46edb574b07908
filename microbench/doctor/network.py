"""Layer 4, network: the interfaces the libraries will use exist, are up and are the ones expected, the
InfiniBand/RoCE ports are active, and every node reaches the torch.distributed rendezvous.

On each node's lowest rank, ``collect``: the node's interfaces (getifaddrs: names, flags and addresses as this
process's network namespace has them), its InfiniBand/RoCE ports (sysfs), the interface settings of the rank's
environment (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, UCX_NET_DEVICES, Open MPI's if_include), where
its hostname resolves, and one TCP connection to the rendezvous (``--store-port`` on rank 0's host, which rank 0
opens first; torchrun's own store under torchrun) through the interface the kernel routes it to. On the
coordinator, ``judge``: every setting names an interface that exists and is up with an address on every node;
the interface the bootstrap would take (gloo: the hostname's address or GLOO_SOCKET_IFNAME; NCCL: its own rule)
is not loopback and is ``--iface`` where given; a port active on most nodes is active everywhere; each node's
connection to the rendezvous succeeded (refused, no answer and no route told apart).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import ipaddress
import os
import socket
import struct
import threading
import time
from collections import Counter

from microbench.doctor.job import Job
from microbench.doctor.sysfs import listdir as _listdir, read as _read
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, verdict

LAYER = BY_NAME["network"]
SETTINGS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES",
            "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_exclude", "OMPI_MCA_oob_tcp_if_include",
            "MASTER_ADDR", "MASTER_PORT")
DEFAULT_STORE_PORT = 29500  #: torchrun's default MASTER_PORT
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40


# ------------------------------------------------------------------------------ the node's interfaces
class _SockAddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 26)]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [("next", ctypes.POINTER(_IfAddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
                     ("addr", ctypes.POINTER(_SockAddr)), ("netmask", ctypes.POINTER(_SockAddr)),
                     ("ifu", ctypes.c_void_p), ("data", ctypes.c_void_p)]


def interfaces() -> list[dict]:
    """This network namespace's interfaces: name, up (IFF_UP and IFF_RUNNING), loopback, IPv4/IPv6 addresses
    (``addr/prefix``), from getifaddrs(3) (sysfs shows the namespace that mounted it, not necessarily ours)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return [{"name": n, "up": None, "loopback": n == "lo", "ipv4": [], "ipv6": []} for _, n in socket.if_nameindex()]
    found: dict[str, dict] = {}
    try:
        node = head
        while node:
            entry = node.contents
            name = entry.name.decode(errors="replace")
            iface = found.setdefault(name, {"name": name, "up": False, "loopback": False, "ipv4": [], "ipv6": []})
            iface["up"] = iface["up"] or bool(entry.flags & _IFF_UP and entry.flags & _IFF_RUNNING)
            iface["loopback"] = bool(entry.flags & _IFF_LOOPBACK)
            if entry.addr:
                family = entry.addr.contents.family
                raw = bytes(entry.addr.contents.data)
                mask = bytes(entry.netmask.contents.data) if entry.netmask else b""
                if family == socket.AF_INET:
                    prefix = _prefix(mask[2:6])
                    iface["ipv4"].append(f"{socket.inet_ntop(socket.AF_INET, raw[2:6])}/{prefix}")
                elif family == socket.AF_INET6:
                    prefix = _prefix(mask[6:22])
                    iface["ipv6"].append(f"{socket.inet_ntop(socket.AF_INET6, raw[6:22])}/{prefix}")
            node = entry.next
    finally:
        libc.freeifaddrs(head)
    return list(found.values())


def _prefix(mask: bytes) -> int:
    return sum(bin(b).count("1") for b in mask)


def ib_ports(root: str = "/") -> list[dict]:
    """InfiniBand/RoCE ports from sysfs: device, port, state (ACTIVE...), physical state, link layer, rate, the
    net devices on it and its NUMA node."""
    base = os.path.join(root, "sys/class/infiniband")
    out = []
    for dev in sorted(_listdir(base)):
        netdevs = sorted(_listdir(os.path.join(base, dev, "device/net")))
        numa = _read(os.path.join(base, dev, "device/numa_node"))
        for port in sorted(_listdir(os.path.join(base, dev, "ports")), key=lambda p: int(p) if p.isdigit() else 0):
            p = os.path.join(base, dev, "ports", port)
            out.append({"device": dev, "port": int(port) if port.isdigit() else port,
                        "state": _state(_read(os.path.join(p, "state"))),
                        "phys_state": _state(_read(os.path.join(p, "phys_state"))),
                        "link_layer": _read(os.path.join(p, "link_layer")), "rate": _read(os.path.join(p, "rate")),
                        "netdevs": netdevs, "numa": int(numa) if numa and numa.lstrip("-").isdigit() else None})
    return out


def _state(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    return text.split(":", 1)[-1].strip() if text else None




# ------------------------------------------------------------------------------ what the libraries choose
def matching(names: list[str], setting: str, exact: bool = False) -> list[str]:
    """Interfaces a NCCL-style list selects: comma-separated prefixes, ``^`` excluding, ``=`` for exact names
    (``exact``: every name exact, as GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME)."""
    text = setting.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    whole = exact or text.startswith("=")
    wanted = [w.split(":")[0] for w in text.lstrip("=").split(",") if w]

    def hit(name: str) -> bool:
        return any(name == w if whole else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def nccl_choice(ifaces: list[dict], setting: str | None) -> str | None:
    """The socket interface NCCL would take: NCCL_SOCKET_IFNAME's first match that is up with an address, else
    an ib* interface, else the first that is not loopback, docker or virbr."""
    usable = [i["name"] for i in ifaces if i["up"] and (i["ipv4"] or i["ipv6"])]
    if setting:
        chosen = matching(usable, setting)
        return chosen[0] if chosen else None
    ib = [n for n in usable if n.startswith("ib")]
    rest = matching(usable, "^docker,lo,virbr")
    return (ib or rest or [None])[0]


def address_interface(ifaces: list[dict], address: str) -> str | None:
    """The interface holding ``address`` (or whose subnet holds it)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    for iface in ifaces:
        for cidr in iface["ipv4"] + iface["ipv6"]:
            if ipaddress.ip_address(cidr.split("/")[0].split("%")[0]) == ip:
                return iface["name"]
    if ip.is_loopback:
        return next((i["name"] for i in ifaces if i["loopback"]), "lo")
    return None


def resolve(host: str) -> str | None:
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError):
        return None


# ------------------------------------------------------------------------------ the rendezvous
class Listener:
    """Rank 0's stand-in for the rendezvous during layer 4: accepts connections on the store's port until ``close``
    (before layer 6 puts torch's store there). The prober closes first, so the port keeps no TIME_WAIT here."""

    def __init__(self, port: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", port))
        self.sock.listen(socket.SOMAXCONN)  # every node probes at once
        self._accepted: list[socket.socket] = []
        self._open = True
        self._thread = threading.Thread(target=self._serve, name="microbench-doctor-rendezvous", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._open:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._accepted.append(conn)

    def close(self) -> None:
        """Stop listening now (the port is free when this returns) and drop what was accepted."""
        self._open = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._thread.join(timeout=2)
        self.sock.close()
        for conn in self._accepted:
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()


def probe(host: str, port: int, timeout: float) -> dict:
    """One TCP connection to host:port: ``ok``, or ``refused`` (nothing listens), ``timeout`` (dropped on the way:
    a firewall), ``unreachable`` (no route), ``unresolved``; the local address it left from and the seconds."""
    address = resolve(host)
    if address is None:
        return {"result": "unresolved", "address": None, "source": None, "seconds": 0.0}
    start = time.monotonic()
    outcome, source = "ok", None
    deadline = start + timeout
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(max(deadline - time.monotonic(), 0.05))
        try:
            s.connect((address, port))
            source = s.getsockname()[0]
            outcome = "ok"
        except socket.timeout:
            outcome = "timeout"
        except ConnectionRefusedError:
            outcome = "refused"
        except OSError as exc:
            if exc.errno in (errno.ECONNRESET, errno.ECONNABORTED):
                outcome = "ok"  # something listening answered, then hung up: the port is reachable
            elif exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                outcome = "unreachable"
            else:
                outcome = f"error {errno.errorcode.get(exc.errno, exc.errno)}"
        finally:
            s.close()
        # a refusal in the first second may be rank 0 still opening the port: ask again
        if outcome != "refused" or time.monotonic() - start > min(1.0, timeout) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return {"result": outcome, "address": address, "source": source, "seconds": round(time.monotonic() - start, 3)}


def route_source(address: str) -> str | None:
    """The local address the kernel would send to ``address`` from (a UDP socket's connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def collect(ctx: dict) -> dict:
    """This rank's settings; on a node's lowest rank also its interfaces, ports, hostname and rendezvous probe."""
    out: dict = {"settings": {k: os.environ[k] for k in SETTINGS if k in os.environ}}
    if not ctx.get("node_facts"):
        return out
    ifaces = interfaces()
    host = socket.gethostname()
    own = resolve(host)
    out.update(interfaces=ifaces, ib=ib_ports(), hostname_address=own,
               hostname_interface=address_interface(ifaces, own) if own else None)
    store = ctx.get("store")
    if store:
        result = probe(store[0], int(store[1]), float(ctx.get("connect_timeout", 5.0)))
        source = result["source"] or (route_source(result["address"]) if result["address"] else None)
        result["interface"] = address_interface(ifaces, source) if source else None
        out["rendezvous"] = result
    return out


# ------------------------------------------------------------------------------ the verdict
def judge(reports: dict[int, dict], job: Job, store: tuple[str, int] | None, expect: str | None,
          listen_error: str | None = None) -> LayerResult:
    findings: list[Finding] = []
    nodes = {r: rep for r, rep in reports.items() if "interfaces" in rep}
    multi_node = len(job.ranks_per_host) > 1
    if listen_error:
        findings.append(Finding(listen_error, host=job.host_of(0), ranks=[0]))
    ranks_of_host = job.by_host(reports)
    for rank, rep in sorted(nodes.items()):
        host = job.host_of(rank)
        ifaces = rep["interfaces"]
        names = [i["name"] for i in ifaces]
        usable = [i["name"] for i in ifaces if i["up"] and (i["ipv4"] or i["ipv6"])]
        node_ranks = ranks_of_host.get(host, [rank])
        settings_here = {k: v for r in node_ranks for k, v in reports[r].get("settings", {}).items()}
        loopback = [i["name"] for i in ifaces if i["loopback"]] if multi_node else []
        findings += _settings_problems(host, node_ranks, settings_here, names, usable, rep.get("ib", []), loopback)
        gloo = (settings_here.get("GLOO_SOCKET_IFNAME", "").split(",")[0] or rep.get("hostname_interface"))
        if multi_node and not settings_here.get("GLOO_SOCKET_IFNAME"):
            own = rep.get("hostname_address")
            if own is None:
                findings.append(Finding(f"{host}: its own hostname does not resolve there (gloo and NCCL advertise "
                                        f"it to the other nodes)", host=host, ranks=node_ranks))
            elif ipaddress.ip_address(own).is_loopback:
                findings.append(Finding(f"{host}: its hostname resolves to {own} (loopback): gloo would advertise an "
                                        f"address no other node can reach (fix /etc/hosts there, or set "
                                        f"GLOO_SOCKET_IFNAME)", host=host, ranks=node_ranks))
        nccl = nccl_choice(ifaces, settings_here.get("NCCL_SOCKET_IFNAME"))
        rep["chosen"] = {"gloo": gloo, "nccl": nccl, "rendezvous": (rep.get("rendezvous") or {}).get("interface")}
        if expect:
            findings += _expectation(host, node_ranks, expect, usable, names, rep["chosen"], settings_here)
        findings += _rendezvous_problem(host, node_ranks, rep.get("rendezvous"), store)
    findings += _ports_unlike_the_rest(nodes, job)
    chosen = Counter(tuple(sorted((k, v) for k, v in rep["chosen"].items() if v)) for rep in nodes.values())
    common = dict(chosen.most_common(1)[0][0]) if chosen else {}
    failed = [f for f in findings if not f.note]
    if failed:
        summary = failed[0].what + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "")
    else:
        parts = [f"bootstrap via {common.get('gloo') or '?'} (gloo), {common.get('nccl') or '?'} (NCCL)"]
        if store:
            parts.append(f"rendezvous {store[0]}:{store[1]} reached from {len(nodes)} node(s)")
        active = sum(1 for rep in nodes.values() for p in rep.get("ib", []) if p["state"] == "ACTIVE")
        parts.append(f"{active} active InfiniBand/RoCE port(s)" if active else "no InfiniBand/RoCE port")
        summary = "; ".join(parts)
    return verdict(summary, findings, LAYER, details={
        "store": list(store) if store else None, "expected_interface": expect,
        "chosen": {job.host_of(r): rep["chosen"] for r, rep in nodes.items()},
        "rendezvous": {job.host_of(r): rep.get("rendezvous") for r, rep in nodes.items()}})


def _settings_problems(host: str, ranks: list[int], settings: dict, names: list[str], usable: list[str],
                       ports: list[dict], loopback: list[str] = ()) -> list[Finding]:
    """What the interface settings of a node's ranks get wrong there (``loopback``: the node's loopback
    interfaces when the job spans nodes, where a bootstrap through them reaches no other node)."""
    out = []

    def bad(text: str) -> None:
        out.append(Finding(f"{host}: {text}", host=host, ranks=ranks))

    have = f"it has {', '.join(names) or 'none'}"
    for var, exact in (("GLOO_SOCKET_IFNAME", True), ("TP_SOCKET_IFNAME", True), ("NCCL_SOCKET_IFNAME", False)):
        value = settings.get(var)
        if not value:
            continue
        if not matching(names, value, exact):
            bad(f"{var}={value} names no interface there ({have})")
        elif not matching(usable, value, exact):
            bad(f"{var}={value}: {', '.join(matching(names, value, exact))} is down or has no address there")
        elif loopback and set(matching(usable, value, exact)) <= set(loopback):
            bad(f"{var}={value} names the loopback interface, which reaches no other node (the job spans nodes)")
    for var in ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"):
        value = settings.get(var)
        if value and not _ompi_matches(value, names):
            bad(f"{var}={value} matches no interface or subnet there ({have})")
    hca = settings.get("NCCL_IB_HCA")
    if hca:
        devices = sorted({p["device"] for p in ports})
        chosen = matching(devices, hca)
        if not chosen:
            bad(f"NCCL_IB_HCA={hca} names no InfiniBand/RoCE device there (it has {', '.join(devices) or 'none'})")
        for p in ports:
            if p["device"] in chosen and p["state"] != "ACTIVE":
                bad(f"NCCL_IB_HCA={hca}: port {p['device']}:{p['port']} is {p['state']} "
                    f"({p['phys_state']}) there")
    ucx = settings.get("UCX_NET_DEVICES")
    if ucx and ucx != "all":
        for dev in ucx.split(","):
            name, _, port = dev.partition(":")
            on_ib = [p for p in ports if p["device"] == name and (not port or str(p["port"]) == port)]
            if on_ib:
                for p in on_ib:
                    if p["state"] != "ACTIVE":
                        bad(f"UCX_NET_DEVICES={ucx}: port {name}:{p['port']} is {p['state']} there")
            elif name not in names:
                bad(f"UCX_NET_DEVICES={ucx}: no device {dev} there ({have})")
    return out


def _ompi_matches(value: str, names: list[str]) -> bool:
    for item in value.split(","):
        item = item.strip()
        if "/" in item:
            return True  # a subnet: which interface holds it is what layer 3 exercised
        if item in names:
            return True
    return False


def _expectation(host: str, ranks: list[int], expect: str, usable: list[str], names: list[str], chosen: dict,
                 settings: dict) -> list[Finding]:
    if expect not in names:
        return [Finding(f"{host}: no interface {expect} (--iface) there (it has {', '.join(names) or 'none'})",
                        host=host, ranks=ranks)]
    if expect not in usable:
        return [Finding(f"{host}: {expect} (--iface) is down or has no address there", host=host, ranks=ranks)]
    out = []
    for what, name in chosen.items():
        if name and name != expect:
            how = {"gloo": "gloo's bootstrap (GLOO_SOCKET_IFNAME, else the hostname's address)",
                   "nccl": "NCCL's bootstrap (NCCL_SOCKET_IFNAME, else its own pick)",
                   "rendezvous": "the route to the rendezvous"}[what]
            out.append(Finding(f"{host}: {how} goes through {name}, not {expect} (--iface)", host=host, ranks=ranks))
    return out


def _rendezvous_problem(host: str, ranks: list[int], result: dict | None, store) -> list[Finding]:
    if not result or not store or result["result"] == "ok":
        return []
    target = f"the rendezvous {store[0]}:{store[1]}"
    why = {"refused": "refused: nothing listens there, or a firewall rejects it",
           "timeout": f"no answer in {result['seconds']:.0f} s: a firewall drops it, or a route that goes nowhere",
           "unreachable": "no route to it",
           "unresolved": f"{store[0]} does not resolve there"}.get(result["result"], result["result"])
    if int(store[1]) == 0:
        why = "port 0 names no port (torchrun's --master-port 0 leaves its workers no store to join: they hang)"
    via = f" (leaving through {result['interface']})" if result.get("interface") else ""
    return [Finding(f"{host} cannot reach {target}{via}: {why}", host=host, ranks=ranks)]


def _ports_unlike_the_rest(nodes: dict[int, dict], job: Job) -> list[Finding]:
    """A port (device:port) active on most nodes but not on some: those nodes are named."""
    states: dict[str, dict[int, str]] = {}
    for rank, rep in nodes.items():
        for p in rep.get("ib", []):
            states.setdefault(f"{p['device']}:{p['port']}", {})[rank] = f"{p['state']} ({p['phys_state']})"
    out = []
    for port, by_rank in states.items():
        active = [r for r, s in by_rank.items() if s.startswith("ACTIVE")]
        if len(active) * 2 <= len(nodes):
            continue
        missing = [r for r in nodes if r not in by_rank]
        for rank in [r for r in by_rank if r not in active] + missing:
            host = job.host_of(rank)
            state = by_rank.get(rank, "absent")
            out.append(Finding(f"{host}: InfiniBand/RoCE port {port} is {state}; it is ACTIVE on "
                               f"{len(active)} of {len(nodes)} nodes", host=host, ranks=[rank]))
    return out

"""An emulated cluster on one machine: N "nodes" as Linux network namespaces, for multi-node tests.

Each node is a network namespace with its own hostname (a UTS namespace) and one interface, ``emu0``,
with an address in 10.77.0.0/24; the interfaces meet on a bridge that lives in a namespace of its own (the
"switch"), so no interface, address or route is ever added to the machine's own network namespace, and
every address a test talks to exists only inside the cluster. The filesystem, process IDs and CPUs are
shared: the nodes run the same Python and MPI from the same paths.

- MPI: ``mpiexec_command`` runs Open MPI's launcher (prterun) on node0; it reaches the other nodes through
  ``agent`` (``plm_ssh_agent``), a script that runs the launcher's command in that node's network and UTS
  namespaces, as ssh would on a real cluster. Between nodes the ranks use TCP on ``emu0`` only (btl and
  oob restricted to the cluster's subnet); inside a node, shared memory.
- Slurm: ``slurm_cluster.SlurmCluster`` accepts the nodes (one slurmd per namespace, slurmctld on node0).
- A slow node: ``throttled(node, mbit)`` puts a token-bucket filter (``tc qdisc tbf``) on both ends of that
  node's veth, so its links carry at most the rate in each direction (``netem`` is not in every kernel).

Teardown ends every process inside the nodes and deletes the namespaces; it runs at the end of the test
session even when tests fail, and ``up`` first removes what a crashed session left (state under
``/run/microbench-emulated/NAME``, owned by a process that no longer exists). By hand::

    python tests/emulated_cluster.py up --nodes 3          # see docs/emulated-cluster.md
    python tests/emulated_cluster.py mpirun --per-node 2 -- microbench run allreduce -m 8:1K
    python tests/emulated_cluster.py down
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STATE_ROOT = Path("/run/microbench-emulated")
NETNS_PREFIX = "mbemu-"
SUBNET = "10.77.0.0/24"  #: exists only inside the cluster's namespaces
IFACE = "emu0"  #: each node's interface (its own namespace); the switch side is p0, p1, ...
MAX_NODES = 16
TOOLS = ("ip", "tc", "nsenter", "unshare", "umount")


def node_address(index: int) -> str:
    return f"10.77.0.{index + 1}"


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one setup command; on failure raise with its stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


_why_not: list[str | None] = []


def missing() -> str | None:
    """Why an emulated cluster cannot be made here (None when it can); probed once per process."""
    if not _why_not:
        _why_not.append(_probe())
    return _why_not[0]


def _probe() -> str | None:
    if not sys.platform.startswith("linux"):
        return "emulated cluster: network namespaces are Linux only"
    absent = [t for t in TOOLS if not shutil.which(t)]
    if absent:
        return (f"emulated cluster: {', '.join(absent)} not installed "
                f"(apt-get install iproute2 util-linux)")
    if os.geteuid() != 0:
        return "emulated cluster: network namespaces need root"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"emulated cluster: cannot create namespaces here ({probe.stderr.strip()})"
    return None


@dataclass(frozen=True)
class Node:
    name: str  #: its hostname, as MPI and Slurm see it
    index: int
    netns: str  #: ip netns name
    uts: Path  #: bind mount of its UTS namespace

    @property
    def address(self) -> str:
        return node_address(self.index)

    @property
    def port(self) -> str:
        """Its veth's other end, on the switch."""
        return f"p{self.index}"


def _owner_token(pid: int) -> str:
    """``pid:start-time``: a process, told apart from a later one that reuses its pid."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return f"{pid}:?"
    return f"{pid}:{start}"


def _owner_alive(token: str) -> bool:
    if token == "manual":
        return True
    pid = token.split(":", 1)[0]
    return pid.isdigit() and _owner_token(int(pid)) == token


class EmulatedCluster:
    """``up()`` makes the nodes, ``down()`` removes them and everything running inside them."""

    def __init__(self, nodes: int, name: str, owner: str | None = None):
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"an emulated cluster has 1 to {MAX_NODES} nodes, not {nodes}")
        if not name.isalnum():
            raise ValueError(f"cluster name {name!r}: letters and digits only")
        self.name = name
        self.owner = owner or _owner_token(os.getpid())
        self.state = STATE_ROOT / name
        self.switch = f"{NETNS_PREFIX}{name}-switch"
        self.nodes = [Node(f"node{i}", i, f"{NETNS_PREFIX}{name}-node{i}", self.state / f"node{i}.uts")
                      for i in range(nodes)]
        self.agent = self.state / "agent"
        self.hosts_file = self.state / "hosts"  #: every node's /etc/hosts: the node names and their addresses
        self.sysfs = self.state / "sysfs"  #: where a command on a node mounts the node's own sysfs (its mount namespace)

    @classmethod
    def load(cls, name: str) -> "EmulatedCluster":
        """The cluster ``name`` that ``up`` made (by hand or in another process)."""
        try:
            info = json.loads((STATE_ROOT / name / "cluster.json").read_text())
            return cls(int(info["nodes"]), name, str(info["owner"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FileNotFoundError(f"no emulated cluster {name!r} is up "
                                    f"(python tests/emulated_cluster.py up)") from exc

    @classmethod
    def remains(cls, name: str) -> "EmulatedCluster":
        """Whatever state ``name`` left, as a cluster to tear down (every possible node when it says nothing)."""
        try:
            return cls.load(name)
        except FileNotFoundError:
            return cls(MAX_NODES, name, "gone")

    @property
    def hosts(self) -> list[str]:
        return [n.name for n in self.nodes]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in this cluster ({', '.join(self.hosts)})")

    # -- life cycle ---------------------------------------------------------------------------
    def up(self) -> "EmulatedCluster":
        reap_leftovers()
        if self.state.exists():
            EmulatedCluster.remains(self.name).down()
        self.state.mkdir(parents=True)
        # the state is written before any namespace exists, so a crash leaves nothing unowned
        (self.state / "cluster.json").write_text(json.dumps({"nodes": len(self.nodes), "owner": self.owner}))
        try:
            _sh("ip", "netns", "add", self.switch)
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for node in self.nodes:
                self._add_node(node)
            self.sysfs.mkdir()
            self.hosts_file.write_text("127.0.0.1 localhost\n" +
                                       "".join(f"{n.address} {n.name}\n" for n in self.nodes))
            self._write_agent()
        except BaseException:
            self.down()
            raise
        return self

    def _add_node(self, node: Node) -> None:
        _sh("ip", "netns", "add", node.netns)
        _sh("ip", "link", "add", IFACE, "netns", node.netns, "type", "veth",
            "peer", "name", node.port, "netns", self.switch)
        _sh("ip", "-n", self.switch, "link", "set", node.port, "master", "br0", "up")
        _sh("ip", "-n", node.netns, "addr", "add", f"{node.address}/24", "dev", IFACE)
        _sh("ip", "-n", node.netns, "link", "set", IFACE, "up")
        _sh("ip", "-n", node.netns, "link", "set", "lo", "up")
        node.uts.touch()
        _sh("unshare", f"--uts={node.uts}", "hostname", node.name)

    def _write_agent(self) -> None:
        cases = "\n".join(f"  {n.name}) exec {shlex.join(self.command(n.name, ['/bin/sh', '-c']))} \"$*\" ;;"
                          for n in self.nodes)
        self.agent.write_text(f"""#!/bin/sh
# Open MPI's plm_ssh_agent for the emulated cluster {self.name}: "agent NODE COMMAND..." runs the command
# on NODE (inside its network and UTS namespaces), as "ssh NODE COMMAND..." would on a real cluster.
node=$1; shift
case "$node" in
{cases}
  *) echo "emulated cluster {self.name}: no node $node" >&2; exit 255 ;;
esac
""")
        self.agent.chmod(0o755)

    def down(self) -> None:
        """End every process inside the nodes, delete the namespaces and the state (idempotent)."""
        spaces = [n.netns for n in self.nodes] + [self.switch]
        _end_processes(spaces)
        for netns in spaces:
            _sh("ip", "netns", "delete", netns, check=False)
        for node in self.nodes:
            if node.uts.exists():
                _sh("umount", "-l", str(node.uts), check=False)
        shutil.rmtree(self.state, ignore_errors=True)

    # -- running things on nodes --------------------------------------------------------------
    def command(self, node: str, argv: list[str] | tuple = ()) -> list[str]:
        """``argv`` run on ``node``: in its network and UTS namespaces, with an /etc/hosts that names every node
        (bound over the machine's in a mount namespace of the command's own); the same files otherwise."""
        n = self.node(node)
        # sysfs shows the network namespace of whoever mounted it: the node's own view of /sys/class/net (its
        # emu0 and lo, as on a real node) comes from a sysfs mounted inside the node, bound over the machine's
        net = (f"mount -t sysfs sysfs {self.sysfs} && mount --bind {self.sysfs}/class/net /sys/class/net && "
               f"mount --bind {self.sysfs}/devices/virtual/net /sys/devices/virtual/net")
        return ["nsenter", f"--net=/run/netns/{n.netns}", f"--uts={n.uts}", "--",
                "unshare", "--mount", "--propagation", "slave", "--",
                "/bin/sh", "-c", f'mount --bind {self.hosts_file} /etc/hosts && {net} && exec "$@"', "sh", *argv]

    def mpi_env(self) -> dict[str, str]:
        """Open MPI settings for the ranks: TCP on the cluster subnet between nodes, shared memory inside one.

        The nodes share this machine's cores, so a rank waiting for a message yields its core (a node's
        own hardware count would tell Open MPI it has a core to itself)."""
        return {"OMPI_MCA_btl": "self,sm,tcp", "OMPI_MCA_btl_tcp_if_include": SUBNET,
                "OMPI_MCA_pml": "ob1", "OMPI_MCA_mtl": "^ofi", "OMPI_MCA_mpi_yield_when_idle": "1"}

    def mpiexec_command(self, nranks: int, per_node: int, hosts: list[str] | None = None,
                        map_by: str = "slot") -> tuple[list[str], dict[str, str]]:
        """Open MPI's mpiexec on node0 starting ``nranks`` ranks over ``hosts`` (default: every node),
        ``per_node`` slots each, placed ``map_by`` slot (fill a node first) or node (round robin);
        and the environment it needs. Append the program and its arguments."""
        from microbench.cluster import launch
        from microbench.cluster.mpi_runtime import import_mpi, library

        lib = library(import_mpi(initialize=False))
        if lib.abi != "openmpi":
            raise RuntimeError(f"the emulated cluster launches with Open MPI's prterun, not {lib.abi}")
        hosts = hosts or self.hosts
        base, env = launch.mpiexec_command(lib.prefix, lib.abi, nranks)
        args = [*base, "--host", ",".join(f"{h}:{per_node}" for h in hosts), "--map-by", map_by,
                "--prtemca", "plm", "ssh", "--prtemca", "plm_ssh_agent", str(self.agent),
                "--prtemca", "oob_tcp_if_include", SUBNET]
        env.pop("PRTE_MCA_rmaps_default_mapping_policy", None)  # slots come from --host
        return self.command(hosts[0], args), {**env, **self.mpi_env()}

    def microbench_command(self, args: list[str], per_node: int = 1, hosts: list[str] | None = None,
                           map_by: str = "slot") -> tuple[list[str], dict[str, str]]:
        """``microbench ARGS`` on ``per_node`` ranks of each of ``hosts`` (default every node), this Python's."""
        hosts = hosts or self.hosts
        cmd, env = self.mpiexec_command(per_node * len(hosts), per_node, hosts, map_by)
        return [*cmd, sys.executable, "-m", "microbench", *args], env

    # -- a slow node --------------------------------------------------------------------------
    def throttle(self, node: str, mbit: float, burst_kib: int = 64) -> None:
        """Cap ``node``'s traffic at ``mbit`` Mbit/s each way: tbf on its interface and on its switch port."""
        n = self.node(node)
        tbf = ["root", "tbf", "rate", f"{mbit}mbit", "burst", f"{burst_kib}kb", "latency", "100ms"]
        _sh("ip", "netns", "exec", n.netns, "tc", "qdisc", "replace", "dev", IFACE, *tbf)
        _sh("ip", "netns", "exec", self.switch, "tc", "qdisc", "replace", "dev", n.port, *tbf)

    def unthrottle(self, node: str) -> None:
        n = self.node(node)
        _sh("ip", "netns", "exec", n.netns, "tc", "qdisc", "del", "dev", IFACE, "root", check=False)
        _sh("ip", "netns", "exec", self.switch, "tc", "qdisc", "del", "dev", n.port, "root", check=False)

    @contextlib.contextmanager
    def throttled(self, node: str, mbit: float):
        self.throttle(node, mbit)
        try:
            yield self.node(node)
        finally:
            self.unthrottle(node)

    def qdisc(self, node: str) -> str:
        """``tc qdisc show`` of the node's interface (what shapes its traffic now)."""
        n = self.node(node)
        return _sh("ip", "netns", "exec", n.netns, "tc", "qdisc", "show", "dev", IFACE).stdout


def _end_processes(spaces: list[str]) -> None:
    """SIGTERM every process inside these network namespaces, then SIGKILL what is left after 5 s."""
    def pids() -> list[int]:
        found = []
        for netns in spaces:
            out = _sh("ip", "netns", "pids", netns, check=False).stdout
            found += [int(p) for p in out.split() if p.isdigit()]
        return found

    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while pids() and time.monotonic() < end:
            time.sleep(0.1)


def reap_leftovers() -> list[str]:
    """Remove clusters whose owner process has gone (a crashed session), and stray namespaces; their names."""
    reaped = []
    for state in sorted(STATE_ROOT.glob("*")) if STATE_ROOT.exists() else ():
        cluster = EmulatedCluster.remains(state.name)
        if cluster.owner == "gone" and time.time() - state.stat().st_mtime < 60:
            continue  # another session between making its folder and writing its state
        if not _owner_alive(cluster.owner):
            cluster.down()
            reaped.append(state.name)
    listed = _sh("ip", "netns", "list", check=False).stdout.split()
    for netns in [s for s in listed if s.startswith(NETNS_PREFIX)]:
        name = netns[len(NETNS_PREFIX):].rsplit("-", 1)[0]
        if not (STATE_ROOT / name).exists():  # a crash in the middle of down()
            _end_processes([netns])
            _sh("ip", "netns", "delete", netns, check=False)
            reaped.append(netns)
    return reaped


if __name__ == "__main__":
    from emulated_cluster_cli import main

    sys.exit(main())

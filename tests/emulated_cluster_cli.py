"""By hand: ``python tests/emulated_cluster.py up|status|exec|mpirun|srun|throttle|unthrottle|down``.

See docs/emulated-cluster.md. Run with the Python of the environment that has microbench installed (the
nodes run the same files); root is needed for namespaces.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from emulated_cluster import STATE_ROOT, EmulatedCluster, missing, reap_leftovers


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python tests/emulated_cluster.py",
                                description="An emulated cluster of network namespaces for multi-node tests.")
    p.add_argument("--name", default="lab", help="cluster name (letters and digits; default lab)")
    sub = p.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="make the nodes (replacing a cluster of the same name)")
    up.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    up.add_argument("--slurm", action="store_true", help="also start slurmctld on node0 and a slurmd per node")
    sub.add_parser("status", help="nodes, addresses, traffic shaping, processes")
    sub.add_parser("down", help="end everything running in the nodes and remove them")
    ex = sub.add_parser("exec", help="run a command on one node")
    ex.add_argument("node")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="the command (default: a shell)")
    mp = sub.add_parser("mpirun", help="start ranks on the nodes with Open MPI's mpiexec from node0")
    mp.add_argument("--per-node", type=int, default=1, help="ranks per node (default 1)")
    mp.add_argument("--nodes", type=int, help="use the first N nodes (default all)")
    mp.add_argument("--map-by", default="slot", choices=["slot", "node"], help="fill nodes first, or round robin")
    mp.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the program; microbench means this Python's")
    sr = sub.add_parser("srun", help="srun on node0 (needs up --slurm)")
    sr.add_argument("argv", nargs=argparse.REMAINDER)
    th = sub.add_parser("throttle", help="cap one node's links with tc tbf")
    th.add_argument("node")
    th.add_argument("--mbit", type=float, default=100.0, help="rate each way in Mbit/s (default 100)")
    un = sub.add_parser("unthrottle", help="remove a node's cap")
    un.add_argument("node")
    return p


def _program(argv: list[str]) -> list[str]:
    """The command after ``--``; its first ``microbench`` word becomes this Python's ``-m microbench``."""
    argv = argv[1:] if argv[:1] == ["--"] else argv
    if not argv:
        raise SystemExit("give the program to run after --")
    if "microbench" in argv:
        at = argv.index("microbench")
        return [*argv[:at], sys.executable, "-m", "microbench", *argv[at + 1:]]
    return argv


def _slurm(cluster: EmulatedCluster):
    from slurm_cluster import SlurmCluster

    return SlurmCluster(cluster.state / "slurm", [(n.name, n.address) for n in cluster.nodes], cluster.command)


def _status(cluster: EmulatedCluster) -> None:
    print(f"emulated cluster {cluster.name}: {len(cluster.nodes)} nodes (state {cluster.state})")
    for n in cluster.nodes:
        shaping = cluster.qdisc(n.name).split("\n")[0]
        pids = subprocess.run(["ip", "netns", "pids", n.netns], capture_output=True, text=True).stdout.split()
        print(f"  {n.name}  {n.address}  netns {n.netns}  {len(pids)} process(es)  qdisc: {shaping}")
    if (cluster.state / "slurm" / "slurm.conf").exists():
        print(f"  Slurm: SLURM_CONF={cluster.state / 'slurm' / 'slurm.conf'} (clients on node0)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    why = missing()
    if why:
        print(f"emulated_cluster: {why}", file=sys.stderr)
        return 2
    if args.verb == "up":
        reaped = reap_leftovers()
        if reaped:
            print(f"removed leftovers of crashed sessions: {', '.join(reaped)}")
        cluster = EmulatedCluster(args.nodes, args.name, owner="manual").up()
        if args.slurm:
            _slurm(cluster).start()
        _status(cluster)
        named = "" if args.name == "lab" else f" --name {args.name}"  # the hint works for this cluster
        print(f"try: python tests/emulated_cluster.py{named} mpirun --per-node 1 -- microbench run pairs -m 8,64K")
        return 0
    if args.verb == "down":
        if (STATE_ROOT / args.name).exists():
            EmulatedCluster.remains(args.name).down()
        return 0
    try:
        cluster = EmulatedCluster.load(args.name)
    except FileNotFoundError as exc:
        print(f"emulated_cluster: {exc}", file=sys.stderr)
        return 2
    if args.verb == "status":
        _status(cluster)
        return 0
    if args.verb == "exec":
        cmd = cluster.command(args.node, (args.argv[1:] if args.argv[:1] == ["--"] else args.argv)
                              or [os.environ.get("SHELL", "/bin/sh")])
        return subprocess.call(cmd)
    if args.verb == "throttle":
        cluster.throttle(args.node, args.mbit)
        print(cluster.qdisc(args.node), end="")
        return 0
    if args.verb == "unthrottle":
        cluster.unthrottle(args.node)
        return 0
    if args.verb == "srun":
        slurm = _slurm(cluster)
        return subprocess.call(slurm.client(["srun", *_program(args.argv)]),
                               env={**cluster.mpi_env(), **os.environ, **slurm.env})
    hosts = cluster.hosts[:args.nodes] if args.nodes else cluster.hosts
    cmd, env = cluster.mpiexec_command(args.per_node * len(hosts), args.per_node, hosts, args.map_by)
    print("+", shlex.join(cmd + _program(args.argv)), file=sys.stderr)
    return subprocess.call(cmd + _program(args.argv), env={**env, **os.environ})  # your settings win

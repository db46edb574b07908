#!/usr/bin/env python3
"""What ``microbench doctor`` costs at 16 to 16,384 nodes: measured parts here, then a model (docs/doctor.md).

Part 1, measured on this machine:

- the coordinator's time per message (one line decoded by the plane's decoder and handled), for the messages each
  rank sends: its hello, a step, and the reports of layers 2 (software) and 5 (placement), at their real size
  (this rank's own facts);
- the judges of layers 2, 4 and 5 on synthetic reports of ``--judge-nodes`` nodes (``--ppn`` ranks each), per rank;
- one 8-byte and one 1 MiB exchange through ``doctor.pairs.exchange`` between 2 local ranks (shared memory): the
  harness around a pair's message in layers 3 and 7, median of ``--exchanges``;
- how fast layer 4's stand-in for the rendezvous accepts connections when ``--connects`` arrive at once.

Part 2, the model at N nodes of ``--ppn`` ranks (R = N x ppn), with a network of ``--alpha-us`` per message and
``--link-gbps`` per node: layer 3 is the ring and N - 1 rounds (N odd: N) of one 8-byte exchange each, a round
costing the measured 8-byte exchange plus alpha; layer 7 the same rounds of a warm-up and up to 5 timed 1 MiB
exchanges, each the measured harness plus alpha plus 1 MiB over the link (and with one node's link ``SLOWER`` times
slower: it is in every round, so the layer lasts as many of its pairs, each cut short by ``PAIR_BUDGET_S``, plus
its recheck); layer 4's probes arrive at once at
rank 0 and are accepted at the measured rate; the coordinator, one thread, spends the per-message times on every
rank's messages (a layer: go, about four steps, done). What the launcher, MPI_Init and torch's init cost at that
scale is theirs, not the doctor's, and not in the table.

    python scripts/doctor_costs.py [--ppn 8] [--alpha-us 2] [--link-gbps 25] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

NODES = (16, 64, 256, 1024, 4096, 16384)
PAIR_BYTES = 1 << 20
EXCHANGES_PER_PAIR = 6  #: layer 7: a warm-up and up to 5 timed exchanges
SLOWER = 100  #: the model's slow node: its link at 1/100 of the others'
NODE_FACTS_BYTES = 1200  #: layer 4's report of a node's first rank (two interfaces, its settings, the probe)
ROW_ENTRY_BYTES = 20  #: one pair's figure in a layer-7 row ("123": 1.234567)


# ------------------------------------------------------------------------------ part 1: measured here
def per_message_us(repeat: int = 2000) -> dict[str, float]:
    """Microseconds the coordinator spends on one message of each kind (decode + handle), median of 5 batches."""
    from microbench.doctor import launch_check, placement, software
    from microbench.doctor.coordinator import Coordinator
    from microbench.doctor.plane import _DECODE, Server, encode
    from microbench.doctor.settings import Settings

    server = Server(host="127.0.0.1")
    try:
        lines = {"hello": encode(launch_check.hello("t" * 16)),
                 "step": encode({"k": "step", "layer": 3, "step": "inside the barrier", "seq": 2, "facts": {}}),
                 "software report": encode({"k": "done", "layer": 2, "data": software.collect()}),
                 "placement report": encode({"k": "done", "layer": 5, "data": placement.collect(0)})}
        out = {}
        for kind, line in lines.items():
            batches = []
            for _ in range(5):
                coordinator = Coordinator(server, "t" * 16, Settings(timeout=30, launch_timeout=120))
                if kind != "hello":
                    for conn in range(repeat):
                        coordinator._handle("msg", conn, {**_DECODE(lines["hello"]), "rank": conn})
                start = time.perf_counter()
                for conn in range(repeat):
                    message = _DECODE(line)
                    if kind == "hello":
                        message["rank"] = conn
                    coordinator._handle("msg", conn, message)
                batches.append((time.perf_counter() - start) / repeat * 1e6)
            out[kind] = statistics.median(batches)
        out["bytes"] = {kind: len(line) for kind, line in lines.items()}
        return out
    finally:
        server.close()


def judge_us_per_rank(nodes: int, ppn: int) -> dict[str, float]:
    """Microseconds per rank of the judges of layers 2, 4 and 5 on synthetic reports (every rank alike but one)."""
    from microbench.doctor import network, placement, software
    from microbench.doctor.job import Job, RankInfo

    ranks = nodes * ppn
    job = Job(expected=ranks)
    for r in range(ranks):
        job.add(RankInfo(r, f"n{r // ppn:05d}", 1000 + r, r, r % ppn, ppn, ranks, "openmpi"))
    base = software.collect()
    soft = {r: dict(base) for r in range(ranks)}
    soft[ranks - 1]["microbench"] = "0.0.9"
    place = {r: {"cpus": f"{r % ppn}", "ncpus": 1, "host_cpus": ppn, "numa": [0], "gpu": None, "visible_gpus": 0,
                 "nearest_nics": ["ib0"], "nics": 1} for r in range(ranks)}
    net = {}
    for r in range(ranks):
        net[r] = {"settings": {"GLOO_SOCKET_IFNAME": "ib0"}}
        if r % ppn == 0:
            address = f"10.{r // 65536 % 256}.{r // 256 % 256}.{r % 256 + 1}"
            net[r].update(interfaces=[{"name": "lo", "up": True, "loopback": True, "ipv4": ["127.0.0.1/8"], "ipv6": []},
                                      {"name": "ib0", "up": True, "loopback": False, "ipv4": [f"{address}/8"],
                                       "ipv6": []}],
                          ib=[], hostname_address=address, hostname_interface="ib0",
                          rendezvous={"result": "ok", "address": "10.0.0.1", "source": address, "seconds": 0.01,
                                      "interface": "ib0"})
    out = {}
    for name, run in (("software", lambda: software.judge(soft, job)),
                      ("network", lambda: network.judge(net, job, ("n00000", 29500), "ib0")),
                      ("placement", lambda: placement.judge(place, job))):
        start = time.perf_counter()
        run()
        out[name] = (time.perf_counter() - start) / ranks * 1e6
    return out


EXCHANGE_CHILD = r"""
import json, statistics, sys, time
import numpy as np
from mpi4py import MPI
from microbench.doctor import pairs
comm, n = MPI.COMM_WORLD, int(sys.argv[1])
other = 1 - comm.Get_rank()
out = {}
for size in (8, 1 << 20):
    send = np.ones(size, dtype=np.uint8)
    recv = [np.zeros(size, dtype=np.uint8)]
    times = []
    for i in range(n + 10):
        missing, seconds = pairs.exchange(comm, [other], size, 5, 10.0, send, recv)
        assert not missing
        if i >= 10:
            times.append(seconds)
    out[size] = statistics.median(times) * 1e6
if comm.Get_rank() == 0:
    print(json.dumps(out))
"""


def exchange_us(exchanges: int) -> dict[int, float]:
    """Median microseconds of one 8-byte and one 1 MiB exchange through doctor.pairs.exchange, 2 local ranks."""
    from microbench.cluster import launch
    from microbench.cluster.mpi_runtime import import_mpi, library

    lib = library(import_mpi(initialize=False))
    cmd, env = launch.mpiexec_command(lib.prefix, lib.abi, 2)
    done = subprocess.run([*cmd, sys.executable, "-c", EXCHANGE_CHILD, str(exchanges)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"the exchange run failed: {done.stderr.strip()[-500:]}")
    return {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def accepts_per_second(connects: int) -> float:
    """Connections layer 4's listener accepts per second when ``connects`` arrive at once (one client thread each
    batch of 64, connecting without waiting for one another)."""
    from microbench.doctor.network import Listener

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = Listener(port)
    socks: list[socket.socket] = []
    lock = threading.Lock()

    def connect(count: int) -> None:
        mine = []
        for _ in range(count):
            c = socket.create_connection(("127.0.0.1", port), timeout=30)
            mine.append(c)
        with lock:
            socks.extend(mine)

    start = time.perf_counter()
    threads = [threading.Thread(target=connect, args=(min(64, connects - k),)) for k in range(0, connects, 64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while len(listener._accepted) < connects and time.perf_counter() - start < 60:
        time.sleep(0.001)
    seconds = time.perf_counter() - start
    accepted = len(listener._accepted)
    for c in socks:
        c.close()
    listener.close()
    return accepted / seconds


# ------------------------------------------------------------------------------ part 2: the model
def model(measured: dict, nodes: int, ppn: int, alpha_us: float, link_gbps: float) -> dict:
    from microbench.doctor import pairs

    ranks = nodes * ppn
    msg, judge, xchg = measured["per_message_us"], measured["judge_us_per_rank"], measured["exchange_us"]
    rounds = 1 + pairs.rounds(nodes)
    layer3 = rounds * (xchg[8] + alpha_us) * 1e-6
    per_exchange = xchg[8] + alpha_us + PAIR_BYTES / (link_gbps * 1e3)  # us: harness, latency, bytes on the link
    layer7 = pairs.rounds(nodes) * EXCHANGES_PER_PAIR * per_exchange * 1e-6
    # one node's link at 1/SLOWER of the rest: it is in every round, and its partners wait for it
    from microbench.doctor.bandwidth import FULL_ROWS, PAIR_BUDGET_S, RECHECK_ITERATIONS, RECHECK_PARTNERS

    slow_exchange = xchg[8] + alpha_us + PAIR_BYTES / (link_gbps / SLOWER * 1e3)
    timed = min(EXCHANGES_PER_PAIR, max(2, 1 + math.ceil(PAIR_BUDGET_S * 1e6 / slow_exchange)))
    layer7_slow = (pairs.rounds(nodes) * timed + RECHECK_PARTNERS * (RECHECK_ITERATIONS + 1)) * slow_exchange * 1e-6
    probe = nodes / measured["accepts_per_s"]
    # the coordinator, one thread: a hello per rank; per layer a go, ~4 steps and a done per rank; the reports
    step, hello = msg["step"], msg["hello"]
    layers_cpu = {1: ranks * hello, 2: ranks * (5 * step + msg["software report"] + judge["software"]),
                  3: ranks * 5 * step, 4: ranks * (5 * step + judge["network"]),
                  5: ranks * (5 * step + msg["placement report"] + judge["placement"]), 6: ranks * 5 * step,
                  7: ranks * 5 * step}
    size = measured["per_message_us"]["bytes"]
    inbound = ranks * (size["hello"] + size["software report"] + size["placement report"] + 6 * 5 * size["step"])
    inbound += nodes * (NODE_FACTS_BYTES + (min(nodes, FULL_ROWS) * ROW_ENTRY_BYTES if nodes <= FULL_ROWS else 120))
    cpu = sum(layers_cpu.values()) * 1e-6
    return {"nodes": nodes, "ranks": ranks, "rounds": rounds, "layer3_s": layer3, "layer7_s": layer7,
            "layer7_one_slow_node_s": layer7_slow,
            "probe_s": probe, "coordinator_cpu_s": cpu, "coordinator_in_bytes": inbound,
            "total_s": layer3 + layer7 + probe + cpu}


def human(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ppn", type=int, default=8, help="ranks per node (default 8)")
    p.add_argument("--alpha-us", type=float, default=2.0, help="network latency per message (default 2 us)")
    p.add_argument("--link-gbps", type=float, default=25.0, help="each node's link in GB/s (default 25)")
    p.add_argument("--judge-nodes", type=int, default=1024, help="nodes of the synthetic reports (default 1024)")
    p.add_argument("--exchanges", type=int, default=200, help="exchanges timed per size (default 200)")
    p.add_argument("--connects", type=int, default=1024, help="connections at once to the listener (default 1024)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args()
    measured = {"per_message_us": per_message_us(), "judge_us_per_rank": judge_us_per_rank(args.judge_nodes, args.ppn),
                "exchange_us": exchange_us(args.exchanges), "accepts_per_s": accepts_per_second(args.connects),
                "load_average": os.getloadavg()}
    m = measured["per_message_us"]
    print(f"measured here (load average {measured['load_average'][0]:.1f}):")
    print("  coordinator per message: " + ", ".join(f"{k} {m[k]:.1f} us ({m['bytes'][k]} B)"
                                                     for k in ("hello", "step", "software report", "placement report")))
    print("  judges per rank: " + ", ".join(f"{k} {v:.2f} us" for k, v in measured["judge_us_per_rank"].items()))
    x = measured["exchange_us"]
    print(f"  one exchange through pairs.exchange (2 local ranks): 8 B {x[8]:.1f} us, 1 MiB {x[PAIR_BYTES]:.0f} us")
    print(f"  layer 4's listener: {measured['accepts_per_s']:.0f} connections accepted per second "
          f"({args.connects} at once)")
    rows = [model(measured, n, args.ppn, args.alpha_us, args.link_gbps) for n in NODES]
    print(f"\nthe model ({args.ppn} ranks a node, {args.alpha_us:g} us a message, {args.link_gbps:g} GB/s a node):")
    print("| nodes | ranks | rounds | layer 3 rounds | layer 7 rounds | layer 7, one node 100x slower | "
          "layer 4 probes | coordinator CPU | into the coordinator | the doctor's own time |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['nodes']} | {r['ranks']} | {r['rounds']} | {human(r['layer3_s'])} | {human(r['layer7_s'])} | "
              f"{human(r['layer7_one_slow_node_s'])} | {human(r['probe_s'])} | {human(r['coordinator_cpu_s'])} | "
              f"{human_bytes(r['coordinator_in_bytes'])} | {human(r['total_s'])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"measured": measured, "model": rows, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

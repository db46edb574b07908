"""A rank of the doctor: reach the coordinator, check in (layer 1), then run each layer it is told to.

Launched directly (no parent gave ``--coordinator``), rank 0 first forks the coordinator (before any thread or MPI
exists in it) and publishes its address (``rendezvous.py``). Every rank then talks only to the coordinator until
MPI is up, and through MPI only in layers 3 and 7; ``stop`` with a failing status ends the rank from the link's
reader thread wherever its main thread is (inside MPI_Init, a barrier, torch's rendezvous).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
import time

from microbench.cluster import launch
from microbench.doctor import (bandwidth, launch_check, mpi_check, network, placement, plane, rendezvous,
                               software, torch_check)
from microbench.errors import UsageError
from microbench.measure import testhooks


class Agent:
    """This rank's side: its link, what the layers leave for later ones (the communicator, the listener)."""

    def __init__(self, args, info: launch.LaunchInfo, link: plane.Client, child: int | None):
        self.args, self.info, self.link, self.child = args, info, link, child
        self.rank, self.size = info.rank, info.size
        self.layer = 1
        self.seq = 0  #: steps of the current layer (a heartbeat does not count: it says where, not how far)
        self.state: dict = {}
        self.stall = testhooks.doctor_stall()
        skip = set(getattr(args, "_skip", set()))
        self.importer = (torch_check.Importer() if "torch" not in skip and importlib.util.find_spec("torch")
                         else None)

    def step(self, text: str, heartbeat: bool = False, **facts) -> None:
        """Tell the coordinator where this rank is inside the layer (``facts``: what it found on the way)."""
        if not heartbeat:
            self.seq += 1
        self.link.send({"k": "step", "layer": self.layer, "step": text, "seq": self.seq, "facts": facts})

    def hook(self, point: str) -> None:
        """The test hook: this rank stalls at ``point`` (MICROBENCH_TEST_DOCTOR_STALL, with MICROBENCH_TESTING=1)."""
        if self.stall and self.stall == (self.rank, point):
            time.sleep(testhooks.STALL_SECONDS)

    def serve(self) -> int:
        while True:
            message = self.link.receive()
            self._close_listener()
            if message["k"] == "stop":
                return self._leave(int(message.get("status", 0)))
            self.layer, self.seq = int(message["layer"]), 0
            ctx = {**message.get("ctx", {}), **message.get("own", {})}
            if ctx.get("world"):
                self.size = int(ctx["world"])
            try:
                data = self._collect(self.layer, ctx)
            except Exception as exc:  # noqa: BLE001 - reported to the coordinator as this rank's finding
                data = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
            self.link.send({"k": "done", "layer": self.layer, "data": data})

    def _collect(self, layer: int, ctx: dict) -> dict:
        names = {2: "software", 3: "mpi", 4: "network", 5: "placement", 6: "torch", 7: "bandwidth"}
        if names.get(layer) != "mpi":
            self.hook(names.get(layer, ""))
        if layer == 2:
            return software.collect()
        if layer == 3:
            return mpi_check.collect(ctx, self.rank, self.size, self.step, self.hook, self.state)
        if layer == 4:
            return self._network(ctx)
        if layer == 5:
            return placement.collect(self.info.local_rank)
        if layer == 6:
            self.state["torch"] = True
            return torch_check.collect(ctx, self.rank, self.size, self.info.local_rank, self.importer,
                                       self.info.launcher == "torchrun", self.step)
        if layer == 7:
            return bandwidth.collect(ctx, self.state.get("comm"), self.step)
        raise RuntimeError(f"no layer {layer}")

    def _network(self, ctx: dict) -> dict:
        out: dict = {}
        if ctx.get("listen"):
            try:
                self.state["listener"] = network.Listener(int(ctx["listen"]))
            except OSError as exc:
                out["listen_error"] = (f"cannot listen on the rendezvous port {ctx['listen']} on "
                                       f"{socket.gethostname()}: {exc.strerror or exc} (another job's rendezvous?)")
            self.step("listening")
        out.update(network.collect(ctx))
        return out

    def _close_listener(self) -> None:
        listener = self.state.pop("listener", None)
        if listener is not None:
            listener.close()

    def _leave(self, status: int) -> int:
        if self.state.get("torch"):
            torch_check.leave()
        if self.child:  # the forked coordinator prints the verdict: let it finish before this rank ends
            with contextlib.suppress(ChildProcessError, OSError):
                end = time.monotonic() + 10
                while time.monotonic() < end and os.waitpid(self.child, os.WNOHANG) == (0, 0):
                    time.sleep(0.05)
        return status


def run(args) -> int:
    """The doctor on this rank; returns its exit status (the coordinator's verdict)."""
    info = launch.discover()
    where = f"rank {info.rank} on {socket.gethostname()}"
    if testhooks.doctor_stall() == (info.rank, "launch"):  # the test hook: a rank that never checks in
        time.sleep(testhooks.STALL_SECONDS)
    sock, token, child = _reach(args, info, where)
    link = plane.Client(sock, where)
    link.send(launch_check.hello(token))
    agent = Agent(args, info, link, child)
    return agent.serve()


def _reach(args, info: launch.LaunchInfo, where: str) -> tuple[socket.socket, str, int | None]:
    """A connection to the coordinator (forking it first on rank 0 when there is no parent), the job's token and
    the coordinator's pid when this rank forked it."""
    deadline = time.monotonic() + args.launch_timeout
    if args.token:  # a parent is the coordinator
        hosts, port = rendezvous.parse_coordinator(args.coordinator)
        return _connect(hosts, port, deadline, where, f"the doctor at {args.coordinator}"), args.token, None
    key = rendezvous.job_key()
    if key is None and not args.coordinator:
        raise UsageError("microbench doctor under this launcher cannot name the launch for its ranks to meet: run "
                         "it as microbench doctor -- LAUNCHER ARGS..., or set MICROBENCH_DOCTOR_JOB to a word "
                         "unique to this launch, or give --coordinator HOST:PORT")
    token = rendezvous.token_of(key or f"coordinator={args.coordinator}")
    if info.rank == 0:
        return _fork_coordinator(args, token, where)
    if args.coordinator:
        hosts, port = rendezvous.parse_coordinator(args.coordinator)
        return _connect(hosts, port, deadline, where, f"rank 0's doctor at {','.join(hosts)}:{port}"), token, None
    while True:  # an address that does not answer may be an earlier launch's: read the file again
        found = rendezvous.wait_published(args.rendezvous, token, deadline)
        if found is None:
            _give_up(where, info, f"rank 0 published no doctor address in {args.rendezvous} that answered within "
                                  f"{args.launch_timeout:g} s (rank 0 did not start, or that folder is not shared "
                                  f"between the nodes: --rendezvous, or --coordinator HOST:PORT)")
        hosts, port = found
        sock = rendezvous.connect_any(hosts, port, timeout=min(3.0, max(deadline - time.monotonic(), 0.1)))
        if sock is not None:
            return sock, token, None
        time.sleep(0.3)


def _fork_coordinator(args, token: str, where: str) -> tuple[socket.socket, str, int]:
    """Rank 0 without a parent: the coordinator in a child process of its own (it must outlive this rank's MPI,
    which may hang holding everything), its address published, then this rank connects to it like any other."""
    from microbench.doctor import coordinator

    port = rendezvous.parse_coordinator(args.coordinator)[1] if args.coordinator else 0
    listening = plane.listening_socket(port=port)
    port = listening.getsockname()[1]
    if not args.coordinator:
        rendezvous.publish(args.rendezvous, token, rendezvous.local_addresses(), port)
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        status = 1
        try:
            status = coordinator.serve_in_child(args, listening, token)
        finally:
            if not args.coordinator:
                rendezvous.withdraw(args.rendezvous, token)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(status)
    listening.close()
    deadline = time.monotonic() + args.launch_timeout
    return _connect(["127.0.0.1"], port, deadline, where, "the doctor this rank started"), token, child


def _connect(hosts: list[str], port: int, deadline: float, where: str, what: str) -> socket.socket:
    while True:
        sock = rendezvous.connect_any(hosts, port, timeout=min(3.0, max(deadline - time.monotonic(), 0.1)))
        if sock is not None:
            return sock
        if time.monotonic() >= deadline:
            _give_up(where, launch.discover(), f"cannot reach {what} (refused or no answer until the launch "
                                               f"timeout): a firewall between this node and it, or it has ended")
        time.sleep(0.3)


def _give_up(where: str, info: launch.LaunchInfo, why: str) -> None:
    """One line from each node's first rank (the others end quietly), and this rank ends."""
    if not info.local_rank:
        with contextlib.suppress(OSError):
            os.write(2, f"microbench: {where}: doctor: {why}\n".encode())
    os._exit(1)

"""The emulated cluster itself: hostnames, addresses only inside it, TCP between nodes, the throttle, and
teardown after a failing session or a killed one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import emulated_cluster as emu
import pytest
import slurm_cluster

from conftest import REPO, run_process

pytestmark = pytest.mark.skipif(emu.missing() is not None, reason=emu.missing() or "")
TESTS = REPO / "tests"


def _namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_each_node_has_its_hostname_and_address(emulated_cluster):
    own_uts = os.readlink("/proc/self/ns/uts")
    for node in emulated_cluster.nodes:
        out = run_process(emulated_cluster.command(node.name, ["sh", "-c", "hostname; ip -4 -o addr show emu0; "
                                                                          "readlink /proc/self/ns/uts"]),
                          timeout=30).stdout.split("\n")
        assert out[0] == node.name
        assert f"inet {node.address}/24" in out[1]
        assert out[2] != own_uts  # its own UTS namespace: the machine's hostname is untouched


def test_the_cluster_subnet_exists_only_inside_its_namespaces(emulated_cluster):
    here = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    assert "10.77.0." not in here
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" {emu.IFACE}" not in links and "br0" not in links
    switch = subprocess.run(["ip", "-n", emulated_cluster.switch, "-4", "-o", "addr"], capture_output=True,
                            text=True).stdout
    assert "10.77.0." not in switch  # the bridge forwards; it has no address to be reached at


def test_nodes_talk_tcp_to_each_other(emulated_cluster):
    server = subprocess.Popen(emulated_cluster.command("node1", [sys.executable, "-c", textwrap.dedent("""
        import socket
        s = socket.create_server(("10.77.0.2", 7000))
        print("listening", flush=True)
        conn, peer = s.accept()
        conn.sendall(f"{socket.gethostname()} saw {peer[0]}: ".encode() + conn.recv(100))
        """)]), stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        client = run_process(emulated_cluster.command("node0", [sys.executable, "-c", textwrap.dedent("""
            import socket
            c = socket.create_connection(("10.77.0.2", 7000), timeout=10)
            c.sendall(socket.gethostname().encode())
            print(c.recv(100).decode())
            """)]), timeout=30)
        assert client.stdout.strip() == "node1 saw 10.77.0.1: node0"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_throttle_shapes_both_ends_of_the_nodes_link_and_goes_away(emulated_cluster):
    with emulated_cluster.throttled("node3", 40):
        assert "tbf" in emulated_cluster.qdisc("node3") and "rate 40Mbit" in emulated_cluster.qdisc("node3")
        switch_side = subprocess.run(["ip", "netns", "exec", emulated_cluster.switch, "tc", "qdisc", "show",
                                      "dev", "p3"], capture_output=True, text=True).stdout
        assert "rate 40Mbit" in switch_side
        assert "tbf" not in emulated_cluster.qdisc("node2")
    assert "tbf" not in emulated_cluster.qdisc("node3")


def test_a_failing_session_still_tears_its_cluster_down(tmp_path):
    (tmp_path / "test_fails.py").write_text(textwrap.dedent("""
        import os, subprocess

        def test_fails_with_a_process_on_a_node(emulated_cluster):
            p = subprocess.Popen(emulated_cluster.command("node1", ["sleep", "600"]), start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print("SESSION", os.getpid(), "PID", p.pid, flush=True)
            assert False, "on purpose"
        """))
    proc = run_process([sys.executable, "-m", "pytest", "-q", "-s", "-p", "conftest", "-p", "no:cacheprovider",
                        str(tmp_path / "test_fails.py")], cwd=tmp_path, env={"PYTHONPATH": str(TESTS)}, timeout=120)
    assert proc.returncode == 1 and "on purpose" in proc.stdout, proc.output
    session, sleeper = (int(w) for w in proc.stdout.split("SESSION ", 1)[1].split()[0:3:2])
    assert not _alive(sleeper)
    assert not [n for n in _namespaces() if n.startswith(f"{emu.NETNS_PREFIX}t{session}-")]
    assert not (emu.STATE_ROOT / f"t{session}").exists()


def test_leftovers_of_a_killed_session_are_removed_by_the_next(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, subprocess, sys, time
        import emulated_cluster as emu
        c = emu.EmulatedCluster(2, f"crash{os.getpid()}").up()
        p = subprocess.Popen(c.command("node0", ["sleep", "600"]), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(c.name, p.pid, flush=True)
        time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(TESTS)})
    try:
        name, sleeper = owner.stdout.readline().split()
    finally:
        owner.kill()  # SIGKILL: no teardown runs
        owner.wait()
    assert f"{emu.NETNS_PREFIX}{name}-node0" in _namespaces() and _alive(int(sleeper))
    assert name in emu.reap_leftovers()
    assert not [n for n in _namespaces() if n.startswith(f"{emu.NETNS_PREFIX}{name}-")]
    deadline = time.monotonic() + 10
    while _alive(int(sleeper)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(sleeper))


def test_a_live_session_is_never_reaped(emulated_cluster):
    emu.reap_leftovers()
    assert (emu.STATE_ROOT / emulated_cluster.name).exists()
    assert all(n.netns in _namespaces() for n in emulated_cluster.nodes)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) is not installed")
def test_says_why_it_cannot_run_without_root_or_ip():
    probe = [sys.executable, "-c", "import emulated_cluster as e; print(e.missing())"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    no_ip = run_process(probe, env={**env, "PATH": os.path.dirname(sys.executable)}, timeout=30)
    assert no_ip.stdout.strip().startswith("emulated cluster: ip, tc") and "apt-get install iproute2" in no_ip.stdout
    nobody = run_process(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *probe], env=env, timeout=30)
    assert nobody.stdout.strip() == "emulated cluster: network namespaces need root", nobody.output


def _by_hand(name: str) -> list[str]:
    return [sys.executable, str(TESTS / "emulated_cluster.py"), "--name", name]


def _down_leaves_nothing(name: str) -> None:
    down = run_process([*_by_hand(name), "down"], timeout=60)
    assert down.returncode == 0 and not [n for n in _namespaces() if n.startswith(f"{emu.NETNS_PREFIX}{name}-")]


def test_the_by_hand_commands_of_the_docs(tmp_path):
    """docs/emulated-cluster.md: up, exec, mpirun, throttle, status, down (Slurm's part: the next test)."""
    name = f"doc{os.getpid()}"
    cli = _by_hand(name)
    try:
        up = run_process([*cli, "up", "--nodes", "2"], timeout=90)
        assert up.returncode == 0 and "node1  10.77.0.2" in up.stdout, up.output
        assert run_process([*cli, "exec", "node1", "--", "hostname"], timeout=30).stdout == "node1\n"
        out = tmp_path / "lat.jsonl"
        mpirun = run_process([*cli, "mpirun", "--", "microbench", "run", "latency", "-m", "8", "-i", "5",
                              "--out", str(out)], timeout=120)
        assert mpirun.returncode == 0 and "# 2 ranks on 2 host(s): node0 (1), node1 (1)" in mpirun.stdout, mpirun.output
        assert "rate 100Mbit" in run_process([*cli, "throttle", "node1"], timeout=30).stdout
        assert "tbf" in run_process([*cli, "status"], timeout=30).stdout
    finally:
        _down_leaves_nothing(name)


@pytest.mark.skipif(slurm_cluster.missing() is not None, reason=slurm_cluster.missing() or "")
def test_the_by_hand_slurm_commands_of_the_docs():
    """docs/emulated-cluster.md: up --slurm, srun across the nodes, status naming SLURM_CONF, down."""
    name = f"dsl{os.getpid()}"
    cli = _by_hand(name)
    try:
        up = run_process([*cli, "up", "--nodes", "2", "--slurm"], timeout=90)
        assert up.returncode == 0 and "node1  10.77.0.2" in up.stdout, up.output
        srun = run_process([*cli, "srun", "--", "-N", "2", "hostname"], timeout=60)
        assert srun.returncode == 0 and sorted(srun.stdout.split()) == ["node0", "node1"], srun.output
        assert "Slurm: SLURM_CONF=" in run_process([*cli, "status"], timeout=30).stdout
    finally:
        _down_leaves_nothing(name)

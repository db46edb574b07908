"""Where a rank finds the doctor's coordinator, before MPI or torch exists.

- With a parent (``microbench doctor --np N`` or ``microbench doctor -- LAUNCHER ...``) the parent is the
  coordinator and puts its addresses and a token on every rank's command line (``--coordinator``, ``--token``):
  command lines reach every rank under every launcher, environment variables do not (Open MPI forwards few).
- Launched directly (``mpirun ... microbench doctor``), rank 0 forks a coordinator and publishes its addresses in
  a file named after the job (``--rendezvous DIR``, a folder every node sees: home or scratch); the other ranks
  wait for that file. ``--coordinator HOST:PORT`` instead makes rank 0's coordinator listen on PORT, for
  clusters without a shared folder.

The job's name comes from the launcher: PMIx's namespace (Open MPI 5, srun --mpi=pmix), Slurm's job and step,
torchrun's run id with its store's address (the run id is "none" unless ``--rdzv-id`` is given), or
``MICROBENCH_DOCTOR_JOB`` set by hand; every rank of one launch reads the same value and no two launches running at
once share it. A file left by an earlier launch of the same name (a doctor killed outright) is read again until
rank 0 has replaced it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import socket
import time
from pathlib import Path

from microbench.errors import UsageError

JOB_VARS = ("MICROBENCH_DOCTOR_JOB", "PMIX_NAMESPACE", "TORCHELASTIC_RUN_ID")
DEFAULT_DIR = "~/.microbench/doctor"


def job_key(env: dict | None = None) -> str | None:
    """A name for this launch every rank agrees on without talking (None when the launcher gives none)."""
    env = os.environ if env is None else env
    for var in JOB_VARS:
        if env.get(var):
            if var == "TORCHELASTIC_RUN_ID":  # "none" unless --rdzv-id is given: its store's address tells launches apart
                return f"{var}={env[var]}@{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
            return f"{var}={env[var]}"
    if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID") is not None:
        return f"slurm={env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    return None


def token_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def address_file(folder: str, token: str) -> Path:
    return Path(os.path.expanduser(folder)) / f"coordinator-{token}.json"


def publish(folder: str, token: str, addresses: list[str], port: int) -> Path:
    """Rank 0's coordinator: its addresses, written whole (a temporary file renamed onto the name)."""
    path = address_file(folder, token)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"addresses": addresses, "port": port, "token": token, "pid": os.getpid()}))
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"--rendezvous {folder}: cannot publish the doctor's address there "
                         f"({exc.strerror or exc})") from exc
    return path


def wait_published(folder: str, token: str, deadline: float) -> tuple[list[str], int] | None:
    """The addresses rank 0 published for this job, waiting for them until ``deadline`` (monotonic)."""
    path = address_file(folder, token)
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found = json.loads(path.read_text())
            if found["token"] == token:
                return [str(a) for a in found["addresses"]], int(found["port"])
        time.sleep(0.2)
    return None


def withdraw(folder: str, token: str) -> None:
    with contextlib.suppress(OSError):
        address_file(folder, token).unlink()


def parse_coordinator(text: str) -> tuple[list[str], int]:
    """``HOST[,HOST...]:PORT`` -> (hosts, port)."""
    hosts, sep, port = text.rpartition(":")
    if not sep or not hosts or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--coordinator {text!r}: expected HOST[,HOST...]:PORT")
    return [h for h in hosts.split(",") if h], int(port)


def local_addresses() -> list[str]:
    """This host's name and its IPv4 addresses that are not loopback (what a rank elsewhere may reach)."""
    from microbench.doctor.network import interfaces

    found = [socket.gethostname()]
    for iface in interfaces():
        found += [a for a in iface["ipv4"] if not a.startswith("127.")]
    return list(dict.fromkeys(found))


def connect_any(hosts: list[str], port: int, timeout: float) -> socket.socket | None:
    """A connection to the first of ``hosts`` that answers on ``port`` (all tried at once), or None."""
    selector = selectors.DefaultSelector()
    pending: list[socket.socket] = []
    for host in hosts:
        with contextlib.suppress(OSError):
            for family, kind, proto, _, addr in socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM):
                s = socket.socket(family, kind, proto)
                s.setblocking(False)
                s.connect_ex(addr)
                selector.register(s, selectors.EVENT_WRITE)
                pending.append(s)
    winner = None
    end = time.monotonic() + timeout
    while pending and winner is None and (left := end - time.monotonic()) > 0:
        for key, _ in selector.select(timeout=left):
            s = key.fileobj
            selector.unregister(s)
            pending.remove(s)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 and winner is None:
                winner = s
            else:
                s.close()
    for s in pending:
        s.close()
    selector.close()
    if winner is not None:
        winner.setblocking(True)
    return winner

"""The doctor's own control plane: one JSON object a line over TCP between every rank and one coordinator.

It is apart from MPI and torch.distributed (what the doctor examines), so it works before either starts and
while either hangs. The coordinator's side (``Server``) is one thread on a selector: it accepts the ranks'
connections, reads their lines into a queue of events and writes what ``send`` queues, never blocking on one
slow rank. A rank's side (``Client``) is a blocking socket with a reader thread: ``stop`` from the coordinator
ends the rank at once from that thread (its main thread may be inside MPI or torch), and a coordinator that goes
away ends the rank too, so no rank outlives the doctor.

Messages (``k`` is the kind): rank -> coordinator ``hello`` (layer 1's facts), ``step`` (what the rank is doing
now inside a layer), ``done`` (a layer's facts); coordinator -> rank ``go`` (start a layer, with what it needs)
and ``stop`` (end, with the exit status).
"""

from __future__ import annotations

import contextlib
import os
import queue
import resource
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import msgspec

_ENCODE = msgspec.json.Encoder(enc_hook=str).encode  #: a value of a str subclass (torch's version) as its text
_DECODE = msgspec.json.Decoder().decode
MAX_LINE = 64 << 20  #: the longest line either side accepts (a node list of 16,384 leaders is under 200 kB)


def encode(message: dict) -> bytes:
    """One message as one line."""
    return _ENCODE(message) + b"\n"


@dataclass
class _Conn:
    sock: socket.socket
    peer: str
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)


class Server:
    """The coordinator's end: ``events`` receives ("msg", conn id, message) and ("closed", conn id, None)."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0, sock: socket.socket | None = None):
        _raise_open_file_limit()
        self.sock = sock or listening_socket(host, port)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.events: queue.Queue = queue.Queue()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[int, _Conn] = {}
        self._writable: set[int] = set()  #: connections with something queued (watched for writing)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="microbench-doctor-plane", daemon=True)
        self._thread.start()

    # -- sending (any thread) -----------------------------------------------------------------
    def send(self, conn_id: int, data: bytes) -> None:
        """Queue ``data`` (from ``encode``) for one connection; dropped if it has closed."""
        with self._lock:
            conn = self._conns.get(conn_id)
            if conn is None:
                return
            conn.outbox += data
            self._writable.add(conn_id)
        self._wake()

    def flush(self, timeout: float) -> None:
        """Wait until everything queued has been written (or ``timeout`` seconds have passed)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if not any(c.outbox for c in self._conns.values()):
                    return
            time.sleep(0.01)

    def close(self) -> None:
        self._closed = True
        self._wake()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self.sock.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")

    # -- the selector thread ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            with self._lock:
                for fd in self._writable:
                    conn = self._conns.get(fd)
                    if conn is not None:
                        self._selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, fd)
                self._writable.clear()
            for key, mask in self._selector.select(timeout=0.5):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                else:
                    self._serve(key.data, mask)
        for fd in list(self._conns):
            self._drop(fd, notify=False)

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the rank retries, the limit is said in the docs
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns[sock.fileno()] = _Conn(sock, f"{addr[0]}:{addr[1]}")
            self._selector.register(sock, selectors.EVENT_READ, sock.fileno())

    def _serve(self, fd: int, mask: int) -> None:
        conn = self._conns.get(fd)
        if conn is None:
            return
        if mask & selectors.EVENT_READ:
            try:
                data = conn.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._drop(fd)
                return
            if data:
                conn.inbox += data
                self._lines(fd, conn)
        if mask & selectors.EVENT_WRITE:
            with self._lock:
                pending = bytes(conn.outbox)
            try:
                sent = conn.sock.send(pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(fd)
                return
            with self._lock:
                del conn.outbox[:sent]
                if not conn.outbox and fd not in self._writable:
                    self._selector.modify(conn.sock, selectors.EVENT_READ, fd)

    def _lines(self, fd: int, conn: _Conn) -> None:
        while True:
            end = conn.inbox.find(b"\n")
            if end < 0:
                if len(conn.inbox) > MAX_LINE:
                    self._drop(fd)
                return
            line = bytes(conn.inbox[:end])
            del conn.inbox[:end + 1]
            try:
                message = _DECODE(line)
            except msgspec.DecodeError:
                self._drop(fd)  # not one of our ranks
                return
            if isinstance(message, dict):
                self.events.put(("msg", fd, message))

    def _drop(self, fd: int, notify: bool = True) -> None:
        with self._lock:
            conn = self._conns.pop(fd, None)
        if conn is None:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()
        if notify:
            self.events.put(("closed", fd, None))


def listening_socket(host: str = "0.0.0.0", port: int = 0) -> socket.socket:
    """The coordinator's socket (made before a fork: the forked coordinator serves it, rank 0 knows its port)."""
    return socket.create_server((host, port), backlog=min(socket.SOMAXCONN, 4096))


def _raise_open_file_limit() -> None:
    """One descriptor per rank: the soft limit raised to the hard one (a job of thousands of ranks needs it)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Client:
    """A rank's end. ``receive`` returns the next ``go`` (or a ``stop`` with status 0); a ``stop`` with another
    status ends this process from the reader thread, as does the coordinator going away."""

    def __init__(self, sock: socket.socket, where: str):
        self.sock, self.where = sock, where
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_lock = threading.Lock()
        self._inbox: queue.Queue = queue.Queue()
        self.on_stop = None  #: called with the status before a clean stop (0) is handed to the main thread
        self._thread = threading.Thread(target=self._read, name="microbench-doctor-link", daemon=True)
        self._thread.start()

    def send(self, message: dict) -> None:
        data = encode(message)
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                _gone(self.where, "the doctor's coordinator went away")

    def receive(self) -> dict:
        return self._inbox.get()

    def _read(self) -> None:
        buf = bytearray()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                _gone(self.where, "the doctor's coordinator went away")
            buf += data
            while (end := buf.find(b"\n")) >= 0:
                message = _DECODE(bytes(buf[:end]))
                del buf[:end + 1]
                if message.get("k") == "stop":
                    if int(message.get("status", 1)) != 0:
                        _flush_and_exit(int(message["status"]))
                    self._inbox.put(message)
                    return  # a clean stop: the coordinator closing the connection now is expected
                self._inbox.put(message)


def _gone(where: str, why: str) -> None:
    """This rank ends (its coordinator is gone: no rank outlives the doctor)."""
    with contextlib.suppress(OSError):
        os.write(2, f"microbench: {where}: doctor: {why}; this rank ends\n".encode())
    _flush_and_exit(1)


def _flush_and_exit(status: int) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(status)

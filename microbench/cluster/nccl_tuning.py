"""Which algorithm and protocol NCCL chose, from its own debug output (``NCCL_DEBUG=INFO``, subsystem TUNING).

Rank 0 of a communicator prints one line per collective it enqueues (NCCL's src/enqueue.cc)::

    NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}    (2.24 and later)
    NCCL INFO AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008                  (2.23)
    NCCL INFO 4194304 Bytes -> Algo 1 proto 2 time 36.473602                                (2.20 to 2.22)

Algorithms are numbered TREE 0, RING 1, COLLNET_DIRECT 2, COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6 and
protocols LL 0, LL128 1, SIMPLE 2 (src/include/nccl_common.h); the bytes are count x element size of the call
(2.24+), or the larger of its send and receive buffers (2.20 to 2.23). Versions before 2.20 print these lines
only at TRACE level (a debug build).

``run --nccl-algo`` asks NCCL for these lines in a file of each rank's own (``NCCL_DEBUG_FILE``), and after each
size rank 0 reads what NCCL appended and records the algorithm and protocol of that size's calls. Printing a
line per call costs NCCL a formatted write per collective, which small-message latency shows: that is why it is
asked for, never on by default.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections import Counter
from pathlib import Path

LINE = re.compile(rb"NCCL INFO (?:([A-Za-z]+):\s*)?(\d+) Bytes -> Algo (\w+) proto (\w+)")
ALGORITHMS = {"0": "TREE", "1": "RING", "2": "COLLNET_DIRECT", "3": "COLLNET_CHAIN", "4": "NVLS", "5": "NVLS_TREE",
              "6": "PAT"}
PROTOCOLS = {"0": "LL", "1": "LL128", "2": "SIMPLE"}
#: microbench benchmark -> NCCL's function name in these lines
FUNCTIONS = {"allreduce": "AllReduce", "allgather": "AllGather", "reduce_scatter": "ReduceScatter",
             "broadcast": "Broadcast", "reduce": "Reduce", "iallreduce": "AllReduce", "iallgather": "AllGather",
             "ireduce_scatter": "ReduceScatter", "ibroadcast": "Broadcast", "ireduce": "Reduce"}
SOURCE = "NCCL_DEBUG=INFO TUNING lines"


def tally(text: bytes, function: str | None, sizes: set[int]) -> Counter:
    """(algorithm, protocol) -> calls, of the lines of ``function`` (where the line names one) and ``sizes``."""
    found: Counter = Counter()
    for func, nbytes, algo, proto in LINE.findall(text):
        if function and func and func.decode() != function:
            continue
        if sizes and int(nbytes) not in sizes:
            continue
        a, p = algo.decode(), proto.decode()
        found[(ALGORITHMS.get(a, a.upper()), PROTOCOLS.get(p, p.upper()))] += 1
    return found


def summarize(found: Counter, source: str = SOURCE) -> dict | None:
    """The record's ``nccl_algo`` block: the most frequent choice, and the others with their counts."""
    if not found:
        return None
    (algo, proto), calls = found.most_common(1)[0]
    others = {f"{a}/{p}": n for (a, p), n in found.most_common()[1:]}
    return {"algorithm": algo, "protocol": proto, "calls": calls, **({"others": others} if others else {}),
            "source": source}


class TuningLog:
    """This rank's NCCL debug file, and how far rank 0 has read it."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    @classmethod
    def ask_nccl(cls) -> "TuningLog | None":
        """Before NCCL starts: set NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=TUNING and a debug file of this process's
        own. None (and nothing set) where the user's environment already decides NCCL's debug output."""
        if any(os.environ.get(v) for v in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")):
            return None
        path = Path(tempfile.gettempdir()) / f"microbench-nccl-{socket.gethostname()}-{os.getpid()}.log"
        os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_DEBUG_FILE": str(path)})
        return cls(path)

    def new_text(self, limit: int = 64 << 20) -> bytes:
        """What NCCL appended since the last call (at most ``limit`` bytes: the rest is skipped)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(limit)
                self.offset = f.seek(0, os.SEEK_END)
        except OSError:
            return b""
        return data

    def choice(self, benchmark: str, size_bytes: int, nranks: int) -> dict | None:
        """The algorithm and protocol of the calls NCCL logged since the last size (this benchmark's function,
        its size as NCCL counts it), or None when it logged none."""
        text = self.new_text()
        sizes = {size_bytes}
        if FUNCTIONS.get(benchmark) in ("AllGather", "ReduceScatter"):  # each rank's part, or the whole buffer
            sizes |= {size_bytes // max(nranks, 1), size_bytes * nranks}
        return summarize(tally(text, FUNCTIONS.get(benchmark), sizes))

    def remove(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


class InspectorLog:
    """The NCCL Inspector plugin's file of this process, where the user loaded the plugin for the run
    (``NCCL_PROFILER_PLUGIN`` naming it, ``NCCL_INSPECTOR_ENABLE=1``, ``NCCL_INSPECTOR_DUMP_DIR`` and a dump
    interval of 0 or more): from format v4.2 each operation's line names ``coll_algo`` and ``coll_proto``. The
    plugin dumps on its own interval, so every line read is kept by (collective, size) until a size asks."""

    SOURCE = "NCCL Inspector plugin (coll_algo, coll_proto)"

    def __init__(self, path: Path):
        self.path, self.offset, self.seen = path, 0, Counter()

    @classmethod
    def find(cls) -> "InspectorLog | None":
        env = os.environ
        if "inspector" not in env.get("NCCL_PROFILER_PLUGIN", "").lower() or env.get("NCCL_INSPECTOR_ENABLE") != "1":
            return None
        folder, interval = env.get("NCCL_INSPECTOR_DUMP_DIR"), env.get("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS")
        if not folder or not (interval or "").lstrip("-").isdigit() or int(interval) < 0:
            return None
        return cls(Path(folder) / f"{socket.gethostname()}-pid{os.getpid()}.log")

    def choice(self, benchmark: str, size_bytes: int, nranks: int) -> dict | None:
        import json

        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(64 << 20)
        except OSError:
            data = b""
        cut = data.rfind(b"\n") + 1  # whole lines only: the plugin may be writing the last one
        self.offset += cut
        for line in data[:cut].splitlines():
            try:
                perf = json.loads(line).get("coll_perf")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(perf, dict) and isinstance(perf.get("coll_algo"), str):
                self.seen[(perf.get("coll"), perf.get("coll_msg_size_bytes"), perf["coll_algo"].upper(),
                           str(perf.get("coll_proto") or "").upper())] += 1
        function = FUNCTIONS.get(benchmark)
        sizes = {size_bytes} | ({size_bytes // max(nranks, 1)} if function == "ReduceScatter" else set())
        found = Counter({(a, p): n for (f, s, a, p), n in self.seen.items() if f == function and s in sizes})
        return summarize(found, self.SOURCE)

    def remove(self) -> None:
        """The plugin's file is the user's: left in place."""

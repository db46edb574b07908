"""All-to-all(v) in NCCL logs (issue 42): NCCL has no all-to-all-v call, so PyTorch's all_to_all_single (and
Megatron-Core's token dispatcher through it) runs one ``ncclSend`` and one ``ncclRecv`` per peer inside one NCCL
group (torch/csrc/cuda/nccl.cpp ``all2all_single_unequal_split``; NCCL 2.28's ncclAlltoAll is one call and is read
as ``alltoall`` by nccl_log.py). Its log lines are ``Send``/``Recv`` lines whose ``root`` is the peer and which share
one ``opCount`` (NCCL counts a group's operations as one).

A group's lines are those of one rank (``host:pid:tid [dev]``), communicator and opCount, in the order the log
holds them; a group closes when that rank's next line on that communicator has another opCount, or at the end. A
group whose sends reach at least half the communicator's ranks (and at least two, the rank itself counted) is an
all-to-all: its sends and recvs leave the send/recv tallies and it is counted once, as ``alltoall`` of the block
to each peer when every peer got the same count, else as ``alltoallv`` of what the rank sent in all, with the
split pattern of its per-peer counts (``peer_sizes.pattern_of``). Pipeline stages and a context-parallel ring send
to one peer a step and stay send/recv. Only lines that start with their ``host:pid:tid [dev]`` prefix are grouped.

Memory: one open group per (rank, communicator), and the counts of the all-to-alls found.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from microbench.workload.traces.names import NCCL_TYPE_CODES
from microbench.workload.traces.peer_sizes import pattern_of

P2P_LINE = re.compile(rb"\n(\S+) \[(\d+)\] NCCL INFO (Send|Recv): opCount ([0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
                      rb"(count [^\]\n:]*\])(?: stream \S+ task \d+ globalrank (\d+))?")
P2P_SPAN = re.compile(rb"count (\d+) datatype (\d+) op \d+ root (-?\d+) comm (\S+)(?: [^\[]*)? \[nranks=(\d+)\]")


class AllToAllGroups:
    """The all-to-alls hidden in a log's grouped Send/Recv lines (see the module)."""

    def __init__(self):
        self.open: dict[tuple, tuple[bytes, list]] = {}  #: (token, dev, comm) -> (opCount, its lines)
        #: (token, dev, comm, globalrank) -> (collective, bytes, nranks, splits) -> calls
        self.found: dict[tuple, Counter] = {}
        #: the send/recv records the all-to-alls took: (token, dev, op, span, globalrank) -> records
        self.taken: Counter = Counter()

    def scan(self, block: bytes) -> None:
        """Group the Send/Recv lines of one block (blocks in order; a group may span blocks)."""
        if b"INFO Send: " not in block and b"INFO Recv: " not in block:
            return
        for token, dev, op, opcount, span, grank in P2P_LINE.findall(b"\n" + block):
            fields = P2P_SPAN.fullmatch(span)
            if not fields or int(fields[2]) not in NCCL_TYPE_CODES:
                continue
            key = (token, dev, fields[4])
            current = self.open.get(key)
            if current is not None and current[0] != opcount:
                self._close(key, *current)
                current = None
            if current is None:
                current = self.open[key] = (opcount, [])
            current[1].append((op, span, grank, int(fields[1]) * NCCL_TYPE_CODES[int(fields[2])], int(fields[3]),
                               int(fields[5])))

    def finish(self) -> None:
        for key, (opcount, lines) in list(self.open.items()):
            self._close(key, opcount, lines)
        self.open.clear()

    def _close(self, key: tuple, opcount: bytes, lines: list) -> None:
        sends = [(peer, nbytes) for op, _, _, nbytes, peer, _ in lines if op == b"Send"]
        nranks = lines[0][5]
        peers = {peer for peer, _ in sends}
        if len(peers) < max(2, math.ceil(nranks / 2)) or not all(0 <= p < nranks for p in peers):
            return
        per_peer = [0] * nranks
        for peer, nbytes in sends:
            per_peer[peer] += nbytes
        token, dev, comm = key
        if len(peers) == nranks and min(per_peer) == max(per_peer):
            call = ("alltoall", per_peer[0], nranks, None)
        else:
            call = ("alltoallv", sum(per_peer), nranks, pattern_of(per_peer))
        self.found.setdefault((token, dev, comm, lines[0][2]), Counter())[call] += 1
        for op, span, grank, *_ in lines:
            self.taken[(token, dev, op, span, grank)] += 1

"""NCCL and RCCL ``NCCL_DEBUG=INFO`` logs (``NCCL_DEBUG_SUBSYS`` including ``COLL``).

Each call prints (enqueue.cc, NCCL 2.4 to 2.30; RCCL adds ``task T globalrank R``)::

    host:pid:tid [cudaDev] NCCL INFO AllReduce: opCount 1 sendbuff 0x.. recvbuff 0x.. count 1024 datatype 7
        op 0 root 0 comm 0x55c0 [nranks=8] stream 0x..

``count`` is elements per rank: the buffer (AllReduce, Broadcast, Reduce, Send, Recv), each rank's
contribution (AllGather, Gather), each rank's result (ReduceScatter: the input is count x nranks) or the
block to each peer (AlltoAll, Scatter); datatype is an ncclDataType_t code. A *rank* here is one GPU of one
process, ``host:pid`` and the device its communicators were created on (the ``cudaDev`` of its
``comm 0x.. rank r nranks n cudaDev d`` init line, else the ``[cudaDev]`` of its call lines): a process
driving several GPUs is several ranks, and a process in several communicators is one rank.

Speed and linear time: the records of a block are found by regular expressions that start with a literal
(a line end, ``NCCL INFO``, or for the prefix the same text read backwards), so no character is scanned more
than a bounded number of times whatever the line, and are tallied with ``Counter.update``, in C
(_tally_calls).
Distinct (prefix, call) keys are resolved to ranks at the end: memory grows with distinct calls and
threads, not with the file. The Send/Recv lines of one NCCL group that reach most of a communicator are one
all-to-all(v) (nccl_alltoall.py).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from microbench.workload.traces.names import NCCL_OPS, NCCL_TYPE_CODES, letters
from microbench.workload.traces.nccl_alltoall import AllToAllGroups
from microbench.workload.traces.source import TraceSource
from microbench.workload.traces.tally import TraceTally

_CALL = (rb"NCCL INFO ([A-Za-z]+): opCount [0-9a-fA-F]+ (?:sendbuff \S+ recvbuff \S+ (count [^\]\n:]*\])"
         rb"(?: stream \S+ task \d+ globalrank (\d+))?)?")
#: a call record: its operation and, when they can be read, its fields up to "[nranks=n]" as one span (split at
#: the end, once per distinct span: one group is cheaper than six) and RCCL's globalrank
RECORD = re.compile(_CALL)
#: a call record at the start of a line, with its prefix: "host:pid:tid [dev] NCCL INFO ..."
LINE = re.compile(rb"\n(\S+) \[(\d+)\] " + _CALL)
#: "token [dev] NCCL INFO Op: opCount " read backwards, in the reversed block: (dev, token), both reversed
REVERSED_PREFIX = re.compile(rb" tnuoCpo :[A-Za-z]+ OFNI LCCN \](\d+)\[ (\S+)")
SPAN = re.compile(rb"count (\d+) datatype (\d+) op \d+ root -?\d+ comm (\S+)(?: [^\[]*)? \[nranks=(\d+)\]")
INIT = re.compile(rb"comm (\S+) rank (\d+) n[Rr]anks (\d+)(?: cudaDev (\d+))?")
PREFIX_SPAN = 320  #: bytes looked back from "NCCL INFO" for "host:pid:tid [dev] " (hostnames: 255 at most)
_NO_PREFIX = (b"", b"")


def split_token(token: bytes) -> tuple[bytes, bytes] | None:
    """(host, pid) of a ``host:pid:tid`` token; a launcher prefix glued before it (``[1,0]<stdout>:``) is
    left out by splitting from the right. None when the token is not one."""
    parts = token.rsplit(b":", 3)
    if len(parts) < 3 or not parts[-1].isdigit() or not parts[-2].isdigit() or not parts[-3]:
        return None
    return parts[-3], parts[-2]


def _prefix_before(block: bytes, start: int) -> tuple[bytes, bytes]:
    """(token, dev) of ``token [dev] `` just before "NCCL INFO" at ``start``; (b"", b"") without one."""
    before = block[max(0, start - PREFIX_SPAN):start]
    if not before.endswith(b"] "):
        return _NO_PREFIX
    head, _, dev = before[:-2].rpartition(b"[")
    body = head[:-1]
    if not dev.isdigit() or not head.endswith(b" ") or not body or body[-1:].isspace():
        return _NO_PREFIX
    return body.rsplit(None, 1)[-1], dev


def _tally_calls(block: bytes, counts: Counter) -> int:
    """Tally a block's call records as (token, dev, op, fields span, globalrank); returns how many.

    Three ways, the first that accounts for every record: records that start their line (one findall); the
    fields and the prefixes found apart, the prefixes by reading the block backwards (two findalls, when
    launcher prefixes or timestamps stand before the token); record by record (lines without a prefix).
    Every pattern starts with a literal, so each is linear in the block.
    """
    heads = block.count(b": opCount ")
    found = LINE.findall(b"\n" + block)
    if len(found) == heads:
        counts.update(found)
        return heads
    records = RECORD.findall(block)
    prefixes = REVERSED_PREFIX.findall(block[::-1])
    if len(prefixes) == len(records):
        prefixes.reverse()
        counts.update((token[::-1], dev[::-1]) + record for (dev, token), record in zip(prefixes, records))
    else:
        for m in RECORD.finditer(block):
            counts[_prefix_before(block, m.start()) + m.groups(b"")] += 1
    return len(records)


def _note_inits(block: bytes, inits: dict) -> None:
    """(host, pid, comm) -> (rank in comm, cudaDev) from the block's init lines."""
    if b" rank " not in block:
        return
    for m in INIT.finditer(block):
        line = block.rfind(b"\n", 0, m.start()) + 1
        info = block.find(b"NCCL INFO ", line, m.start())
        token, _ = _prefix_before(block, info) if info >= 0 else _NO_PREFIX
        if who := split_token(token):
            inits[who + (m.group(1),)] = (m.group(2), m.group(4) or None)


def read_nccl_log(source: TraceSource, tally: TraceTally, group: int | None = None) -> None:
    """Tally the log's call lines per rank (``group`` is unused: every line prints its nranks)."""
    counts: Counter = Counter()  # (token, dev, op, fields span, globalrank) -> records
    inits: dict = {}  # (host, pid, comm) -> (rank, cudaDev or None) from the latest init line
    lines = records = 0
    groups = AllToAllGroups()
    for block in source.blocks(tally.skipped):
        lines += block.count(b"\n") + (not block.endswith(b"\n"))
        records += _tally_calls(block, counts)
        _note_inits(block, inits)
        groups.scan(block)
    groups.finish()
    for key, n in groups.taken.items():  # the send/recv lines that were an all-to-all's
        counts[key] -= min(n, counts[key])
    tally.entries = lines
    tally.skipped["line without a call (lines minus call records)"] += max(lines - records, 0)
    _resolve(+counts, inits, tally, groups.found)
    if groups.found:
        tally.note("Send/Recv lines of one NCCL group (one opCount) that reach most of their communicator are "
                   "counted as one all-to-all (equal counts) or all-to-all-v (its split pattern)")
    tally.note("NCCL_DEBUG=INFO call lines: a rank is one GPU of one process (host:pid and the device of its "
                "communicators); a process with several GPUs counts as several ranks")


def _unglue(whos: set) -> dict:
    """(host, pid) -> the host it really is: a host ending in another host seen with the same pid is that host
    with the end of another process's broken line glued before it ("...opCounode1:77:77 [0] NCCL INFO")."""
    hosts_of = defaultdict(set)
    for host, pid in whos:
        hosts_of[pid].add(host)
    fixed = {}
    for pid, hosts in hosts_of.items():
        for host in hosts:
            shorter = [h for h in hosts if len(h) < len(host) and host.endswith(h)]
            fixed[(host, pid)] = min(shorter, key=len) if shorter else host
    return fixed


def _label(host: bytes, pid: bytes, dev: bytes) -> str:
    return f"{host.decode(errors='replace')}:{pid.decode()} gpu{int(dev)}"


def _resolve(counts: Counter, inits: dict, tally: TraceTally, alltoalls: dict | None = None) -> None:
    """Credit each tallied record to a rank; records without a prefix go to the one rank their communicator
    (and RCCL globalrank) belongs to, else to the unattributed calls. ``alltoalls``: the grouped all-to-alls
    (``nccl_alltoall.AllToAllGroups.found``), credited to their lines' rank."""
    alltoalls = alltoalls or {}
    whos = {token: split_token(token) for token, *_ in [*counts, *alltoalls]}
    host_of = _unglue({w for w in whos.values() if w} | {(host, pid) for host, pid, _ in inits})
    owners: dict = defaultdict(lambda: defaultdict(set))  # comm -> rank in comm (or None) -> rank labels
    attributed, orphans = [], []
    for (token, dev, op, span, grank), n in counts.items():
        fields = SPAN.fullmatch(span)
        if not fields or int(fields[2]) not in NCCL_TYPE_CODES:
            tally.unreadable += n
            continue
        key = (op,) + fields.groups() + (grank,)  # op, count, dtype, comm, nranks, globalrank
        who = whos[token]
        if who is None:
            orphans.append((key, n))
            continue
        host, pid = host_of[who], who[1]
        rank_in_comm, init_dev = inits.get((host, pid, key[3]), (grank or None, None))
        label = _label(host, pid, init_dev or dev)
        owners[key[3]][rank_in_comm].add(label)
        attributed.append((label, key, n))
    for (host, pid, comm), (rank_in_comm, dev) in inits.items():
        if dev is not None:
            owners[comm][rank_in_comm].add(_label(host_of[(host, pid)], pid, dev))
    tally.communicator_ranks = len({(label, key[3]) for label, key, _ in attributed})
    for label, key, n in attributed:
        _count(tally, label, key, n)
    for (token, dev, comm, grank), calls in alltoalls.items():
        who = whos[token]
        label = None
        if who is not None:
            host, pid = host_of[who], who[1]
            label = _label(host, pid, inits.get((host, pid, comm), (None, None))[1] or dev)
        for (collective, nbytes, nranks, splits), n in calls.items():
            tally.add(label, collective, nbytes, nranks, n, splits)
    for key, n in orphans:
        _count(tally, _owner(owners, key[3], key[5] or None), key, n)
    if orphans:
        tally.note("call lines without a host:pid:tid prefix are credited to the one rank whose communicator "
                    "(and RCCL globalrank) they print, else counted as unattributed")


def _owner(owners: dict, comm: bytes, rank_in_comm: bytes | None) -> str | None:
    """The one rank that owns a communicator address (with that rank in it, when the line says), else None."""
    candidates = {label for r, labels in owners.get(comm, {}).items() if rank_in_comm in (None, r)
                  for label in labels}
    return next(iter(candidates)) if len(candidates) == 1 else None


def _count(tally: TraceTally, label: str | None, key: tuple, n: int) -> None:
    name, count, dtype, nranks = key[0].decode(), int(key[1]), int(key[2]), int(key[4])
    collective = NCCL_OPS.get(letters(name))
    if collective is None:
        tally.uncurved[name] += n
        return
    nbytes = count * NCCL_TYPE_CODES[dtype] * (nranks if collective == "reduce_scatter" else 1)
    tally.add(label, collective, nbytes, nranks, n)

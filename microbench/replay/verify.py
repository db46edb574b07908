"""``replay --check``: one checked pass of the plan's calls after the timed iterations, and a log of what was issued.

Every call the executor's operations issue, in their order (``Executor.issued_in_order``), runs once more through
the same pre-bound call (a posted one waited at once, so that no two calls share the pool while in flight), with
its send side filled from (this rank's world rank, the call's index in the iteration) by
``benchmarks.checkdata.data`` (values 1..61, each element's value depending on its position) and its receive side
poisoned (0). Afterwards the receive side (broadcast: its buffer) is compared with what the collective defines on
the group the *schedule* names (``Layout.group_of``: world ranks), computed here from every member's pattern, never
from the communicator the call ran on:

- allreduce: the sum of the members' data; reduce: the same on the group's first rank (the others unchecked);
- broadcast: the first rank's data on every member;
- allgather: every member's block in the group's rank order; reduce_scatter: member i's slice of the sum;
- alltoall: block q from member q's block for this rank; alltoallv: each member's block for this rank (the call's
  split matrix), back to back in rank order, the rest of the buffer untouched;
- a pipeline send (shift): the previous stage's data in forward, the next one's in backward, nothing at the ends;
  a context-parallel ring's: the same, wrapping around the cp group.

The log says, per call, what this rank issued: the schedule's collective, the table entry, the group kind, the world
ranks of the communicator it ran on (asked of the communicator: MPI's group translated to the world's,
torch's ``get_process_group_ranks``), the bytes of its send and receive buffers (in place: the one buffer, on both),
their element type, and how many elements were wrong. A call whose communicator holds other ranks than the schedule
names counts as failed too. Nothing here runs inside a timed iteration.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from microbench.benchmarks import checkdata
from microbench.benchmarks.checkdata import POISON
from microbench.replay.dispatch import RING_GROUPS
from microbench.replay.layout import Layout
from microbench.replay.schedule import Call

CHECK_RULE = ("--check: after the timed iterations every call of one iteration runs once more, in the executor's "
              "order, each to completion; send data from (world rank, call index), receive side poisoned; the "
              "result compared with what the collective defines on the group the schedule names (world ranks): "
              "allreduce/reduce sums, broadcast the first rank's data, allgather blocks in rank order, "
              "reduce_scatter the rank's slice of the sum, alltoall(v) each member's block for the rank, a shift "
              "the previous (forward) or next (backward) stage's data; the communicator's ranks asked of it")

MAX_FAILURES_LISTED = 16  #: failure lines kept in the record (the count covers all)
PERIOD = 61  #: checkdata.data's values repeat every 61 elements (they are taken modulo 61)


def data(src: int, k: int, n: int) -> np.ndarray:
    """``benchmarks.checkdata.data(src, k, n)``, the values 1..61 by position that ``run --check`` sends, made by
    tiling its first period of 61 (int32): the same values, at memory speed for calls of millions of elements."""
    return np.resize(checkdata.data(src, k, PERIOD).astype(np.int32), n)


def _get(buffer) -> np.ndarray:
    """A host copy of a pool view (numpy, or a torch tensor on any device)."""
    if hasattr(buffer, "detach"):
        return buffer.detach().cpu().numpy().copy()
    return np.array(buffer)


def _put(buffer, values: np.ndarray) -> None:
    if hasattr(buffer, "copy_"):  # a torch tensor (copy_ converts the element type and moves it to the device)
        import torch

        buffer.copy_(torch.from_numpy(np.ascontiguousarray(values)))
    else:
        buffer[...] = values


def _dtype(buffer) -> str:
    return str(buffer.dtype).removeprefix("torch.")


def _size(buffer) -> int:
    """Bytes of a pool view (0: none)."""
    if buffer is None:
        return 0
    return int(buffer.nbytes) if hasattr(buffer, "nbytes") else int(buffer.numel() * buffer.element_size())


def _expected(call: Call, members: tuple[int, ...], me: int, k: int, send_len: int, recv_len: int):
    """What this rank's receive side holds after ``call`` (index ``k``) on the schedule's group ``members`` (world
    ranks) when every member sent ``data(member, k, send_len)``; None: nothing to check on this rank."""
    i, n = members.index(me), len(members)
    sent = {m: data(m, k, send_len) for m in members}
    c = call.collective
    if c == "allreduce":
        return sum(sent.values())
    if c == "reduce":
        return sum(sent.values()) if me == members[0] else None
    if c == "broadcast":
        return sent[members[0]]
    if c == "allgather":
        return np.concatenate([sent[m] for m in members])
    if c == "reduce_scatter":
        block = send_len // n
        return sum(sent.values())[i * block:(i + 1) * block]
    if c == "alltoall":
        block = send_len // n
        return np.concatenate([sent[m][i * block:(i + 1) * block] for m in members])
    if c == "alltoallv":
        matrix = call.splits.matrix(max(call.bytes, 1), n)  # uint8: elements are bytes
        starts = np.concatenate([np.zeros((n, 1), dtype=np.int64), np.cumsum(matrix, axis=1)], axis=1)
        got = [sent[m][starts[q, i]:starts[q, i] + matrix[q, i]] for q, m in enumerate(members)]
        body = np.concatenate(got) if got else np.zeros(0, dtype=np.int64)
        return np.concatenate([body, np.full(max(0, recv_len - len(body)), POISON)])
    if c == "send":
        source = i + 1 if call.phase == "backward" else i - 1
        if call.group in RING_GROUPS:
            source %= n
        return sent[members[source]] if 0 <= source < n else np.full(recv_len, POISON)
    return None


def _wrong(got: np.ndarray, want) -> tuple[int, str]:
    """Elements of ``got`` that differ from ``want`` (a length mismatch: every element), and the first one."""
    want = np.asarray(want)
    if got.shape != want.shape:
        return max(len(got), len(want)), f"{len(got)} elements where {len(want)} were expected"
    bad = np.flatnonzero(got != want.astype(got.dtype))
    if not len(bad):
        return 0, ""
    j = int(bad[0])
    return len(bad), f"element {j} holds {got[j].item()}, expected {want[j].item()}"


def check_call(call: Call, issued, k: int, members: tuple[int, ...], ran_on: tuple[int, ...], me: int) -> dict:
    """Run ``call`` (index ``k`` in the iteration) once through its prepared ``issued`` call and check it; its log
    entry (``failure``: a line, or "" when right)."""
    b = issued.buffers
    source = b.recv if b.send is None else b.send  # in place (torch all_reduce, reduce): the data sits in recv
    if b.recv is not None and b.send is not None:
        _put(b.recv, np.full(len(_get(b.recv)), POISON))
    send_len = len(_get(source))
    if call.collective == "broadcast" and me != members[0]:
        _put(source, np.full(send_len, POISON))
    else:
        _put(source, data(me, k, send_len))
    if issued.posted:
        issued.call.wait(issued.call.post())
    else:
        issued.call()
    where = b.send if call.collective == "broadcast" else b.recv
    got = _get(where) if where is not None else np.zeros(0)
    want = _expected(call, members, me, k, send_len, len(got))
    wrong, first = _wrong(got, want) if want is not None else (0, "")
    what = f"rank {me} call {k} {call.collective} ({issued.entry}) on {call.group} {list(members)}"
    failure = f"{what}: {wrong} element(s) wrong, {first}" if wrong else ""
    if tuple(ran_on) != tuple(members):
        failure = f"{what}: ran on world ranks {list(ran_on)}" + (f"; {failure}" if failure else "")
    return {"collective": call.collective, "issued_as": issued.entry, "group": call.group,
            "group_ranks": list(ran_on), "send_bytes": _size(source), "recv_bytes": _size(b.recv),
            "dtype": _dtype(source), "calls": 1, "wrong_elements": wrong, "failure": failure}


def check(ordered: list[Call], issued: Callable[[Call], Any], ran_on: Callable[[str], tuple[int, ...]],
          layout: Layout, me: int) -> tuple[list[dict], list[str]]:
    """This rank's checked pass over ``ordered`` (the iteration's issued calls in order): its log (consecutive
    identical entries merged, ``calls`` counting them) and its failure lines."""
    log: list[dict] = []
    failures: list[str] = []
    for k, call in enumerate(ordered):
        entry = check_call(call, issued(call), k, layout.group_of(me, call.group), ran_on(call.group), me)
        failure = entry.pop("failure")
        if failure:
            failures.append(failure)
        last = log[-1] if log else None
        if last and all(last[f] == entry[f] for f in entry if f not in ("calls", "wrong_elements")):
            last["calls"] += 1
            last["wrong_elements"] += entry["wrong_elements"]
        else:
            log.append(entry)
    return log, failures


def summarize(per_rank: list[tuple[list[dict], list[str]]], checked_per_rank: int) -> dict:
    """The record's ``check`` block from every rank's (log, failures), in rank order."""
    failures = [f for _, fs in per_rank for f in fs]
    return {"rule": CHECK_RULE, "calls_checked": checked_per_rank * len(per_rank), "failures": len(failures),
            "failed": failures[:MAX_FAILURES_LISTED],
            "ranks": [{"rank": r, "calls": log} for r, (log, _) in enumerate(per_rank)]}

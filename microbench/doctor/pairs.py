"""Node pairs in rounds, and one exchange between two ranks with a deadline (layers 3 and 7).

The rounds are a round-robin tournament (the circle method): n nodes meet every other node once in n - 1 rounds
(n rounds when n is odd, one node resting each round), each node with exactly one partner per round, so n nodes
cost O(n) rounds of n/2 concurrent exchanges. The ring comes first: every node with both neighbours at once,
which names a node that answers nobody after one round.

An exchange is non-blocking MPI (Isend and Irecv both ways) polled until it completes or its deadline passes:
MPI has no timeout of its own, and a blocking call that never returns would leave nothing to report. What did
not complete is left posted (MPI cannot take back a send); the doctor ends the job after a failing layer.
"""

from __future__ import annotations

import time

import numpy as np

BUSY_S = 0.01  #: poll without sleeping this long (a fast network's exchange is timed closely), then every 1 ms


def partner(node: int, round_index: int, n: int) -> int | None:
    """``node``'s partner in round ``round_index`` (0-based) of the tournament over ``n`` nodes, or None (rest)."""
    if n < 2:
        return None
    m = n if n % 2 == 0 else n + 1  # a resting "node" m - 1 when n is odd
    rounds = m - 1
    r = round_index % rounds
    if node == m - 1:
        other = r
    elif node == r:
        other = m - 1
    else:
        other = (2 * r - node) % rounds
    return None if other >= n else other


def rounds(n: int) -> int:
    """Rounds of the tournament over ``n`` nodes."""
    return 0 if n < 2 else (n - 1 if n % 2 == 0 else n)


def ring_neighbours(node: int, n: int) -> list[int]:
    """The ring's neighbours of ``node`` (one when n is 2, none when n is 1)."""
    if n < 2:
        return []
    return sorted({(node - 1) % n, (node + 1) % n} - {node})


def pack_ranks(ranks: list[int]) -> list[list[int]]:
    """Ascending ranks as runs ``[first, count, step]`` (the leaders of a regular layout, one a node, are one run:
    what goes to every node stays small at 16,384 nodes)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs:
            first, count, step = runs[-1]
            if count == 1 and r > first:
                runs[-1] = [first, 2, r - first]
                continue
            if r == first + count * step:
                runs[-1][1] += 1
                continue
        runs.append([r, 1, 1])
    return runs


def unpack_ranks(runs: list[list[int]]) -> list[int]:
    return [first + k * step for first, count, step in runs for k in range(count)]


def exchange(comm, peers: list[int], nbytes: int, tag: int, deadline_s: float,
             send: np.ndarray | None = None, recv: list[np.ndarray] | None = None) -> tuple[list[int], float]:
    """Send ``nbytes`` to every rank of ``peers`` and receive as many from each, at once; wait at most
    ``deadline_s`` seconds. Returns (the peers whose message did not arrive, or whose send did not complete, in
    time; the seconds it took, or the deadline when something did not complete)."""
    from mpi4py import MPI

    send = send if send is not None else np.zeros(max(nbytes, 1), dtype=np.uint8)
    recv = recv if recv is not None else [np.empty(max(nbytes, 1), dtype=np.uint8) for _ in peers]
    start = time.perf_counter()
    recvs = [comm.Irecv([recv[k][:nbytes], MPI.BYTE], source=p, tag=tag) for k, p in enumerate(peers)]
    sends = [comm.Isend([send[:nbytes], MPI.BYTE], dest=p, tag=tag) for p in peers]
    pending = {k for k in range(len(peers))}
    sent = set(pending)
    while pending or sent:
        for k in list(pending):
            if recvs[k].Test():
                pending.discard(k)
        for k in list(sent):
            if sends[k].Test():
                sent.discard(k)
        if not pending and not sent:
            break
        elapsed = time.perf_counter() - start
        if elapsed > deadline_s:
            for k in pending:
                try:
                    recvs[k].Cancel()
                except MPI.Exception:
                    pass
            return sorted({peers[k] for k in pending | sent}), deadline_s
        if elapsed > BUSY_S:
            time.sleep(0.001)
    return [], time.perf_counter() - start

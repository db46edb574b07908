"""Layer 3, MPI: MPI initialises, a barrier completes, and every node pair exchanges 8 bytes.

On each rank, ``collect``: MPI_Init_thread called through ctypes (mpi4py's own call keeps the interpreter lock
for its whole duration, so this rank's link to the coordinator, and a coordinator forked beside rank 0, would
freeze with it; through ctypes the lock is released and a rank stuck inside MPI_Init can still be told to stop),
then the world's size and rank checked against the launcher's (an MPI that does not match its launcher starts
every rank as a singleton), a non-blocking barrier with a deadline, then on one rank per node (``cluster.nodes``)
8 bytes with both ring neighbours at once and with every other node in the tournament's rounds
(``pairs.py``), each exchange with a deadline; a pair that does not answer is reported as it happens. No time is
judged here: 8 bytes say whether a pair connects, not how fast.

On the coordinator, ``judge``: ranks whose MPI disagrees with the launcher, the barrier, and the pairs that did
not answer; a node in two or more failed pairs is the node named.
"""

from __future__ import annotations

import ctypes
import time
from collections import Counter

from microbench.doctor import pairs
from microbench.doctor.job import Job
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, hosts_phrase, verdict

LAYER = BY_NAME["mpi"]
RING_TAG = 7
ROUND_TAG = 100
HEARTBEAT_S = 1.0  #: progress through the rounds is reported at most this often


def init_releasing_the_lock(MPI, level: str = "single") -> None:
    """MPI_Init_thread through ctypes on the library mpi4py loaded (the interpreter lock released meanwhile)."""
    from microbench.cluster.mpi_runtime import library, thread_levels

    if MPI.Is_initialized():
        return
    path = library(MPI).path
    if path is None:  # not a library ctypes can name: mpi4py's own call
        MPI.Init_thread(thread_levels(MPI)[level])
        return
    lib = ctypes.CDLL(path)
    provided = ctypes.c_int()
    code = lib.MPI_Init_thread(None, None, ctypes.c_int(thread_levels(MPI)[level]), ctypes.byref(provided))
    if code != 0:
        raise RuntimeError(f"MPI_Init_thread returned error code {code}")


def collect(ctx: dict, rank: int, size: int, step, hook, state: dict) -> dict:
    """Initialise MPI and exchange 8 bytes; ``step(text, **facts)`` reports progress, ``hook(point)`` is the test
    hook of a stalled rank; the doctor's communicator is left in ``state["comm"]`` for layer 7."""
    from microbench.cluster.mpi_runtime import import_mpi

    timeout = float(ctx["timeout"])
    MPI = import_mpi(initialize=False)
    hook("mpi_init")
    step("inside MPI_Init")
    start = time.monotonic()
    init_releasing_the_lock(MPI)
    out = {"init_s": round(time.monotonic() - start, 3), "mpi_size": MPI.COMM_WORLD.Get_size(),
           "mpi_rank": MPI.COMM_WORLD.Get_rank()}
    if out["mpi_size"] != size or out["mpi_rank"] != rank:
        return out  # the judge names it; exchanging on a world that is not the launcher's means nothing
    comm = MPI.COMM_WORLD.Dup()
    state["comm"] = comm
    step("inside the barrier")
    request = comm.Ibarrier()
    t0 = time.monotonic()
    done = _wait(request, timeout * 0.5)
    out["barrier_s"] = round(time.monotonic() - t0, 3) if done else None
    if not done:
        step("the barrier did not complete", barrier_timeout=round(timeout * 0.5, 1))
    if ctx.get("index") is None:  # not its node's lowest rank
        return out
    out["failed"] = _pairs(comm, ctx["index"], pairs.unpack_ranks(ctx["leaders"]), ctx["pair_timeout"], step)
    return out


def _wait(request, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if request.Test():
            return True
        time.sleep(0.0005)
    return False


def _pairs(comm, me: int, leaders: list[int], pair_timeout: float, step) -> list[dict]:
    """The ring, then the rounds (only when the ring passed); every failure reported at once."""
    n = len(leaders)
    failed = []

    node_of = {rank: k for k, rank in enumerate(leaders)}

    def report(stage: str, peers: list[int]) -> None:
        for p in peers:
            node = node_of[p]
            entry = {"stage": stage, "peer": node}
            failed.append(entry)
            step(f"no answer from node {node} ({stage})", failed_pair=[me, node], stage=stage)

    neighbours = [leaders[k] for k in pairs.ring_neighbours(me, n)]
    step("ring")
    missing, _ = pairs.exchange(comm, neighbours, 8, RING_TAG, pair_timeout)
    report("ring", missing)
    if failed:
        return failed
    last = time.monotonic()
    for r in range(pairs.rounds(n)):
        other = pairs.partner(me, r, n)
        if time.monotonic() - last > HEARTBEAT_S:
            step(f"round {r + 1} of {pairs.rounds(n)}", heartbeat=True)
            last = time.monotonic()
        if other is None:
            continue
        missing, _ = pairs.exchange(comm, [leaders[other]], 8, ROUND_TAG + r % 30000, pair_timeout)
        report(f"round {r + 1}", missing)
    return failed


def judge(reports: dict[int, dict], job: Job, size: int, failed_steps: list[dict], labels: list[str]) -> LayerResult:
    """``failed_steps``: the pairs the ranks reported as they went ({rank, pair, stage}); ``labels``: node names."""
    findings: list[Finding] = []
    singletons = {r: rep for r, rep in reports.items() if rep.get("mpi_size") != size or rep.get("mpi_rank") != r}
    if singletons:
        sizes = Counter(rep.get("mpi_size") for rep in singletons.values())
        what = (f"MPI started {len(singletons)} rank(s) as a world of {', '.join(map(str, sizes))} where the launcher "
                f"started {size}: the MPI library does not match its launcher (srun needs --mpi=pmix or pmi2; "
                f"mpiexec must be the one of the loaded MPI)")
        findings.append(Finding(f"{what}: {hosts_phrase(job.by_host(singletons))}"))
    pairs_failed = {tuple(sorted(s["pair"])): s["stage"] for s in failed_steps}
    if pairs_failed:
        count = Counter(n for pair in pairs_failed for n in pair)
        culprits = sorted(n for n, c in count.items() if c >= 2)
        if culprits:
            for node in culprits:
                partners = sorted({labels[b if a == node else a] for a, b in pairs_failed if node in (a, b)})
                findings.append(Finding(f"{labels[node]} answers none of its partners ({', '.join(partners)}): "
                                        f"8 bytes each way did not arrive", host=labels[node]))
        for (a, b), stage in pairs_failed.items():
            if a in culprits or b in culprits:
                continue
            findings.append(Finding(f"{labels[a]} and {labels[b]} cannot exchange 8 bytes ({stage}): each waited "
                                    f"for the other", host=None))
    barrier = [r for r, rep in reports.items() if "barrier_s" in rep and rep["barrier_s"] is None]
    if barrier and not pairs_failed:
        findings.append(Finding(f"the barrier did not complete on {hosts_phrase(job.by_host(barrier))}, though "
                                f"every node pair answered 8 bytes: a rank inside a node (shared memory) or the "
                                f"barrier's own algorithm"))
    init = max((rep.get("init_s", 0.0) for rep in reports.values()), default=0.0)
    nodes = len(labels)
    if findings:
        summary = findings[0].what + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else "")
    else:
        summary = (f"MPI_Init {init:.2f} s, barrier; ring and {pairs.rounds(nodes)} round(s) of 8 bytes between "
                   f"{nodes} node(s): every pair answered")
    return verdict(summary, findings, LAYER, details={
        "init_s_max": init, "rounds": pairs.rounds(nodes), "nodes": nodes,
        "failed_pairs": [[labels[a], labels[b], stage] for (a, b), stage in pairs_failed.items()]})

"""The replay issues what it says: each call through the benchmark table's entry (its non-blocking twin when
overlapped) on its group's communicator, the data landing where the collective says, overlapped calls posted and
waited at the end of their segment.

In this process, on a real one-rank MPI (a singleton): the dispatch goes through the table (a collective the table
lacks cannot be replayed), and the executor posts overlapped calls. On 4 real ranks (this file run as a script under
mpiexec): every collective the replay issues, blocking and posted, all-to-all-v with a skewed split and its
transpose (issue 42), the pipeline shift and the context-parallel ring's, on every group kind of tp 2 x dp 2,
pp 2 x dp 2 and cp 2 x dp 2 with ep 2, on MPI and on torch.distributed's gloo, moves each rank's data to the ranks
its layout group holds (the expectation comes from the layout, not from the communicator the call ran on); and
``replay --check``'s verifier (issue 40), run over the same calls in the same launch, finds every one right.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script under mpiexec: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from microbench.benchmarks.splits import parse
from microbench.replay.layout import KINDS, Layout
from microbench.replay.schedule import Call

#: the workload collectives the replay issues through the table, each checked blocking and posted
THROUGH_THE_TABLE = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall")
BYTES = 64  #: per call: 16 float32 elements for the reductions, 64 bytes (per peer for alltoall) otherwise
SPLITS = ("zipf:1.2", "zipf:1.2/T")  #: the all-to-all-v splits probed (a MoE dispatch and its combine)


# ------------------------------------------------------------------------------------------------ on 4 ranks
def probe_calls(layout: Layout) -> list[Call]:
    """Every collective on every group kind, blocking and posted, all-to-all-v with a split and its transpose, and
    the pipeline's and the ring's shift both ways."""
    kinds = [kind for kind in layout.kinds if layout.size(kind) > 1]
    calls = [Call(c, BYTES, kind, "forward", posted) for kind in kinds for c in THROUGH_THE_TABLE
             for posted in (False, True)]
    calls += [Call("alltoallv", BYTES, kind, "forward", posted, parse(split)) for kind in kinds
              for split in SPLITS for posted in (False, True)]
    for group, size in (("pp", layout.pp), ("cp", layout.cp)):
        if size > 1:
            calls += [Call("send", BYTES, group, phase, False) for phase in ("forward", "backward")]
    return calls


def _put(buffer, values: np.ndarray) -> None:
    if hasattr(buffer, "copy_"):  # a torch tensor
        import torch

        buffer.copy_(torch.from_numpy(values))
    else:
        buffer[...] = values


def _got(buffer) -> np.ndarray:
    return buffer.numpy().copy() if hasattr(buffer, "numpy") else np.array(buffer)


def _fill(call: Call, issued, me: int, i: int, n: int) -> None:
    """This rank's data: its world rank + 1 (alltoall: + 16 x the peer's index in the group); receive side 0."""
    b = issued.buffers
    if b.recv is not None:
        _put(b.recv, np.zeros(len(b.recv), dtype=_got(b.recv).dtype))
    source = b.recv if b.send is None else b.send  # in place (torch all_reduce, reduce): the data sits in recv
    values = np.full(len(source), me + 1, dtype=_got(source).dtype)
    if call.collective == "alltoall":
        values += np.repeat(np.arange(n) * 16, len(source) // n).astype(values.dtype)
    if call.collective == "alltoallv":  # block j (of its split's length) for peer j: + 16 j
        row = call.splits.matrix(BYTES, n)[i]
        values[:row.sum()] += np.repeat(np.arange(n) * 16, row).astype(values.dtype)
    _put(source, values)


def _expected(call: Call, members: tuple, me: int, length: int) -> np.ndarray | None:
    """What this rank's receive side (broadcast: its buffer) holds after ``call`` on the layout's group ``members``;
    None where it has nothing to check (a reduce's non-root)."""
    i, n = members.index(me), len(members)
    total = float(sum(m + 1 for m in members))
    if call.collective in ("allreduce", "reduce_scatter"):
        return np.full(length, total)
    if call.collective == "reduce":
        return np.full(length, total) if me == members[0] else None
    if call.collective == "broadcast":
        return np.full(length, members[0] + 1)
    if call.collective == "allgather":
        return np.repeat([m + 1 for m in members], length // n)
    if call.collective == "alltoall":
        return np.repeat([m + 1 + 16 * i for m in members], length // n)
    if call.collective == "alltoallv":  # each source's block for me, in rank order; the rest of the buffer untouched
        column = call.splits.matrix(BYTES, n)[:, i]
        got = np.repeat([m + 1 + 16 * i for m in members], column)
        return np.concatenate([got, np.zeros(max(0, length - len(got)))])  # a shorter buffer fails the check
    peer = i - 1 if call.phase != "backward" else i + 1  # a shift: from the previous stage in forward
    if call.group == "cp":  # the ring wraps at its ends
        peer %= n
    return np.full(length, members[peer] + 1 if 0 <= peer < n else 0)


def _check(call: Call, issued, members: tuple, me: int) -> list[str]:
    i, n = members.index(me), len(members)
    name = f"{call.collective} {'posted' if call.overlapped else 'blocking'} on {call.group} {members} ({call.phase})"
    if call.splits is not None:
        name += f" split {call.splits.text}"
    want_entry = "shift" if call.collective == "send" else ("i" if call.overlapped else "") + call.collective
    if (issued.entry, issued.posted, issued.group_ranks) != (want_entry, call.overlapped, n):
        return [f"{name}: issued as {issued.entry} (posted {issued.posted}) on {issued.group_ranks} ranks"]
    _fill(call, issued, me, i, n)
    issued.call()  # a posted call: post, then wait
    b = issued.buffers
    where = b.send if call.collective == "broadcast" else b.recv
    got = _got(where)
    want = _expected(call, members, me, len(got))
    if want is not None and not np.array_equal(got, want.astype(got.dtype)):
        return [f"{name}: rank {me} holds {got[:8].tolist()}..., expected {want[:8].tolist()}..."]
    return []


def probe(backend: str, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1) -> list[str]:
    """On this rank of a tp x pp x dp (x cp, ep) job: every probe call through the replay's issuer, checked. Its
    failures."""
    from microbench.cluster.world import init_world

    world = init_world()
    layout = Layout(tp, pp, dp, cp, ep, 1, ep > 1)
    calls = probe_calls(layout)
    if backend == "mpi":
        from microbench.replay.issue_mpi import MpiIssuer

        issuer = MpiIssuer(world.MPI, world.MPI.COMM_WORLD, layout, world.rank, calls)
    else:
        from microbench.replay.issue_torch import TorchIssuer

        issuer = TorchIssuer(world, layout, world.rank, calls, "gloo", "cpu")
    failures = []
    for call in calls:
        failures += _check(call, issuer.issued(call), layout.group_of(world.rank, call.group), world.rank)
        issuer.barrier()
    # replay --check's verifier (issue 40) over the same calls: it must find every one right, as the checks above do
    from microbench.replay import verify

    log, wrong = verify.check(calls, issuer.issued, issuer.ran_on, layout, world.rank)
    failures += [f"replay --check: {line}" for line in wrong]
    if sum(e["calls"] for e in log) != len(calls):
        failures.append(f"replay --check logged {sum(e['calls'] for e in log)} calls of {len(calls)}")
    issuer.close()
    world.close()  # as replay does: torch's groups destroyed before exit (left to exit, gloo aborted once under load)
    return failures


if __name__ == "__main__":
    backend, tp, pp, dp, cp, ep = sys.argv[1], *map(int, sys.argv[2:7])
    print(json.dumps({"rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", 0)), "checked": len(probe_calls(
        Layout(tp, pp, dp, cp, ep, 1, ep > 1))), "failures": probe(backend, tp, pp, dp, cp, ep)}), flush=True)
    sys.exit(0)

import pytest  # noqa: E402  (the script above runs without pytest)

from conftest import mpiexec_prefix, run_process  # noqa: E402
from microbench.benchmarks import table  # noqa: E402
from microbench.errors import UsageError  # noqa: E402

TORCH = importlib.util.find_spec("torch") is not None
BACKENDS = ["mpi", pytest.param("torch", marks=pytest.mark.skipif(
    not TORCH, reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)"))]


#: (tp, pp, dp, cp, ep) -> group kinds of more than one rank, and shifts probed
PROBED_LAYOUTS = {(2, 1, 2, 1, 1): (2, 0), (1, 2, 2, 1, 1): (2, 2),
                  # tp 1, pp 1, dp 2, cp 2 and ep 2: dp, cp, dp_cp (4), ep, edp and tp_ep (ep x etp 1)
                  (1, 1, 2, 2, 2): (6, 2)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sizes", list(PROBED_LAYOUTS), ids=lambda s: "tp{}-pp{}-dp{}-cp{}-ep{}".format(*s))
def test_every_call_moves_each_ranks_data_to_its_layout_group(backend, sizes):
    cmd, env = mpiexec_prefix(4)
    result = run_process([*cmd, sys.executable, __file__, backend, *map(str, sizes)], timeout=240, env=env)
    assert result.returncode == 0, result.output
    ranks = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3], result.output
    kinds, shifts = PROBED_LAYOUTS[sizes]
    expected = kinds * (len(THROUGH_THE_TABLE) * 2 + len(SPLITS) * 2) + shifts
    assert all(r["checked"] == expected for r in ranks)
    assert [f for r in ranks for f in r["failures"]] == []


# ------------------------------------------------------------------------------------------------ in this process
@pytest.fixture(scope="module")
def mpi():
    """MPI initialised in this process as a one-rank job (Open MPI's singleton mode)."""
    os.environ.setdefault("OMPI_MCA_btl", "^ofi")
    os.environ.setdefault("OMPI_MCA_mtl", "^ofi")
    from microbench.cluster.mpi_runtime import import_mpi

    return import_mpi()


def _dispatcher(mpi, calls: list[Call]):
    from microbench.measure.backends.mpi import MPIBackend
    from microbench.replay.dispatch import Dispatcher
    from microbench.replay.pool import HostPool

    return Dispatcher({kind: MPIBackend(mpi.COMM_SELF, mpi) for kind in KINDS}, calls, HostPool)


def test_each_call_is_built_by_its_table_entry_or_its_posted_twin(mpi, monkeypatch):
    built = []
    for name in THROUGH_THE_TABLE:
        for entry in (table.COLLECTIVES[name], table.COLLECTIVES["i" + name]):
            def spy(be, b, c, entry=entry):
                built.append(entry.name)
                return entry.build(be, b, c)
            monkeypatch.setitem(table.COLLECTIVES, entry.name, dataclasses.replace(entry, build=spy))
    calls = [Call(c, BYTES, "dp", "gradients", posted) for c in THROUGH_THE_TABLE for posted in (False, True)]
    issued = _dispatcher(mpi, calls)
    for call in calls:
        done = issued(call)
        assert built[-1] == done.entry == ("i" if call.overlapped else "") + call.collective
        assert done.posted == call.overlapped and done.group_ranks == 1
        done.call()  # the real call on one rank
    assert len(built) == len(calls)
    allreduce = issued(calls[0]).buffers
    assert np.array_equal(allreduce.recv, allreduce.send)  # the sum over one rank


def test_a_collective_the_table_lacks_cannot_be_replayed(mpi, monkeypatch):
    monkeypatch.delitem(table.COLLECTIVES, "allgather")
    with pytest.raises(UsageError, match="cannot replay allgather blocking: the benchmark table has no entry"):
        _dispatcher(mpi, [Call("allgather", BYTES, "dp", "forward", False)])
    monkeypatch.delitem(table.COLLECTIVES, "ialltoall")
    blocking = Call("alltoall", BYTES, "dp", "forward", False)
    assert _dispatcher(mpi, [blocking])(blocking).entry == "alltoall"
    with pytest.raises(UsageError, match="cannot replay alltoall posted non-blocking"):
        _dispatcher(mpi, [dataclasses.replace(blocking, overlapped=True)])


def test_overlapped_calls_are_posted_and_waited_when_their_segment_ends(mpi):
    from microbench.measure.backends.nonblocking import NonBlocking
    from microbench.replay.execute import Executor

    steps = [Call("allreduce", 64, "dp", "gradients", True), Call("allreduce", 128, "dp", "gradients", True),
             Call("allgather", 64, "dp", "optimizer", False), Call("allreduce", 64, "dp", "gradients", True)]
    issued, events = _dispatcher(mpi, steps), []

    def logged(call: Call):
        done, what = issued(call), f"{call.collective} {call.bytes}"
        if not done.posted:
            return dataclasses.replace(done, call=lambda: (events.append(f"call {what}"), done.call()))
        nb = done.call
        return dataclasses.replace(done, call=NonBlocking(lambda: (events.append(f"post {what}"), nb.post())[1],
                                                          nb.test, lambda h: (events.append(f"wait {what}"),
                                                                              nb.wait(h))))

    executor = Executor(logged, steps)
    times = executor.iteration()
    assert events == ["post allreduce 64", "post allreduce 128", "wait allreduce 64", "wait allreduce 128",
                      "call allgather 64", "post allreduce 64", "wait allreduce 64"]
    assert set(times.per_call_s) == {("allreduce", "dp", 64, ""), ("allreduce", "dp", 128, ""),
                                     ("allgather", "dp", 64, "")}  # Call.key: no split
    assert times.wall_s >= sum(times.per_call_s.values())
    counted = executor.issued_calls()
    reduced = counted[("allreduce", "dp", 64, "")]
    assert reduced.calls == 2 and reduced.entries == {"iallreduce"}
    assert counted[("allgather", "dp", 64, "")].entries == {"allgather"}
    events.clear()
    executor.iteration(compute_only=True)
    assert events == []  # compute-only iterations issue nothing


def test_the_check_finds_results_that_are_not_the_groups_the_schedule_names(mpi):
    """``replay --check``'s verifier (issue 40) on a real one-rank MPI: every collective, blocking and posted, on the
    communicator of the one rank the schedule names is right; where the schedule names a group of ranks (0, 1) but
    the call ran on rank 0 alone, each reduction lacks rank 1's data and each gather its block: the elements are
    reported wrong even when the communicator claims both ranks, and the communicator's ranks are reported when it
    says it holds rank 0 only."""
    from microbench.benchmarks import checkdata
    from microbench.replay import verify

    assert np.array_equal(verify.data(5, 3, 200), checkdata.data(5, 3, 200))  # run --check's values, made faster
    calls = [Call(c, BYTES, "dp", "forward", posted) for c in THROUGH_THE_TABLE for posted in (False, True)]
    calls.append(Call("alltoallv", BYTES, "dp", "forward", False, parse(SPLITS[0])))
    issued = _dispatcher(mpi, calls)
    log, failures = verify.check(calls, issued, lambda kind: (0,), Layout(dp=1), 0)
    assert failures == [] and sum(e["calls"] for e in log) == len(calls)
    assert all(e["group_ranks"] == [0] and e["wrong_elements"] == 0 for e in log)

    _, failures = verify.check(calls, issued, lambda kind: (0, 1), Layout(dp=2), 0)  # the data alone betrays it
    wrong = {line.split(" (")[0].split()[-1] for line in failures if "element(s) wrong" in line
             or "were expected" in line}
    assert wrong == {"allreduce", "reduce", "allgather", "reduce_scatter", "alltoall", "alltoallv"}, failures
    assert len(failures) == len(calls) - 2  # broadcast, blocking and posted: rank 0 is its root, its data is right
    _, failures = verify.check(calls, issued, lambda kind: (0,), Layout(dp=2), 0)
    assert len(failures) == len(calls) and all("ran on world ranks [0]" in f for f in failures)

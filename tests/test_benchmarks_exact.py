"""The benchmark table, its check data, element types and workload sizes, exact and in-process (issue 40: these
kill the mutants of microbench/benchmarks/ that the launched tests of test_collectives.py do not reach in time;
docs/mutation-testing.md).

The check data is exercised against a reference of each collective written here in numpy over four simulated
ranks: every rank's verify finds nothing wrong after the reference moved the data, exactly one mismatch after one
element is spoiled, and something wrong where the call wrote nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from microbench.benchmarks import checkdata as cd
from microbench.benchmarks import dtypes, table
from microbench.benchmarks.base import (
    COLLECTIVE_COUNTS,
    LARGE_MESSAGE_BYTES,
    LATENCY_COUNTS,
    STREAM_COUNTS,
    Buffers,
    Context,
    Counts,
)
from microbench.benchmarks.splits import UNIFORM
from microbench.benchmarks.splits import parse as parse_splits
from microbench.benchmarks.table import COLLECTIVES
from microbench.benchmarks.workload_sizes import sizes_for_benchmarks
from microbench.errors import UsageError

N = 4  #: simulated ranks


# ------------------------------------------------------------------------------ the table's definitions
#: name -> (busbw factor at 4 ranks, at 8, S of 1000 B at 4 ranks, buffer counts of 8 elements at 4 ranks,
#:          in-place counts, recorded counts, latencies per iteration at window 64, min ranks, count multiple at 4)
DEFS = {
    "allreduce": (1.5, 1.75, 1000, (8, 8), (0, 8), (8, 8), 1, 1, 1),
    "reduce": (1.0, 1.0, 1000, (8, 8), (0, 8), (8, 8), 1, 1, 1),
    "allgather": (0.75, 0.875, 4000, (8, 32), (0, 32), (8, 32), 1, 1, 1),
    "reduce_scatter": (0.75, 0.875, 1000, (8, 2), (0, 8), (8, 2), 1, 1, 4),
    "broadcast": (1.0, 1.0, 1000, (8, 0), None, (8, 8), 1, 1, 1),
    "alltoall": (0.75, 0.875, 4000, (32, 32), None, (32, 32), 1, 1, 1),
    "latency": (1.0, 1.0, 1000, (8, 8), None, (8, 8), 2, 2, 1),
    "bw": (1.0, 1.0, 1000, (8, 8), None, (8, 8), 64, 2, 1),
    "bibw": (1.0, 1.0, 2000, (8, 8), None, (8, 8), 64, 2, 1),
    "alltoallv": (0.75, 0.875, 1000, (8, 8), None, (8, 8), 1, 1, 1),
}


@pytest.mark.parametrize("name", list(DEFS))
def test_each_entry_s_definitions(name):
    for coll in (COLLECTIVES[name], COLLECTIVES.get("i" + name)):
        if coll is None:
            continue
        factor4, factor8, s, counts, in_place, io, per_it, min_ranks, multiple = DEFS[name]
        assert (coll.busbw_factor(4), coll.busbw_factor(8), coll.algbw_bytes(1000, 4)) == (factor4, factor8, s)
        assert coll.buffer_counts(8, 4) == counts
        assert (coll.in_place_counts(8, 4) if coll.in_place_counts else None) == in_place
        assert (coll.io_counts or coll.buffer_counts)(8, 4) == io
        assert (coll.per_iteration(64), coll.min_ranks, coll.count_multiple(4)) == (per_it, min_ranks, multiple)
        assert coll.in_place_ok == (in_place is not None)


def test_the_table_s_flags_and_calls():
    c = COLLECTIVES
    assert list(c) == ["allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw", "reduce", "alltoall",
                       "bibw", "iallreduce", "iallgather", "ireduce_scatter", "ibroadcast", "ireduce", "ialltoall",
                       "alltoallv", "ialltoallv"]
    assert table.BLOCKING == ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw", "reduce",
                              "alltoall", "bibw", "alltoallv")
    assert [n for n, e in c.items() if e.nonblocking] == [n for n in c if n.startswith("i")]
    assert [n for n, e in c.items() if e.reduces] == ["allreduce", "reduce_scatter", "reduce", "iallreduce",
                                                      "ireduce_scatter", "ireduce"]
    assert [n for n, e in c.items() if e.rooted] == ["broadcast", "reduce", "ibroadcast", "ireduce"]
    assert [n for n, e in c.items() if e.point_to_point] == ["latency", "bw", "bibw"]
    assert [n for n, e in c.items() if e.windowed] == ["bw", "bibw"]
    assert {n: e.pair_metric for n, e in c.items() if e.pair_metric} == {"latency": "latency", "bw": "bandwidth"}
    assert {n: e.directions for n, e in c.items() if e.directions != 1} == {"bibw": 2}
    assert [n for n, e in c.items() if e.splits is not None] == ["alltoallv", "ialltoallv"]
    assert {n for n, e in c.items() if e.default_dtype == "float32"} == {n for n, e in c.items() if e.reduces}
    assert {n: e.counts for n, e in c.items() if e.counts != COLLECTIVE_COUNTS} == {
        "latency": LATENCY_COUNTS, "bw": STREAM_COUNTS, "bibw": STREAM_COUNTS}
    assert table.MPI_CALLS == {"allreduce": "MPI_Allreduce", "allgather": "MPI_Allgather",
                               "reduce_scatter": "MPI_Reduce_scatter_block", "broadcast": "MPI_Bcast",
                               "pingpong": "MPI_Send/MPI_Recv", "stream": "MPI_Isend/MPI_Irecv",
                               "reduce": "MPI_Reduce", "alltoall": "MPI_Alltoall", "alltoallv": "MPI_Alltoallv"}
    assert [c["i" + n].mpi_call for n in ("allreduce", "reduce_scatter", "broadcast", "alltoallv")] == [
        "MPI_Iallreduce", "MPI_Ireduce_scatter_block", "MPI_Ibcast", "MPI_Ialltoallv"]
    assert [c["i" + n].primitive for n in ("allreduce", "broadcast")] == ["iallreduce", "ibroadcast"]
    assert table.DEFAULT_BENCHMARKS == ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw")
    assert (table.PAIRS, table.BISECT, table.POISON) == ("pairs", "bisect", 0)
    assert "(--splits: uniform, zipf:S, hot:K, file)" in c["alltoallv"].summary
    assert c["iallreduce"].summary.startswith("MPI_Iallreduce / all_reduce(async_op=True): posted, overlapped")


def test_iteration_counts_as_omb():
    assert LARGE_MESSAGE_BYTES == 8192
    assert (COLLECTIVE_COUNTS.at(8192), COLLECTIVE_COUNTS.at(8193)) == ((1000, 100), (100, 10))
    assert (LATENCY_COUNTS.small, LATENCY_COUNTS.large) == ((10000, 100), (1000, 10))
    assert (STREAM_COUNTS.small, STREAM_COUNTS.large) == ((100, 10), (20, 2))
    assert Counts((1, 2), (3, 4)).at(0) == (1, 2)


def test_names_twins_and_pairs():
    assert table.benchmark_key("Reduce-Scatter") == "reduce_scatter" == table.benchmark_key("REDUCE_SCATTER")
    assert table.benchmark_key("Pairs", also=("pairs",)) == "pairs"
    with pytest.raises(UsageError, match=r"unknown benchmark 'pairs': choose from allreduce, allgather, .*ialltoallv$"):
        table.benchmark_key("pairs")
    with pytest.raises(UsageError, match=r"choose from allreduce, .*ialltoallv, pairs, bisect$"):
        table.benchmark_key("nope", also=("pairs", "bisect"))
    assert table.get_collective("All-Gather".replace("-", "")) is COLLECTIVES["allgather"]
    assert table.posted_twin(COLLECTIVES["reduce"]) is COLLECTIVES["ireduce"]
    assert table.nonblocking_mpi_call("MPI_Bcast") == "MPI_Ibcast"
    assert table.pair_metric_benchmark("latency").name == "latency"
    assert table.pair_metric_benchmark("bandwidth").name == "bw"
    assert [table.pair_of(r, 5) for r in range(5)] == [(2, True), (3, True), (0, False), (1, False), (None, False)]
    assert [table.pair_of(r, 2) for r in range(2)] == [(1, True), (0, False)]
    lat, ar = COLLECTIVES["latency"], COLLECTIVES["allreduce"]
    assert table.participates(lat, Context(0, 4, peer=2, initiator=True))
    assert not table.participates(lat, Context(2, 4, peer=0, initiator=False))
    assert not table.participates(lat, Context(4, 5, peer=None, initiator=True))
    assert table.participates(ar, Context(3, 4))


def test_splits_bind_into_alltoallv_only():
    assert table.with_splits(COLLECTIVES["allreduce"], UNIFORM, 4) is COLLECTIVES["allreduce"]
    zipf = parse_splits("zipf:1.5")
    bound = table.with_splits(COLLECTIVES["alltoallv"], zipf, 4)
    twin = table.with_splits(COLLECTIVES["ialltoallv"], zipf, 4)
    assert (bound.name, bound.splits, bound.nonblocking, twin.name, twin.splits, twin.nonblocking) == (
        "alltoallv", zipf, False, "ialltoallv", zipf, True)
    d = zipf.describe(1000 // 4, 4)
    assert bound.algbw_bytes(1000, 4) == 4 * max(d["send_max"], d["recv_max"])
    assert bound.buffer_counts(250, 4) == (d["send_max"], d["recv_max"])
    assert f"(--splits {zipf.text})" in bound.summary


def test_check_max_value():
    assert [COLLECTIVES["allreduce"].check_max_value(op, 7) for op in ("sum", "max", "min")] == [8, 2, 2]
    assert COLLECTIVES["allgather"].check_max_value("sum", 7) == 62


# ------------------------------------------------------------------------------ the check data
def test_data_stays_in_1_to_62_and_tells_sources_iterations_and_destinations_apart():
    assert cd.POISON == 0
    every = cd.data(0, 0, 61)
    assert sorted(every.tolist()) == list(range(1, 62)) and every.dtype == np.int64
    assert cd.data(3, 2, 4, offset=5, salt=1).tolist() == [(3 * 7 + 13 + 6 + i) % 61 + 1 for i in (5, 6, 7, 8)]
    base = cd.data(1, 1, 8)
    for other in (cd.data(2, 1, 8), cd.data(1, 2, 8), cd.data(1, 1, 8, salt=1), cd.data(1, 1, 8, offset=1)):
        assert np.all(other != base)
    assert max(cd.check_max_value(r, op, 3) for r in (True, False) for op in ("sum", "max")) == 62


@pytest.mark.parametrize("op, result", [("sum", N + 1), ("max", 2), ("min", 1)])
def test_reduction_inputs_reduce_to_the_known_result(op, result):
    inputs = np.array([cd.reduction_input(r, N, 3, 10, op) for r in range(N)])
    assert set(np.unique(inputs).tolist()) == {1, 2}
    reduced = {"sum": inputs.sum(0), "max": inputs.max(0), "min": inputs.min(0)}[op]
    assert reduced.tolist() == [result] * 10 == [cd.reduction_result(N, op)] * 10
    # element i is the odd one on rank (i - it) mod n: iterations differ
    assert (cd.reduction_input(0, N, 3, 10, op) != cd.reduction_input(0, N, 4, 10, op)).any()
    assert cd.reduction_input(1, N, 3, 4, "sum").tolist() == [2, 1, 1, 1]


def _buffers(coll, count, in_place):
    s, r = (coll.in_place_counts if in_place else coll.buffer_counts)(count, N)
    arr = lambda k: np.full(k, 99, dtype=np.int64)  # noqa: E731 - neither poison nor data
    return [Buffers(None if in_place else arr(s), arr(r), None) for _ in range(N)]


def _contexts(op="sum", in_place=False, root=1, at_rank=False):
    out = []
    for r in range(N):
        peer, initiator = table.pair_of(r, N)
        out.append(Context(r, N, op=op, root=root, in_place=in_place, peer=peer, initiator=initiator,
                           result_at_rank=at_rank))
    return out


def _move(name, bufs, ctxs, op, in_place, at_rank):
    """The collective itself, in numpy: what each rank's buffers hold after the call."""
    inputs = [b.recv if in_place else b.send for b in bufs]
    reduce = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    if name in ("allreduce", "reduce", "reduce_scatter"):
        result = reduce(np.array([x.copy() for x in inputs]), axis=0)
        for r, b in enumerate(bufs):
            if name == "allreduce" or (name == "reduce" and r == ctxs[r].root):
                b.recv[...] = result
            elif name == "reduce_scatter":
                block = len(result) // N
                mine = result[r * block:(r + 1) * block]
                start = r * block if (in_place and at_rank) else 0
                b.recv[start:start + block] = mine
    elif name == "allgather":
        block = len(bufs[0].recv) // N
        blocks = [(b.recv[r * block:(r + 1) * block] if in_place else b.send).copy() for r, b in enumerate(bufs)]
        for b in bufs:
            b.recv[...] = np.concatenate(blocks)
    elif name == "broadcast":
        root = bufs[ctxs[0].root].send.copy()
        for b in bufs:
            b.send[...] = root
    elif name == "alltoall":
        block = len(bufs[0].send) // N
        sent = [b.send.copy() for b in bufs]
        for dst, b in enumerate(bufs):
            b.recv[...] = np.concatenate([sent[src][dst * block:(dst + 1) * block] for src in range(N)])
    else:  # point to point: latency and bibw both ways, bw from the initiator to its peer
        sent = [b.send.copy() for b in bufs]
        for r, c in enumerate(ctxs):
            if c.peer is not None and (name != "bw" or not c.initiator):
                bufs[r].recv[...] = sent[c.peer]


CASES = [(n, op, False, False) for n in ("allreduce", "reduce", "reduce_scatter") for op in ("sum", "max", "min")]
CASES += [(n, "sum", True, False) for n in ("allreduce", "reduce", "reduce_scatter", "allgather")]
CASES += [("reduce_scatter", "sum", True, True)]
CASES += [(n, "sum", False, False) for n in ("allgather", "broadcast", "alltoall", "latency", "bw", "bibw")]


def _outputs(name, bufs, ctxs, in_place, at_rank):
    """(rank, the array its verify reads, the slice of it the call writes), for every rank that checks one."""
    out = []
    for r, (b, c) in enumerate(zip(bufs, ctxs)):
        if name == "broadcast":
            if r != c.root:
                out.append((r, b.send, slice(None)))
        elif name == "reduce" and r != c.root:
            continue
        elif name in ("latency", "bw", "bibw") and (c.peer is None or (name == "bw" and c.initiator)):
            continue
        elif name == "reduce_scatter" and in_place:
            block = len(b.recv) // N
            start = r * block if at_rank else 0
            out.append((r, b.recv, slice(start, start + block)))
        else:
            out.append((r, b.recv, slice(None)))
    return out


@pytest.mark.parametrize("name, op, in_place, at_rank", CASES)
def test_the_check_passes_a_right_result_and_counts_each_wrong_element(name, op, in_place, at_rank):
    coll = COLLECTIVES[name]
    ctxs = _contexts(op, in_place, at_rank=at_rank)
    for it in (0, 5):
        bufs = _buffers(coll, 8, in_place)
        for b, c in zip(bufs, ctxs):
            coll.fill(b, c, it)
        written = _outputs(name, bufs, ctxs, in_place, at_rank)
        for r, array, part in written:  # before the call: poisoned, so a call that writes nothing fails
            if in_place:  # the input itself, never the result
                assert coll.verify(bufs[r], ctxs[r], it) > 0, (r, array)
            else:
                assert coll.verify(bufs[r], ctxs[r], it) == len(array[part]) > 0, (r, array)
                assert np.all(array[part] == cd.POISON)
        _move(name, bufs, ctxs, op, in_place, at_rank)
        assert [coll.verify(b, c, it) for b, c in zip(bufs, ctxs)] == [0] * N
        if not coll.reduces:  # a reduction's result is the same every iteration; moved data is not
            assert all(coll.verify(bufs[r], ctxs[r], it + 1) > 0 for r, _, _ in written)
        for r, array, part in written:
            region = array[part]
            region[-1] = 63  # no check value
            assert coll.verify(bufs[r], ctxs[r], it) == 1, (name, r)
            region[0] = 63
            assert coll.verify(bufs[r], ctxs[r], it) == (2 if len(region) > 1 else 1), (name, r)


def test_ranks_that_check_nothing_report_nothing():
    bufs = _buffers(COLLECTIVES["latency"], 8, False)
    assert cd.p2p_verify(bufs[0], Context(4, 5, peer=None), 0) == 0
    cd.p2p_fill(bufs[0], Context(4, 5, peer=None), 0)
    assert bufs[0].send.tolist() == [99] * 8 and bufs[0].recv.tolist() == [99] * 8
    assert cd.stream_verify(bufs[0], Context(0, 4, peer=2, initiator=True), 0) == 0
    assert cd.reduce_verify(bufs[0], Context(0, 4, root=1), 0) == 0
    assert cd.broadcast_verify(bufs[0], Context(1, 4, root=1), 0) == 0


def test_alltoallv_blocks_in_rank_order_and_the_tail_left_poisoned():
    split = parse_splits("zipf:1.0")
    m = split.matrix(12, N)
    sends = [np.full(int(m[r].sum()) + 3, 99, np.int64) for r in range(N)]
    recvs = [np.full(int(m[:, r].sum()) + 2, 99, np.int64) for r in range(N)]
    ctxs = [Context(r, N) for r in range(N)]
    for r in range(N):
        cd.alltoallv_fill(Buffers(sends[r], recvs[r]), ctxs[r], 2, m)
        assert sends[r][-3:].tolist() == [99] * 3 and recvs[r].tolist() == [0] * len(recvs[r])
    offsets = [np.concatenate([[0], np.cumsum(m[r])]) for r in range(N)]
    for dst in range(N):
        got = np.concatenate([sends[src][offsets[src][dst]:offsets[src][dst + 1]] for src in range(N)])
        recvs[dst][:len(got)] = got
    assert [cd.alltoallv_verify(Buffers(sends[r], recvs[r]), ctxs[r], 2, m) for r in range(N)] == [0] * N
    recvs[1][-1] = 7  # past the received blocks: must stay poisoned
    assert cd.alltoallv_verify(Buffers(sends[1], recvs[1]), ctxs[1], 2, m) == 1
    coll = table.with_splits(COLLECTIVES["alltoallv"], split, 1)
    b = Buffers(np.zeros(int(m[0].sum()), np.int64), np.zeros(int(m[:, 0].sum()), np.int64))
    coll.fill(b, ctxs[0], 2)
    assert b.send.tolist() == sends[0][:len(b.send)].tolist()


# ------------------------------------------------------------------------------ element types
def test_element_types():
    assert {n: (d.itemsize, d.exact_int_limit) for n, d in dtypes.DTYPES.items()} == {
        "float32": (4, 2 ** 24), "float64": (8, 2 ** 53), "float16": (2, 2 ** 11), "bfloat16": (2, 2 ** 8),
        "int32": (4, 2 ** 31 - 1), "int64": (8, 2 ** 63 - 1), "int8": (1, 127), "uint8": (1, 255)}
    for d in dtypes.DTYPES.values():
        if d.numpy is not None:
            assert d.numpy.itemsize == d.itemsize and (d.name == "bfloat16" or d.numpy == np.dtype(d.name))
    assert dtypes.DTYPES["float32"].numpy == np.dtype("float32")
    assert [dtypes.get_dtype(a).name for a in ("Float", "double", "HALF", "bf16", "fp16", "fp32", "fp64", "int",
                                               "char", "byte", "INT64")] == [
        "float32", "float64", "float16", "bfloat16", "float16", "float32", "float64", "int32", "int8", "uint8", "int64"]
    with pytest.raises(UsageError, match="unknown dtype 'quad': choose from float32, float64, float16, bfloat16, int32"):
        dtypes.get_dtype("quad")
    assert dtypes.OPS == ("sum", "max", "min")


# ------------------------------------------------------------------------------ workload sizes
def _workload(tmp_path, doc, name="w.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_sizes_a_workload_asks_for(tmp_path):
    msgs = [{"collective": "allreduce", "bytes": 64}, {"collective": "allreduce", "bytes": 8},
            {"collective": "send", "bytes": 1}, {"collective": "recv", "bytes": 16},
            {"collective": "allreduce", "bytes": 64}, {"collective": "alltoallv", "bytes": 32}]
    assert sizes_for_benchmarks(_workload(tmp_path, {"messages": msgs})) == {
        "allreduce": [8, 64], "alltoallv": [32], "latency": [1, 16]}
    sweep = {"sweep": [{"messages": msgs[:2]}, {"messages": [{"collective": "broadcast", "bytes": 5}]}]}
    assert sizes_for_benchmarks(_workload(tmp_path, sweep, "s.json")) == {"allreduce": [8, 64], "broadcast": [5]}


@pytest.mark.parametrize("doc, why", [
    ({"messages": []}, "the workload has no messages"),
    ({"sweep": []}, "the workload has no messages"),
    ({"messages": [3]}, "message 0 is not an object"),
    ({"messages": [{"collective": "allreduce", "bytes": 8}, {"collective": "scan", "bytes": 8}]},
     "message 1 has an unknown collective 'scan'"),
    ({"messages": [{"collective": "allreduce", "bytes": 0}]}, "message 0 has bytes 0, not a whole number of bytes >= 1"),
    ({"messages": [{"collective": "allreduce", "bytes": True}]}, "has bytes True"),
    ({"messages": [{"collective": "allreduce", "bytes": 1.5}]}, "has bytes 1.5"),
    ({"sweep": [{"messages": []}, {"no": 1}]}, 'a sweep point has no "messages" list'),
    ({"sweep": [5]}, 'a sweep point has no "messages" list'),
    ([], 'not a workload file (no "messages" list'),
    ({"messages": {}}, 'not a workload file'),
    ("{", "not a JSON workload file"),
])
def test_bad_workload_files_are_one_line(tmp_path, doc, why):
    with pytest.raises(UsageError) as err:
        sizes_for_benchmarks(_workload(tmp_path, doc))
    assert why in str(err.value) and str(err.value).startswith(str(tmp_path)) and "\n" not in str(err.value)
    with pytest.raises(UsageError, match="cannot read workload file"):
        sizes_for_benchmarks(str(tmp_path / "absent.json"))


# ------------------------------------------------------------------------------ what each entry calls
class _Backend:
    """Records the primitive each entry's build calls, with its arguments."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, primitive):
        return lambda *args: self.calls.append((primitive, *args)) or primitive


def test_each_entry_calls_its_primitive_with_its_buffers_and_context():
    send, recv, ack = np.zeros(8), np.zeros(8), np.zeros(1)
    b = Buffers(send, recv, ack)
    out, inp = Context(1, 4, op="max", root=2), Context(1, 4, op="min", root=3, in_place=True)
    p2p = Context(0, 4, peer=2, initiator=True, window=16)
    expect = {
        "allreduce": [("allreduce", send, recv, "max"), ("allreduce", None, recv, "min")],
        "reduce": [("reduce", send, recv, "max", 2), ("reduce", None, recv, "min", 3)],
        "allgather": [("allgather", send, recv), ("allgather", None, recv)],
        "reduce_scatter": [("reduce_scatter", send, recv, "max"), ("reduce_scatter", None, recv, "min")],
        "broadcast": [("broadcast", send, 2), ("broadcast", send, 3)],
        "alltoall": [("alltoall", send, recv)] * 2,
    }
    for name, calls in expect.items():
        for coll in (COLLECTIVES[name], COLLECTIVES["i" + name]):
            be = _Backend()
            coll.build(be, b, out)
            coll.build(be, b, inp)
            want = [(("i" if coll.nonblocking else "") + c[0], *c[1:]) for c in calls]
            assert len(be.calls) == 2 and all(len(g) == len(w) for g, w in zip(be.calls, want)), name
            for got, w in zip(be.calls, want):
                assert got[0] == w[0] and all(x is y or x == y for x, y in zip(got[1:], w[1:])), (coll.name, got)
    be = _Backend()
    for name in ("latency", "bw", "bibw"):
        COLLECTIVES[name].build(be, b, p2p)
    assert [c[0] for c in be.calls] == ["pingpong", "stream", "stream"]
    assert be.calls[0][1:] == (send, recv, 2, True) and be.calls[1][3] is ack
    assert [c[4:] for c in be.calls[1:]] == [(2, True, 16, False), (2, True, 16, True)]  # bibw: both directions


def test_the_values_a_benchmark_is_built_from_are_immutable_and_have_defaults():
    c = Context(3, 8)
    assert (c.op, c.root, c.in_place, c.window, c.peer, c.initiator, c.result_at_rank) == (
        "sum", 0, False, 64, None, False, False)
    assert Buffers(None, None).ack is None
    for value, field in ((c, "rank"), (Buffers(None, None), "send"), (COLLECTIVES["bw"], "windowed")):
        with pytest.raises(AttributeError):
            setattr(value, field, 1)


def test_the_benchmark_table_imports_without_numpy():
    """The --np parent reads the table and never imports numpy (docs/startup.md): numpy is imported where the
    arrays are made."""
    import subprocess
    import sys

    code = ("import sys, microbench.benchmarks.table, microbench.benchmarks.dtypes, microbench.benchmarks.checkdata, "
            "microbench.benchmarks.workload_sizes; print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr


def test_bfloat16_without_ml_dtypes_has_no_numpy_type(monkeypatch):
    import sys

    dtypes._numpy_dtype.cache_clear()
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    try:
        assert dtypes.DTYPES["bfloat16"].numpy is None and dtypes.DTYPES["float16"].numpy == np.dtype("float16")
    finally:
        dtypes._numpy_dtype.cache_clear()

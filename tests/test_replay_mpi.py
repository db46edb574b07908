"""``microbench replay`` on real MPI ranks: each scheme's calls on its communicators, timed per iteration."""

import importlib.util
import json

import pytest

from conftest import microbench, mpiexec
from microbench.replay.schedule import calls
from microbench.workload.distribution import Workload
from microbench.workload.model import Model

MODEL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--seq", "64", "--vocab", "512"]
TINY = Model(256, 2, 4, 64, 512)
FAST = ["--warmup", "1", "--iterations", "2", "--json"]


def _replay(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_issued_as_scheduled(out: dict, schedule, sizes: dict) -> None:
    """The per-call rows say what was issued: each scheduled call once per iteration, through the table's entry its
    overlap names (a pipeline send as a shift; a recv twin: nothing), on a communicator of its group's size, with
    the entry's buffers per rank."""
    ranks = {kind: sizes.get(kind, 1) for kind in ("tp", "pp", "dp", "cp", "ep", "edp", "dp_cp")}
    rows = {(r["collective"], r["group"], r["bytes"], r.get("splits", "")): r for r in out["per_call"]}
    assert set(rows) == {c.key for c in schedule}
    for (collective, group, nbytes, split), row in rows.items():
        mine = [c for c in schedule if c.key == (collective, group, nbytes, split)]
        assert row["calls"] == len(mine)
        if collective == "recv":
            assert (row["issued"], row["issued_as"]) == (0, [])
            continue
        want = {"shift" if c.collective == "send" else ("i" if c.overlapped else "") + c.collective for c in mine}
        assert (row["issued"], set(row["issued_as"]), row["group_ranks"]) == (len(mine), want, ranks[group]), row
        if collective in ("allreduce", "reduce", "broadcast"):
            assert row["send_bytes"] == row["recv_bytes"] == max(nbytes // 4 * 4 if collective != "broadcast"
                                                                 else nbytes, 1), row
        elif collective == "allgather":
            assert (row["send_bytes"], row["recv_bytes"]) == (max(nbytes, 1), max(nbytes, 1) * ranks[group]), row
        elif collective == "alltoallv":  # the busiest sender's bytes, the busiest receiver's receive (its split's)
            d = mine[0].splits.describe(nbytes, ranks[group])
            assert (row["send_bytes"], row["recv_bytes"], row["splits"]) == (nbytes, d["recv_max"], split), row


SCHEMES_ON_FOUR = [("ddp", {"dp": 4}, {"dp"}), ("zero3", {"dp": 4}, {"dp"}), ("tp", {"tp": 2, "dp": 2}, {"tp", "dp"}),
                   ("pp", {"pp": 2, "dp": 2}, {"pp", "dp"})]
TORCH = importlib.util.find_spec("torch") is not None
BACKENDS = ["mpi", pytest.param("torch", marks=pytest.mark.skipif(
    not TORCH, reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme,sizes,groups", SCHEMES_ON_FOUR)
def test_four_ranks_replay_each_scheme_on_its_groups(scheme, sizes, groups, backend):
    flags = [x for k, v in sizes.items() for x in (f"--{k}", str(v))]
    out = _replay(microbench("replay", "--np", "4", "--backend", backend, *MODEL, "--scheme", scheme, *flags, *FAST))
    schedule = calls(Workload(TINY, scheme, **sizes))
    assert out["backend"] == ("mpi" if backend == "mpi" else "torch-gloo")
    assert out["calls_per_iteration"] == len(schedule)
    assert set(out["per_group_s"]) == groups
    assert set(out["per_collective_s"]) == {c.collective for c in schedule}
    assert out["iterations"] == 2
    assert 0 < out["wall_min_s"] <= out["wall_s"] <= out["wall_max_s"]
    assert all(v > 0 for v in out["per_group_s"].values())
    assert {r["what"] for r in out["comparison"]} >= {"total", *(f"group {g}" for g in groups)}
    assert_issued_as_scheduled(out, schedule, sizes)


#: issue 42: a mixture-of-experts layout (ep 4 over dp 4, zipf routing: all-to-all-v) and a context-parallel one
#: (cp 2 x dp 2: the ring's send/recv, gradients over dp x cp)
LLAMA = [*MODEL, "--family", "llama", "--kv-heads", "2", "--micro-batch", "1"]
LAYOUTS_ON_FOUR = [("moe", {"ep": 4, "dp": 4}, ["--experts", "8", "--top-k", "2", "--routing", "zipf:1.2"],
                    {"ep", "dp"}),
                   ("cp", {"cp": 2, "dp": 2}, [], {"cp", "dp_cp"})]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme,sizes,extra,groups", LAYOUTS_ON_FOUR, ids=["moe", "cp"])
def test_four_ranks_replay_an_moe_and_a_cp_layout_with_the_prediction_beside(scheme, sizes, extra, groups, backend):
    from microbench.benchmarks.splits import parse

    flags = [x for k, v in sizes.items() for x in (f"--{k}", str(v))]
    out = _replay(microbench("replay", "--np", "4", "--backend", backend, *LLAMA, "--scheme", scheme, *flags,
                             *extra, *FAST, timeout=300))
    moe = scheme == "moe"
    model = Model(256, 2, 4, 64, 512, family="llama", kv_heads=2, experts=8 if moe else 0, top_k=2 if moe else 0)
    schedule = calls(Workload(model, scheme, micro_batch=1, routing=parse("zipf:1.2" if moe else "uniform"), **sizes))
    assert out["calls_per_iteration"] == len(schedule) and set(out["per_group_s"]) == groups
    assert_issued_as_scheduled(out, schedule, {**sizes, "dp_cp": 4})
    if scheme == "moe":
        splits = {r["splits"] for r in out["per_call"] if r["collective"] == "alltoallv"}
        assert splits == {"zipf:1.2", "zipf:1.2/T"} and out["workload"]["routing"] == "zipf:1.2"
    else:
        assert {r["issued_as"][0] for r in out["per_call"] if r["collective"] == "send"} == {"shift"}
    predicted = out["prediction"]["per_group_s"]
    assert set(predicted) == groups and all(v > 0 for v in predicted.values())
    assert {r["what"] for r in out["comparison"]} >= {"total", *(f"group {g}" for g in groups)}


def test_two_ranks_under_mpiexec():
    out = _replay(mpiexec(2, "replay", *MODEL, "--scheme", "ddp", "--dp", "2", *FAST))
    assert out["workload"]["dp"] == 2 and out["per_collective_s"]["allreduce"] > 0


def test_a_layout_that_does_not_fill_the_job_is_one_error_line():
    result = microbench("replay", "--np", "4", *MODEL, "--scheme", "tp", "--tp", "2")
    assert result.returncode != 0
    assert "microbench: error: --tp 2 x --pp 1 x --dp 1 = 2 ranks, but the job has 4" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trace_replays_its_collectives_on_all_ranks(tmp_path):
    from conftest import REPO

    log = REPO / "tests" / "fixtures" / "workload" / "nccl_coll.log"
    out = _replay(microbench("replay", "--np", "2", "--trace", str(log), *FAST))
    # the log: 2 allreduce, 1 allgather, 1 reduce_scatter, 1 broadcast of 10 B (bytes, not float32 elements),
    # and a send/recv pair whose peer a tallied trace does not keep
    assert out["workload"] is None and out["calls_per_iteration"] == 5
    assert out["bytes_per_iteration"] == 2 * 4096 + 512 + 1024 + 10
    assert set(out["per_collective_s"]) == {"allreduce", "allgather", "reduce_scatter", "broadcast"}
    assert any("send/recv call(s) per iteration left out" in n for n in out["notes"])
    issued = {r["collective"]: (r["issued"], r["issued_as"], r["group_ranks"]) for r in out["per_call"]}
    assert issued["allreduce"] == (2, ["allreduce"], 2) and issued["broadcast"] == (1, ["broadcast"], 2)


def test_a_trace_and_a_model_together_are_one_error_line():
    result = microbench("replay", "--np", "2", "--trace", "x.log", *MODEL)
    assert result.returncode != 0 and "give a model or --trace, not both" in result.stderr
    assert "Traceback" not in result.stderr


def test_one_layer_of_a_13b_model_replays_on_four_ranks_and_says_so():
    out = _replay(microbench("replay", "--np", "4", "--model", "13B", "--layers", "1", "--seq", "128",
                             "--scheme", "tp", "--tp", "2", "--dp", "2", "--warmup", "1", "--iterations", "1",
                             "--json", timeout=300))
    assert out["workload"]["layers_replayed"] == 1 and out["workload"]["model_layers"] == 40
    assert "13B" in out["workload"]["model"] and out["bytes_per_iteration"] > 500e6


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", ["ddp", "zero3"])
def test_two_ranks_replay_the_data_parallel_schemes(scheme, backend):
    out = _replay(microbench("replay", "--np", "2", "--backend", backend, *MODEL, "--scheme", scheme, "--dp", "2",
                             *FAST))
    schedule = calls(Workload(TINY, scheme, dp=2))
    assert out["calls_per_iteration"] == len(schedule)
    assert set(out["per_group_s"]) == {"dp"} and out["per_group_s"]["dp"] > 0
    assert_issued_as_scheduled(out, schedule, {"dp": 2})

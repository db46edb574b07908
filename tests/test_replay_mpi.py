"""``microbench replay`` on real ranks (MPI, and torch.distributed's gloo): each scheme's calls on its communicators,
timed per iteration, and what the launch did checked (issue 40).

Every launch of a layout here runs with ``--check --out``: after the timed iterations the replay runs one
iteration's calls again with known data, and its record carries every rank's log of the calls it issued (the
collective, the table entry, the group kind, the world ranks of the communicator it ran on as the communicator
reports them, its buffers' bytes and element type) and how many elements of each result differed from what the
collective defines on the group the schedule names. The tests hold that log against what this file derives on its
own from the workload model's calls (``schedule.calls``) and the world ranks of each group written out here
(``Launch.world_groups``, Megatron-Core's order by hand): the calls in order and their counts per rank, their
sizes and element types, their groups, and the data landed where each call says. One launch per layout and
backend (a module-scoped fixture) serves every test of it.
"""

import importlib.util
import json
import shutil
from dataclasses import dataclass

import pytest

from conftest import Completed, microbench, mpiexec, read_jsonl, run_process
from microbench.benchmarks.splits import parse
from microbench.replay.schedule import SEGMENT_OF_PHASE, Call, calls
from microbench.workload.distribution import Workload
from microbench.workload.model import Model

MODEL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--seq", "64", "--vocab", "512"]
TINY = Model(256, 2, 4, 64, 512)
FAST = ["--warmup", "1", "--iterations", "2", "--json"]
#: issue 42: a Llama-style model for the mixture-of-experts and context-parallel layouts
LLAMA = [*MODEL, "--family", "llama", "--kv-heads", "2", "--micro-batch", "1"]
TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = ("PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu "
            "&& pip install ml_dtypes)")
BACKENDS = ["mpi", pytest.param("torch", marks=pytest.mark.skipif(not TORCH, reason=NO_TORCH))]


def _replay(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------------------------ the launches
#: the world ranks of every group of a layout, written out by hand (Megatron-Core's order: tp fastest, then cp,
#: dp, pp; the experts' generator etp, ep, edp, pp), not computed by the replay's layout code
DP4 = {"dp": [(0, 1, 2, 3)]}
TP2_DP2 = {"tp": [(0, 1), (2, 3)], "dp": [(0, 2), (1, 3)]}
PP2_DP2 = {"pp": [(0, 2), (1, 3)], "dp": [(0, 1), (2, 3)]}
EP2_DP4 = {"ep": [(0, 1), (2, 3)], "edp": [(0, 2), (1, 3)], "dp": [(0, 1, 2, 3)]}
CP2_DP2 = {"cp": [(0, 1), (2, 3)], "dp": [(0, 2), (1, 3)], "dp_cp": [(0, 1, 2, 3)]}


@dataclass(frozen=True)
class Launch:
    """One replay launch: its ranks, backend, scheme and layout, the group kinds its calls use, and the world ranks
    of each group."""

    ranks: int
    backend: str
    scheme: str
    sizes: dict
    world_groups: dict
    model: Model = TINY
    flags: tuple = ()
    routing: str = "uniform"
    micro_batch: int | None = None
    launcher: str = "np"  #: np: ``replay --np N``; mpiexec: ``mpiexec -n N`` (conftest); torchrun: its 2 workers
    timeout: int = 120

    def workload(self) -> Workload:
        more = {"micro_batch": self.micro_batch} if self.micro_batch else {}
        return Workload(self.model, self.scheme, routing=parse(self.routing), **more, **self.sizes)

    def arguments(self, out) -> list[str]:
        """The replay's arguments after the verb (no launcher, no backend), checked, its record in ``out``."""
        sizes = [x for k, v in self.sizes.items() for x in (f"--{k}", str(v))]
        model = LLAMA if self.micro_batch else MODEL
        return [*model, "--scheme", self.scheme, *sizes, *self.flags, *FAST, "--check", "--out", str(out)]

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        return next(g for g in self.world_groups[kind] if rank in g)


MOE = Model(256, 2, 4, 64, 512, family="llama", kv_heads=2, experts=8, top_k=2)
LLAMA_MODEL = Model(256, 2, 4, 64, 512, family="llama", kv_heads=2)


def _launches(backend: str) -> dict[str, Launch]:
    return {
        f"ddp-dp4-{backend}": Launch(4, backend, "ddp", {"dp": 4}, DP4),
        f"zero3-dp4-{backend}": Launch(4, backend, "zero3", {"dp": 4}, DP4),
        f"tp2-dp2-{backend}": Launch(4, backend, "tp", {"tp": 2, "dp": 2}, TP2_DP2),
        f"pp2-dp2-{backend}": Launch(4, backend, "pp", {"pp": 2, "dp": 2}, PP2_DP2),
        # issue 42: a mixture of experts (expert groups of 2 inside dp 4, zipf routing: all-to-all-v) and a
        # context-parallel ring (cp 2 x dp 2: the ring's send/recv, gradients over dp x cp)
        f"moe-ep2-dp4-{backend}": Launch(4, backend, "moe", {"ep": 2, "dp": 4}, EP2_DP4, MOE,
                                         ("--experts", "8", "--top-k", "2", "--routing", "zipf:1.2"), "zipf:1.2",
                                         micro_batch=1, timeout=300),
        f"cp2-dp2-{backend}": Launch(4, backend, "cp", {"cp": 2, "dp": 2}, CP2_DP2, LLAMA_MODEL, micro_batch=1,
                                     timeout=300),
    }


#: on 2 ranks: zero3 on MPI (gloo's 2-rank launch is ddp under torchrun: each torch launch takes 10 to 20 s here),
#: and ddp under each launcher instead of --np: plain mpiexec (MPI) and torchrun (torch.distributed)
LAUNCHES = {**_launches("mpi"), **_launches("torch"),
            "zero3-dp2-mpi": Launch(2, "mpi", "zero3", {"dp": 2}, {"dp": [(0, 1)]}),
            "ddp-dp2-mpiexec": Launch(2, "mpi", "ddp", {"dp": 2}, {"dp": [(0, 1)]}, launcher="mpiexec"),
            "ddp-dp2-torchrun": Launch(2, "torch", "ddp", {"dp": 2}, {"dp": [(0, 1)]}, launcher="torchrun",
                                       timeout=240)}


def _param(name: str):
    marks = [pytest.mark.skipif(not TORCH, reason=NO_TORCH)] if LAUNCHES[name].backend == "torch" else []
    return pytest.param(name, id=name, marks=marks)


@dataclass
class Replayed:
    launch: Launch
    out: dict  #: the summary --json printed
    record: dict  #: the replay record --out wrote
    result: Completed  #: the launch (exit 1: --check found wrong results)


@pytest.fixture(scope="module", params=[_param(name) for name in LAUNCHES])
def replayed(request, tmp_path_factory) -> Replayed:
    """One checked launch of a layout (``--check --out``), shared by every test of it."""
    launch = LAUNCHES[request.param]
    out = tmp_path_factory.mktemp("replay") / "replay.jsonl"
    if launch.launcher == "mpiexec":
        result = mpiexec(launch.ranks, "replay", *launch.arguments(out), timeout=launch.timeout)
    elif launch.launcher == "torchrun":
        exe = shutil.which("torchrun")
        assert exe, "torchrun is installed with torch"
        result = run_process([exe, f"--nproc-per-node={launch.ranks}", "--no-python", "microbench", "replay",
                              *launch.arguments(out)], timeout=launch.timeout)
    else:
        result = microbench("replay", "--np", str(launch.ranks), "--backend", launch.backend,
                            *launch.arguments(out), timeout=launch.timeout)
    # exit 1 with a record: --check found wrong results (the tests below say which); anything else ends here
    assert result.returncode == 0 or (result.returncode == 1 and out.exists()), result.output
    (record,) = read_jsonl(out)
    return Replayed(launch, json.loads(result.stdout), record, result)


# ------------------------------------------------------------------------------------------ what the schedule says
def issued_in_order(launch: Launch) -> list[Call]:
    """The calls one rank issues in an iteration, in order: the schedule's, each compute segment's calls together
    (segments in the order their first call comes, the calls of each in the schedule's order; docs/replay.md,
    "Overlap"), a pipeline or ring recv issuing nothing (its send's shift carries it)."""
    schedule = calls(launch.workload())
    first: dict[str, int] = {}
    for call in schedule:
        first.setdefault(SEGMENT_OF_PHASE.get(call.phase, call.phase), len(first))
    ordered = sorted(schedule, key=lambda c: first[SEGMENT_OF_PHASE.get(c.phase, c.phase)])
    return [c for c in ordered if c.collective != "recv"]


def entry_of(call: Call) -> str:
    """The table entry a call goes through: its collective, the non-blocking twin when overlapped; a send: shift."""
    return "shift" if call.collective == "send" else ("i" if call.overlapped else "") + call.collective


def buffers_of(call: Call, n: int) -> tuple[int, int, str]:
    """(send bytes, receive bytes, element type) of a call on n ranks, from its message size (docs/definitions.md:
    allgather a rank's block, reduce_scatter a rank's input, alltoall the block to each peer, alltoallv what the
    busiest rank sends): float32 for reductions, uint8 otherwise, at least one element, reduce_scatter a multiple
    of n; in place (torch's all_reduce, reduce) the one buffer counts on both sides."""
    b = max(call.bytes, 1)
    if call.collective in ("allreduce", "reduce"):
        return max(b // 4, 1) * 4, max(b // 4, 1) * 4, "float32"
    if call.collective == "reduce_scatter":
        count = max(b // 4 // n, 1) * n
        return count * 4, count * 4 // n, "float32"
    if call.collective == "allgather":
        return b, b * n, "uint8"
    if call.collective == "broadcast":
        return b, 0, "uint8"
    if call.collective == "alltoall":
        return b * n, b * n, "uint8"
    if call.collective == "alltoallv":
        d = call.splits.describe(b, n)
        return d["send_max"], d["recv_max"], "uint8"
    assert call.collective == "send", call
    return b, b, "uint8"


def logged(replayed: Replayed, rank: int) -> list[dict]:
    """Rank ``rank``'s checked calls, one entry per call (the record merges consecutive identical ones)."""
    (mine,) = [r for r in replayed.record["check"]["ranks"] if r["rank"] == rank]
    return [e for e in mine["calls"] for _ in range(e["calls"])]


# ------------------------------------------------------------------------------------------------ the tests
def test_each_rank_issued_the_schedules_calls_in_order_with_their_counts(replayed):
    launch, check = replayed.launch, replayed.record["check"]
    want = [(c.collective, entry_of(c), c.group) for c in issued_in_order(launch)]
    assert [r["rank"] for r in check["ranks"]] == list(range(launch.ranks))
    for rank in range(launch.ranks):
        got = [(e["collective"], e["issued_as"], e["group"]) for e in logged(replayed, rank)]
        assert got == want, (rank, got, want)
    assert check["calls_checked"] == launch.ranks * len(want)


def test_each_call_moved_the_schedules_bytes_in_its_element_type(replayed):
    launch = replayed.launch
    for rank in range(launch.ranks):
        want = [buffers_of(c, len(launch.group_of(rank, c.group))) for c in issued_in_order(launch)]
        got = [(e["send_bytes"], e["recv_bytes"], e["dtype"]) for e in logged(replayed, rank)]
        assert got == want, (rank, [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w][:5])


def test_each_call_ran_on_the_world_ranks_of_the_group_the_schedule_names(replayed):
    """E.g. tp 2 x dp 2: rank 0's tensor-parallel calls ran on ranks (0, 1), never with the other pair, and its
    data-parallel ones on (0, 2)."""
    launch = replayed.launch
    for rank in range(launch.ranks):
        for i, (call, entry) in enumerate(zip(issued_in_order(launch), logged(replayed, rank))):
            assert tuple(entry["group_ranks"]) == launch.group_of(rank, call.group), (rank, i, call, entry)


def test_the_data_landed_where_each_call_says(replayed):
    """The launch's own check (``replay --check``): every call's result is what its collective defines on the
    group the schedule names (a group's reduction, not the world's; every member's block in rank order; the
    rank's shard of the sum; the named peer's data for a shift), on every rank."""
    check = replayed.record["check"]
    assert (check["failures"], check["failed"]) == (0, []), check["failed"]
    assert replayed.result.returncode == 0, replayed.result.stderr
    assert all(e["wrong_elements"] == 0 for r in check["ranks"] for e in r["calls"])
    assert replayed.out["check"]["calls_checked"] == check["calls_checked"] > 0


def test_each_scheme_replays_on_its_groups_with_the_prediction_beside(replayed):
    launch, out = replayed.launch, replayed.out
    schedule = calls(launch.workload())
    groups = {c.group for c in schedule}
    assert out["backend"] == ("mpi" if launch.backend == "mpi" else "torch-gloo")
    assert out["calls_per_iteration"] == len(schedule) and out["iterations"] == 2
    assert set(out["per_group_s"]) == groups
    assert set(out["per_collective_s"]) == {c.collective for c in schedule}
    assert 0 < out["wall_min_s"] <= out["wall_s"] <= out["wall_max_s"]
    assert all(v > 0 for v in out["per_group_s"].values())
    predicted = out["prediction"]["per_group_s"]
    assert set(predicted) == groups and all(v > 0 for v in predicted.values())
    assert {r["what"] for r in out["comparison"]} >= {"total", *(f"group {g}" for g in groups)}
    assert_issued_as_scheduled(out, schedule, {k: len(v[0]) for k, v in launch.world_groups.items()})
    if launch.scheme == "moe":
        splits = {r["splits"] for r in out["per_call"] if r["collective"] == "alltoallv"}
        assert splits == {"zipf:1.2", "zipf:1.2/T"} and out["workload"]["routing"] == "zipf:1.2"
    if launch.scheme in ("cp", "pp"):
        assert {r["issued_as"][0] for r in out["per_call"] if r["collective"] == "send"} == {"shift"}
    if launch.launcher == "torchrun":  # torch.distributed by default there, no MPI
        assert replayed.record["launcher"] == "torchrun" and replayed.record["mpi"] is None
    elif launch.launcher == "mpiexec":
        assert replayed.record["launcher"] != "torchrun" and replayed.record["mpi"] is not None


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


def test_a_layout_that_does_not_fill_the_job_is_one_error_line():
    result = microbench("replay", "--np", "4", *MODEL, "--scheme", "tp", "--tp", "2")
    assert result.returncode != 0
    assert "microbench: error: --tp 2 x --pp 1 x --dp 1 = 2 ranks, but the job has 4" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trace_replays_its_collectives_on_all_ranks(tmp_path):
    from conftest import REPO

    log = REPO / "tests" / "fixtures" / "workload" / "nccl_coll.log"
    out = _replay(microbench("replay", "--np", "2", "--trace", str(log), *FAST, "--check"))
    # the log: 2 allreduce, 1 allgather, 1 reduce_scatter, 1 broadcast of 10 B (bytes, not float32 elements),
    # and a send/recv pair whose peer a tallied trace does not keep
    assert out["workload"] is None and out["calls_per_iteration"] == 5
    assert out["bytes_per_iteration"] == 2 * 4096 + 512 + 1024 + 10
    assert set(out["per_collective_s"]) == {"allreduce", "allgather", "reduce_scatter", "broadcast"}
    assert any("send/recv call(s) per iteration left out" in n for n in out["notes"])
    issued = {r["collective"]: (r["issued"], r["issued_as"], r["group_ranks"]) for r in out["per_call"]}
    assert issued["allreduce"] == (2, ["allreduce"], 2) and issued["broadcast"] == (1, ["broadcast"], 2)
    check = out["check"]  # the trace's calls on the one communicator of both ranks, each result right
    assert check["calls_checked"] == 2 * 5 and check["failures"] == 0
    assert {tuple(e["group_ranks"]) for r in check["ranks"] for e in r["calls"]} == {(0, 1)}


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

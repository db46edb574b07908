"""The replay's prediction: calls priced one by one, the overlap rule, extrapolation flags, and the rows
that set it against the replay with what the launch attributes a gap to."""

import json

import pytest

from conftest import microbench
from microbench.replay.calibrate import CallLatency
from microbench.replay.compare import comparison
from microbench.replay.layout import Layout
from microbench.replay.predict import Price, from_curves, from_latencies, predict
from microbench.replay.schedule import Call, Compute
from microbench.workload.weighting import Curve

AR = Call("allreduce", 1000, "dp", "gradients", True)
AG = Call("allgather", 100, "tp", "forward", False)


def flat(seconds):
    return lambda call: Price(0.0 if call.collective == "recv" else seconds, "measured")


def test_without_compute_every_call_is_serial():
    p = predict([AG, AG, AR, Call("send", 10, "pp", "forward", False), Call("recv", 10, "pp", "forward", False)],
                flat(0.002))
    assert p.communication_s == pytest.approx(0.008) and p.iteration_s == pytest.approx(0.008)
    assert p.per_collective_s == pytest.approx({"allgather": 0.004, "allreduce": 0.002, "send": 0.002, "recv": 0.0})
    assert p.per_group_s == pytest.approx({"tp": 0.004, "dp": 0.002, "pp": 0.002})
    assert p.priced == {"measured": 4}  # the recv twin is not a call of its own


def test_overlapped_calls_cost_only_what_their_segments_compute_cannot_hide():
    backward = Compute(0.001, "backward")
    steps = [Compute(0.003, "forward"), AG, backward, AR, backward, AR, backward]
    p = predict(steps, flat(0.002))
    # forward: 3 ms compute + 2 ms blocking; backward: 3 ms compute, 4 ms overlapped -> 1 ms shows
    assert p.compute_s == pytest.approx(0.006)
    assert p.iteration_s == pytest.approx(0.003 + 0.002 + 0.003 + 0.001)
    assert p.exposed_s == pytest.approx(0.003)


def test_same_launch_prices_each_exact_call_and_says_when_one_is_missing():
    price = from_latencies({("allreduce", "dp", 1000, ""): CallLatency(0.005, 0.009)})  # Call.key
    assert price(AR) == Price(0.005, "same launch")
    assert price(AG) == Price(0.0, "no curve")


def test_curves_price_between_and_outside_their_sizes_and_flag_it():
    curves = {("allreduce", 4): Curve("allreduce", 4, [1024, 4096], [10.0, 40.0], [None, None])}
    price, notes = from_curves(curves, Layout(dp=4))
    assert price(Call("allreduce", 2048, "dp", "gradients", False)).how == "interpolated"
    assert price(Call("allreduce", 2048, "dp", "gradients", False)).seconds == pytest.approx(20e-6)
    above = price(Call("allreduce", 8192, "dp", "gradients", False))
    assert above.how == "above" and above.seconds == pytest.approx(80e-6)  # bandwidth held
    p = predict([Call("allreduce", 8192, "dp", "gradients", False), Call("allreduce", 1024, "dp", "gradients", False)],
                price)
    assert p.outside_s == pytest.approx({"total": 80e-6, "allreduce": 80e-6, "group dp": 80e-6})
    assert price(AG).how == "no curve" and any("no allgather curve" in n for n in notes)


def _measured(**over):
    base = {"wall_s": 0.010, "first_iteration_s": 0.030, "exposed_communication_s": 0.010,
            "per_collective_s": {"allreduce": 0.010}, "per_group_s": {"dp": 0.010},
            "per_call": [{"collective": "allreduce", "group": "dp", "bytes": 1000, "calls": 2, "overlapped": True,
                          "isolated_s_per_call": 0.0025, "concurrent_s_per_call": 0.005}]}
    return {**base, **over}


PREDICTED = {"iteration_s": 0.005, "exposed_s": 0.005, "per_collective_s": {"allreduce": 0.005},
             "per_group_s": {"dp": 0.005}, "outside_s": {"total": 0.004, "allreduce": 0.004, "group dp": 0.004}}
CONTEXT = {"overlapped_groups": ["dp"], "groups": ["dp"], "group_counts": {"tp": 1, "pp": 1, "dp": 2},
           "compute": False, "ranks_per_host": 2, "cores": 2}


def test_rows_carry_the_ratio_and_what_the_launch_measured_behind_a_gap():
    rows = {r["what"]: r for r in comparison(PREDICTED, _measured(), CONTEXT)}
    assert list(rows) == ["total", "allreduce", "group dp", "first iteration"]
    assert rows["total"]["ratio"] == pytest.approx(2.0)
    why = " ".join(rows["allreduce"]["explained_by"])
    assert "80% of its predicted time priced outside the curve" in why
    assert "2.00x per call against one group at a time" in why
    assert "2 call(s) posted non-blocking and in flight together" in why
    assert "first iteration took +20.000 ms" in rows["first iteration"]["explained_by"][0]


def test_a_row_within_the_threshold_is_not_explained_and_an_unexplained_gap_says_so():
    close = comparison(PREDICTED, _measured(wall_s=0.0055, per_collective_s={"allreduce": 0.0055},
                                            per_group_s={"dp": 0.0055}, first_iteration_s=0.0055), CONTEXT)
    assert all(r["explained_by"] == [] for r in close)
    bare = {**PREDICTED, "outside_s": {}}
    measured = _measured(per_call=[{**_measured()["per_call"][0], "concurrent_s_per_call": 0.0025,
                                    "overlapped": False}])
    rows = {r["what"]: r for r in comparison(bare, measured, {**CONTEXT, "overlapped_groups": []})}
    assert rows["total"]["explained_by"] == ["not explained by what the replay measures"]


MODEL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--seq", "64", "--vocab", "512"]


@pytest.mark.parametrize("scheme,sizes", [("ddp", ["--dp", "4"]), ("tp", ["--tp", "2", "--dp", "2"]),
                                          ("pp", ["--pp", "2", "--dp", "2"])])
def test_a_four_rank_replay_sets_its_prediction_beside_it(scheme, sizes):
    result = microbench("replay", "--np", "4", *MODEL, "--scheme", scheme, *sizes, "--iterations", "2", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    rows = {r["what"]: r for r in out["comparison"]}
    assert rows["total"]["predicted_s"] > 0 and rows["total"]["ratio"] > 0
    assert {k for k in rows if k.startswith("group ")} == {f"group {g}" for g in out["per_group_s"]}
    assert out["prediction"]["priced"] == {"same launch": sum(c["calls"] for c in out["per_call"]
                                                              if c["collective"] != "recv")}
    for row in out["comparison"]:
        off = row["ratio"] is not None and abs(row["ratio"] - 1) > out["comparison_threshold"]
        assert bool(row["explained_by"]) == off, row


def test_results_of_a_sweep_price_the_prediction(tmp_path):
    records = tmp_path / "sweep.jsonl"
    run = microbench("run", "--np", "2", "allreduce", "-m", "1K:64K", "-i", "20", "-x", "2", "--out", str(records))
    assert run.returncode == 0, run.stderr
    result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2", "--iterations", "2",
                        "--results", str(records), "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["prediction"]["source"].startswith("--results")
    # DDP's gradient buckets are larger than 64 KiB: priced above the curve, flagged and attributed
    assert out["prediction"]["priced"].get("above", 0) > 0
    assert out["prediction"]["outside_s"]["total"] > 0


def test_results_without_records_are_one_error_line(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2", "--results", str(empty))
    assert result.returncode != 0 and "no result records in" in result.stderr and "Traceback" not in result.stderr


def test_out_appends_a_replay_record_that_the_schema_and_the_gate_readers_accept(tmp_path):
    from microbench.records.validate import file_problems

    out = tmp_path / "replay.jsonl"
    for _ in range(2):
        result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2", "--iterations", "2",
                            "--out", str(out))
        assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["type"] for r in records] == ["replay", "replay"] and records[0]["run_id"] != records[1]["run_id"]
    assert records[0]["ranks"] == 2 and sum(records[0]["ranks_per_host"].values()) == 2
    assert records[0]["workload"]["scheme"] == "ddp" and records[0]["comparison"][0]["what"] == "total"
    assert file_problems(out) == []
    history = microbench("history", str(out))  # a file of replay records only: nothing to judge, no traceback
    assert "Traceback" not in history.stderr and "another tool" not in history.stderr


def test_out_behaves_as_run_out_missing_folders_made_an_unwritable_path_one_error_line(tmp_path):
    out = tmp_path / "missing" / "deeper" / "r.jsonl"
    result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2", "--iterations", "1",
                        "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["type"] for line in out.read_text().splitlines()] == ["replay"]
    # the same words as run --out, from rank 0 on every rank's behalf, before anything is replayed
    result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2",
                        "--out", "/proc/microbench/r.jsonl")
    errors = [line for line in result.stderr.splitlines() if line.startswith("microbench: error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "--out /proc/microbench/r.jsonl: cannot write there" in errors[0]
    assert "replay:" not in result.stdout and "Traceback" not in result.stderr


def test_an_all_to_all_v_is_priced_on_the_curve_of_its_split():
    """issue 42: the zipf curve prices a zipf call; without one the uniform split's does, and a note says so."""
    from microbench.benchmarks.splits import parse

    curves = {("alltoallv[uniform]", 4): Curve("alltoallv[uniform]", 4, [1024, 4096], [10.0, 40.0], [None, None]),
              ("alltoallv[zipf:1.2]", 4): Curve("alltoallv[zipf:1.2]", 4, [1024, 4096], [30.0, 90.0], [None, None])}
    price, notes = from_curves(curves, Layout(dp=4, ep=4))
    zipf = Call("alltoallv", 1024, "ep", "forward", False, parse("zipf:1.2"))
    assert price(zipf).seconds == pytest.approx(30e-6) and not notes
    hot = Call("alltoallv", 1024, "ep", "forward", False, parse("hot:4"))
    assert price(hot).seconds == pytest.approx(10e-6)
    assert notes == {"alltoallv[hot:4]: no curve of that split; priced on the uniform split's"}

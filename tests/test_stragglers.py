"""Straggler attribution: per-node summaries, the slow-rank test hook, the skew rule, and the pairs test with a
slowed rank (8 real ranks on an oversubscribed machine: correctness only, the hook's 50 ms dominates noise)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from microbench.cluster.nodes import Nodes
from microbench.errors import UsageError
from microbench.measure.loops import PythonLoop
from microbench.measure.testhooks import FaultHooks, SlowedLoop
from microbench.run.diagnostics.stragglers import LISTED_NODES, _node_fields

from conftest import microbench, read_jsonl, results_of

SLOW_RANK, DELAY_US = 5, 50000
SLOWED = {"MICROBENCH_TEST_SLOW_RANK": f"{SLOW_RANK}:{DELAY_US}"}


def test_nodes_are_hosts_across_hosts_else_ranks():
    across = Nodes.of(["a", "a", "b", "b", "c"])
    assert (across.unit, across.labels, across.leaders, across.node_of_rank) == \
        ("host", ["a", "b", "c"], [0, 2, 4], [0, 0, 1, 1, 2])
    one = Nodes.of(["a", "a", "a"])
    assert (one.unit, one.labels, one.node_of_rank) == ("rank", ["rank 0", "rank 1", "rank 2"], [0, 1, 2])


def test_a_node_the_others_wait_for_stands_out_on_the_fast_side():
    means = {f"rank {i}": 20000.0 + 10 * i for i in range(8)}
    means["rank 5"] = 30.0  # arrived last at every call: its own calls were short
    fields = _node_fields(means)
    assert [(o["label"], o["side"]) for o in fields["outliers"]] == [("rank 5", "fast")]
    assert fields["listed"] == "all" and fields["node_skew"] == pytest.approx(20070.0 / 30.0)
    uniform = _node_fields({f"rank {i}": 10.0 * (1 + 0.01 * (i % 3)) for i in range(8)})
    assert uniform["outliers"] == []


def test_the_node_listing_is_bounded():
    means = {f"n{i:03d}": float(100 + i) for i in range(100)}
    fields = _node_fields(means)
    assert fields["listed"] == "extremes" and len(fields["node_means_us"]) == LISTED_NODES
    names = list(fields["node_means_us"])
    assert names[:2] == ["n099", "n098"] and names[-1] == "n000"


def test_slow_rank_hook_is_read_only_with_testing_and_checked():
    assert FaultHooks.from_env({"MICROBENCH_TEST_SLOW_RANK": "3:20000"}, warn=False).slow_rank is None
    hooks = FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_SLOW_RANK": "3:20000"})
    assert hooks.slow_rank == (3, 0.02)
    loop = PythonLoop()
    assert hooks.slowed(2, loop) is loop and isinstance(hooks.slowed(3, loop), SlowedLoop)
    for bad in ("3", "x:10", "3:0", "3:-5", "-1:10", "3:10:4"):
        with pytest.raises(UsageError, match="expected RANK:MICROSECONDS"):
            FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_SLOW_RANK": bad})


def test_a_slowed_loop_sleeps_before_each_iteration_outside_its_timing():
    started = []
    loop = SlowedLoop(PythonLoop(), 0.05)
    durations = loop.run([lambda: started.append(time.monotonic())], 4)
    assert len(durations) == 4 and durations.dtype == np.int64 and (durations >= 0).all()
    # inside the timing every duration would be at least the 50 ms sleep (ns); an append takes microseconds,
    # and the median leaves room for one descheduled call on a loaded machine
    assert np.median(durations) < 0.05e9, durations
    assert len(started) == 4 and min(np.diff(started)) >= 0.05  # a sleep between any two calls
    assert loop.kind == "python" and loop.call_path == "mpi4py"  # the wrapped loop's facts


def test_a_malformed_slow_rank_is_one_usage_error():
    proc = microbench("run", "--np", "2", "allreduce", "-m", "8", env={"MICROBENCH_TEST_SLOW_RANK": "two"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "microbench: error: MICROBENCH_TEST_SLOW_RANK='two': expected RANK:MICROSECONDS with a delay above 0 and "
        "at most 60 s (e.g. 3:20000)"]


@pytest.fixture(scope="module")
def slowed_run(tmp_path_factory):
    """8 ranks, rank 5 slowed by 50 ms: an allreduce sweep and the pairwise test."""
    out = tmp_path_factory.mktemp("slowed") / "r.jsonl"
    proc = microbench("run", "--np", "8", "allreduce", "pairs", "-m", "8,64", "-i", "8", "-x", "1",
                      "--straggler-columns", "--out", str(out), env=SLOWED, timeout=240)
    assert proc.returncode == 0, proc.output
    return proc, out


def test_attribution_names_the_slowed_rank(slowed_run):
    proc, out = slowed_run
    results = [r for r in results_of(out) if r["benchmark"] == "allreduce"]
    assert [r["size_bytes"] for r in results] == [8, 64]
    for r in results:
        block = r["stragglers"]
        assert block["fastest"]["rank"] == SLOW_RANK  # the one every other rank waited for
        assert block["slowest"]["rank"] != SLOW_RANK and block["skew"] > 1
        assert block["unit"] == "rank" and block["nodes"] == 8 and block["listed"] == "all"
        assert {"label": f"rank {SLOW_RANK}", "side": "fast"}.items() <= block["outliers"][0].items()
    header = next(line for line in proc.stdout.splitlines() if "Skew" in line)
    assert header.split()[-3:] == ["Skew", "Slowest", "Fastest"]
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["8"], ["64"])]
    assert len(rows) == 2 and all(row[-2:] == ["rank", str(SLOW_RANK)] for row in rows), rows


def test_pairs_flags_the_slowed_rank_as_a_bad_node(slowed_run):
    _, out = slowed_run
    pairs = {r["metric"]: r for r in results_of(out) if r["benchmark"] == "pairs"}
    # judged on what the delay implies, not on ratios of noise (a loaded machine inflates every figure). Rank 5 is
    # the passive side (the peer timed against) of its pairs with ranks 0-4 and sleeps DELAY_US before each
    # iteration: each of those round trips waits for the sleep, so their cells (half a round trip) are near
    # DELAY_US / 2, and half of that is kept for load (the initiator's own lateness shortens its wait)
    latency = pairs["latency"]
    cells = np.array([[np.nan if c is None else c for c in row] for row in latency["matrix"]])
    delayed = DELAY_US / 4
    assert (cells[SLOW_RANK, :SLOW_RANK] >= delayed).all(), cells[SLOW_RANK]
    # every other row holds at most one of those cells in 7, so its median carries no delay
    row_medians = np.nanmedian(cells, axis=1)
    assert row_medians[SLOW_RANK] >= delayed and (np.delete(row_medians, SLOW_RANK) < delayed).all(), row_medians
    # rank 5's row is flagged and the worst; 8 ranks on 2 cores can push another row past the rule (CI saw rank 3)
    flagged = sorted(latency["node_outliers"], key=lambda n: -n["row_median"])
    assert flagged and flagged[0]["label"] == f"rank {SLOW_RANK}", latency
    # bandwidth: an iteration of `window` messages waits for the sleep, so a delayed cell is at most
    # size x window / DELAY_US (GB/s, twice that kept for load); rank 5's row is flagged and the lowest
    bandwidth = pairs["bandwidth"]
    ceiling_gbps = 2 * bandwidth["size_bytes"] * bandwidth["window"] / (DELAY_US * 1e-6) / 1e9
    cells = np.array([[np.nan if c is None else c for c in row] for row in bandwidth["matrix"]])
    assert (cells[SLOW_RANK, :SLOW_RANK] <= ceiling_gbps).all(), (cells[SLOW_RANK], ceiling_gbps)
    flagged = sorted(bandwidth["node_outliers"], key=lambda n: n["row_median"])
    assert flagged and flagged[0]["label"] == f"rank {SLOW_RANK}", bandwidth
    assert flagged[0]["row_median"] <= ceiling_gbps, bandwidth


def test_the_skew_rule_fails_and_names_the_hosts(slowed_run, tmp_path):
    _, out = slowed_run
    spec = tmp_path / "skew.toml"
    # 1.5: the others wait about DELAY_US a call longer than rank 5, which passes only if rank 5's own calls took
    # over 2 x DELAY_US (a ratio against rank 5's load-inflated calls, such as 3, can pass under load)
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 1.5\n')
    proc = microbench("check", "--spec", str(spec), str(out))
    assert proc.returncode == 1, proc.output
    fails = [line for line in proc.stdout.splitlines() if line.startswith("  FAIL  allreduce")]
    assert len(fails) == 2
    host = read_jsonl(out)[0]["hosts"][0]
    assert all(f"fastest rank {SLOW_RANK} on {host}" in line and f"rank {SLOW_RANK} (fast)" in line for line in fails)
    loose = tmp_path / "loose.toml"
    loose.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_rank_skew = 1e9\n')
    assert microbench("check", "--spec", str(loose), str(out)).returncode == 0


def test_the_skew_rule_is_checked():
    from microbench.gate.spec import parse_spec

    with pytest.raises(UsageError, match="max_rank_skew must be a number of at least 1"):
        parse_spec({"rule": [{"benchmark": "allreduce", "max_rank_skew": 0.5}]})
    rule = parse_spec({"rule": [{"benchmark": "allreduce", "max_rank_skew": 2}]}).rules[0]
    assert rule.stat_for("skew") is None and "rank skew" in rule.title()

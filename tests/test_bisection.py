"""Bisection: halves and padding, the decision rule, and a real 8-rank search for a slowed rank."""

from __future__ import annotations

import sys

import pytest

from microbench.run.diagnostics.bisection import MIN_NODES, decide, halves

from conftest import microbench, read_jsonl

SLOW_RANK = 5


def test_halves_pad_a_lone_node_with_a_cleared_one():
    assert halves([0, 1, 2, 3, 4, 5, 6, 7], []) == ([0, 1, 2, 3], [4, 5, 6, 7], [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert halves([4, 5], [0, 1, 2, 3]) == ([4], [5], [[4, 0], [5, 1]])
    assert halves([4, 5, 6], [0, 1]) == ([4], [5, 6], [[4, 0], [5, 6]])


def test_the_slower_group_stands_out_only_beyond_the_pairs_rule():
    fast = [10.0 + 0.1 * (i % 5) for i in range(50)]
    stands, numbers = decide([fast, [200.0 + i for i in range(50)]])
    assert stands == 1 and numbers["z"] > 3.5 and numbers["p50_us"][1] > numbers["threshold_us"]
    assert decide([[200.0] * 50, fast])[0] == 0
    stands, numbers = decide([fast, [x * 1.1 for x in fast]])  # 10 % slower: within the MAD floor of 5 %
    assert stands is None and numbers["z"] < 3.5


def test_bisect_refuses_what_it_cannot_do():
    proc = microbench("run", "--np", "2", "bisect", "-i", "2")
    assert proc.returncode == 2  # refused in the --np parent: the one line, no launcher banner after it
    assert proc.stderr.splitlines() == [f"microbench: error: bisect needs at least {MIN_NODES} nodes (ranks); this "
                                        "job has 2: use the pairwise test (microbench run pairs) instead"]
    proc = microbench("run", "--np", "4", "bisect", "--bisect-benchmark", "latency")
    assert proc.returncode == 2 and "--bisect-benchmark latency is point to point" in proc.stderr
    proc = microbench("run", "--np", "4", "bisect", "-m", "8:1K")
    assert proc.returncode == 2 and "bisect measures one size and -m 8:1K names 8" in proc.stderr
    proc = microbench("run", "--np", "4", "bisect", "-m", "1K", "--bisect-size", "2K")
    assert proc.returncode == 2 and "-m and --bisect-size both choose bisect's size; give one" in proc.stderr
    proc = microbench("run", "--np", "4", "bisect", "--backend", "torch")
    assert proc.returncode == 2 and "bisect splits MPI communicators: it needs --backend mpi" in proc.stderr


@pytest.mark.parametrize("benchmark", ["allreduce"])
def test_bisection_finds_the_slowed_rank_in_log2_rounds(benchmark, tmp_path):
    # 200 ms a call: far above what 8 ranks on 2 cores do to each other (ms tails)
    out = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "8", "bisect", "--bisect-benchmark", benchmark, "-m", "64K",
                      "-i", "8", "-x", "1", "--out", str(out),
                      env={"MICROBENCH_TEST_SLOW_RANK": f"{SLOW_RANK}:200000"}, timeout=240)
    assert proc.returncode == 0, proc.output
    (rec,) = [r for r in read_jsonl(out) if r["type"] == "bisect"]
    assert rec["verdict"] == "found" and rec["suspects"] == [{"label": f"rank {SLOW_RANK}", "rank": SLOW_RANK}]
    assert len(rec["rounds"]) == 3 and rec["nodes"] == 8 and rec["unit"] == "rank"
    assert rec["size_bytes"] == 64 << 10  # -m names bisect's one size
    path = [[g["labels"] for g in r["groups"]][r["stands_out"]] for r in rec["rounds"]]
    assert path == [["rank 4", "rank 5", "rank 6", "rank 7"], ["rank 4", "rank 5"], ["rank 5"]]
    assert rec["rounds"][2]["groups"][1]["padded_with"]  # a lone node is measured with a cleared one
    assert f"# bisect suspect: rank {SLOW_RANK} after 3 round(s)" in proc.stdout


def test_the_scale_model_counts_rounds_and_rank0_bytes(tmp_path):
    """scripts/sim_diagnostics.py's model on given harness costs: log2 rounds for bisection, linear bytes."""
    import importlib.util
    import json

    from conftest import REPO, run_process

    spec = importlib.util.spec_from_file_location("sim", REPO / "scripts" / "sim_diagnostics.py")
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"measured": {"pairs_round_s": 0.1, "bisect_round_s": 0.05, "size_s": 0.04,
                                              "measured_at": "a test"}}))
    proc = run_process([sys.executable, str(REPO / "scripts" / "sim_diagnostics.py"), "--costs", str(costs),
                        "--json", str(tmp_path / "rows.json")])
    assert proc.returncode == 0, proc.output
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [r["nodes"] for r in rows] == list(sim.NODES)
    for r in rows:
        assert r["pairs_rounds"] == 2 * sim.PAIR_PASSES * (r["nodes"] - 1) and 2 ** r["bisect_rounds"] == r["nodes"]
        assert r["straggler_bytes"] < 40 * r["nodes"] + 2000  # 40 B per node and four small allreduces
    small, large = rows[0], rows[-1]
    growth = large["ranks"] / small["ranks"]
    assert large["size_bytes_total"] / small["size_bytes_total"] <= growth  # O(ranks x summary), never more
    assert f"| {large['nodes']} | {large['ranks']} | {large['pairs_rounds']} |" in proc.stdout

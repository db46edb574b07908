"""scripts/gpu_node_checks.py without a GPU: how it starts ranks (one node, several, NCCL_HOSTID per rank), and that
each item's judgement fails on the defect it is there for, passes without it, and skips where it cannot judge."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def checks():
    spec = importlib.util.spec_from_file_location("gpu_node_checks", REPO / "scripts" / "gpu_node_checks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_node_checks"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_node_checks", None)


def _result(size, p50, cache="warm", **extra):
    return {"type": "result", "benchmark": extra.pop("benchmark", "allgather"), "size_bytes": size, "cache": cache,
            "latency_us": {"p50": p50, "p99": extra.pop("p99", p50 * 1.2)}, **extra}


# ------------------------------------------------------------------------------ how ranks start
def test_one_node_runs_under_torchrun(checks):
    cmd = checks.Launch(8).microbench("allreduce", "-m", "8")
    assert cmd[1:3] == ["--nproc-per-node=8", "--no-python"] and cmd[3:8] == ["microbench", "run", "--backend",
                                                                             "torch", "--device"]


def test_several_nodes_start_one_torchrun_per_node_under_srun(checks, monkeypatch):
    monkeypatch.setattr(checks, "_first_node", lambda: "gpu001")
    cmd = checks.Launch(8, nodes=2, launcher="srun-torchrun").microbench("allreduce")
    assert cmd[:3] == ["srun", "--nodes=2", "--ntasks-per-node=1"]
    assert "--nnodes=2" in cmd and "--nproc-per-node=8" in cmd and "--rdzv-endpoint=gpu001:29517" in cmd
    cmd = checks.Launch(4, nodes=2, launcher="srun").microbench("allreduce")
    assert cmd[:4] == ["srun", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4"] and "microbench" in cmd
    cmd = checks.Launch(4, nodes=3, launcher="mpirun").microbench("allreduce", backend="mpi")
    assert cmd[1:5] == ["-n", "12", "--map-by", "ppr:4:node"] and "--backend" not in cmd
    assert checks.Launch(4, nodes=2).ranks == 8


def test_each_rank_gets_its_own_nccl_host_id_on_one_gpu(checks, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    launch = checks.Launch(8, hostid=True)
    cmd = launch.microbench("allreduce", ranks=3)
    assert cmd[1] == "--nproc-per-node=3" and launch.env() == {"CUDA_VISIBLE_DEVICES": "0"}
    wrapper = cmd[cmd.index("--no-python") + 1:cmd.index("microbench")]
    proc = subprocess.run([*wrapper, "env"], capture_output=True, text=True, env={"LOCAL_RANK": "2", "PATH": "/usr/bin:/bin"})
    assert "NCCL_HOSTID=microbench-node-check-2" in proc.stdout.splitlines()


def test_modes_and_skips_are_reported_as_such(checks, tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch", reason="the node check's main needs torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(checks, "ITEMS", [("passes", lambda launch, out: (checks.PASS, "")),
                                          ("skips", lambda launch, out: (checks.SKIP, "")),
                                          ("fails", lambda launch, out: (checks.FAIL, ""))])
    assert checks.main(["--out", str(tmp_path)]) == 1  # one failed item; the skip is neither a pass nor a failure
    out = capsys.readouterr().out
    assert "SKIP  skips" in out and "1 passed, 1 failed, 1 skipped" in out
    monkeypatch.setattr(checks, "HOSTID_ITEMS", [("hostid", lambda launch, out: (checks.PASS, str(launch.hostid)))])
    assert checks.main(["--hostid-per-rank", "--out", str(tmp_path)]) == 0
    assert "PASS  hostid: True" in capsys.readouterr().out
    assert checks.main(["--hostid-per-rank", "--nodes", "2", "--out", str(tmp_path)]) == 2


def test_every_command_has_a_time_limit(checks, monkeypatch):
    monkeypatch.setattr(checks, "TIMEOUT", 1)
    proc = checks.run(["sleep", "30"])
    assert proc.returncode == 124 and "timed out after 1 s" in proc.stderr


def test_items_that_need_more_ranks_skip_on_one_gpu(checks, tmp_path):
    one = checks.Launch(1)
    for item in (checks.item_p2p_graphs, checks.item_distinct_gpus, checks.item_nccl_connect, checks.item_replay):
        assert item(one, tmp_path)[0] == checks.SKIP


def test_the_mpi_item_skips_where_the_mpi_is_not_cuda_aware(checks, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(checks.importlib.util, "find_spec", lambda name: object() if name == "cupy" else real(name))
    monkeypatch.delenv("MICROBENCH_ASSUME_CUDA_AWARE", raising=False)
    verdict, detail = checks.item_mpi_device(checks.Launch(2), tmp_path)  # the Open MPI wheel: built without CUDA
    assert verdict == checks.SKIP and "CUDA-aware" in detail, detail


# ------------------------------------------------------------------------------ judgements
def test_cold_fails_where_cold_reads_warm_and_passes_above_the_measured_noise(checks):
    sizes = (65536, 1 << 20, 1 << 24)
    warm1 = [_result(s, 10.0 + s / 1e6) for s in sizes]
    warm2 = [_result(s, 10.1 + s / 1e6) for s in sizes]  # 1 % apart: a 3 % margin
    defect = [[*w, *(_result(r["size_bytes"], r["latency_us"]["p50"], "cold") for r in w)] for w in (warm1, warm2)]
    assert checks.judge_cold(*defect)[0] == checks.FAIL
    fixed = [[*w, *(_result(r["size_bytes"], r["latency_us"]["p50"] * (1 + 0.4 * i / 2), "cold")
                    for i, r in enumerate(w))] for w in (warm1, warm2)]
    assert checks.judge_cold(*fixed)[0] == checks.PASS
    colder_than_noise = [[*w, *(_result(r["size_bytes"], r["latency_us"]["p50"] * 1.02, "cold") for r in w)]
                         for w in (warm1, warm2)]
    assert checks.judge_cold(*colder_than_noise)[0] == checks.FAIL  # 2 % is within 3x the 1 % between warm runs
    noisy = [[_result(s, 10.0) for s in sizes], [_result(s, 14.0) for s in sizes]]
    noisy = [[*w, *(_result(r["size_bytes"], 20.0, "cold") for r in w)] for w in noisy]
    assert checks.judge_cold(*noisy)[0] == checks.SKIP


def test_alignment_fails_on_a_first_replay_that_carries_skew(checks):
    steady = [10.0, 10.2, 10.1, 10.3, 10.0, 10.1, 10.2, 10.4, 10.1, 10.0]
    rows = [{"benchmark": "allgather", "size_bytes": 8, "rank": r, "latency_us": list(steady)} for r in range(2)]
    assert checks.judge_alignment(rows, {10})[0] == checks.PASS
    rows[1]["latency_us"][0] = 25.0  # the barrier's exit skew in the first sample: 15 us over a 0.3 us spread
    verdict, detail = checks.judge_alignment(rows, {10})
    assert verdict == checks.FAIL and "rank 1" in detail


def test_a_first_call_that_makes_a_connection_fails(checks):
    ok = [_result(8, 20.0, benchmark="bw", first_call_us={"max": 60.0}),
          _result(1 << 20, 400.0, benchmark="bibw", first_call_us={"max": 900.0})]
    assert checks.judge_first_calls(ok)[0] == checks.PASS
    connecting = ok + [_result(8, 20.0, benchmark="bw", first_call_us={"max": 4000.0})]  # NCCL's P2P connection
    assert checks.judge_first_calls(connecting)[0] == checks.FAIL
    assert checks.judge_first_calls([_result(8, 20.0, benchmark="bw")])[0] == checks.FAIL  # no first call apart


def test_the_refusal_passes_only_before_nccl_speaks(checks):
    ours = "microbench: error: ranks 0, 1 share GPU GPU-a on n0: NCCL needs one GPU per rank (...)\n"
    assert checks.judge_refusal(2, ours)[0] == checks.PASS
    nccl = ("microbench: error: rank 0: DistBackendError: NCCL error ... ncclInvalidUsage ... Duplicate GPU detected "
            ": rank 1 and rank 0 both on CUDA device 18000\n")
    assert checks.judge_refusal(3, nccl)[0] == checks.FAIL
    assert checks.judge_refusal(0, "")[0] == checks.FAIL


def test_distinct_gpus_count_hosts_and_uuids(checks):
    gpus = [{"host": f"n{i // 2}", "uuid": f"GPU-{i % 2}"} for i in range(4)]
    run_line = {"device": {"ranks": gpus}}
    assert checks.judge_distinct(run_line, 4, 2)[0] == checks.PASS  # the same UUIDs on two hosts: four GPUs
    assert checks.judge_distinct(run_line, 4, 1)[0] == checks.FAIL
    gpus[1]["uuid"] = "GPU-0"
    assert checks.judge_distinct(run_line, 4, 2)[0] == checks.FAIL
    assert checks.judge_distinct(None, 4, 2)[0] == checks.FAIL


def test_the_connection_item_skips_where_nccl_connects_with_the_communicator(checks):
    from microbench.cluster.torch_runtime import NCCL_CONNECT_DEFAULT, NCCL_CONNECT_NO_CUMEM

    runtime = {"runtime": NCCL_CONNECT_DEFAULT, "eager": "0"}
    assert checks.judge_connect({"runtime": 3000.0, "eager": 200.0}, runtime)[0] == checks.PASS
    assert checks.judge_connect({"runtime": 3000.0, "eager": 2900.0}, runtime)[0] == checks.FAIL
    assert checks.judge_connect({"runtime": 30.0, "eager": 20.0}, runtime)[0] == checks.SKIP  # nothing to remove
    assert checks.judge_connect({"runtime": 3000.0, "eager": 200.0},
                                {"runtime": NCCL_CONNECT_NO_CUMEM, "eager": "0"})[0] == checks.SKIP
    assert checks.judge_connect({"runtime": 3000.0, "eager": 200.0},
                                {"runtime": NCCL_CONNECT_DEFAULT, "eager": None})[0] == checks.FAIL


def test_launch_marks_are_judged_from_the_table_the_run_printed(checks):
    from microbench.run.terminal import format_result_row

    def row(size, bound):
        return {**_result(size, 30.0 if size == 8 else 900.0, benchmark="allreduce"),
                "launch": {"host_us_per_call": 28.0, "device_us_per_call": 30.0 if bound else 900.0, "bound": bound},
                "algbw_gbps": 1.0, "busbw_gbps": 1.0, "check": None}

    rows = [row(8, True), row(1 << 28, False)]
    printed = "\n".join(format_result_row(r) for r in rows)
    assert checks.judge_launch_marks(rows, printed)[0] == checks.PASS
    unmarked = "\n".join(format_result_row({**r, "launch": None}) for r in rows)
    assert checks.judge_launch_marks(rows, unmarked)[0] == checks.FAIL
    assert checks.judge_launch_marks([row(8, True), row(1 << 28, True)], printed)[0] == checks.FAIL


def test_paired_samples_must_be_gated(checks):
    gated = _result(8, 20.0, launch={"host_us_per_call": 30.0, "device_us_per_call": 20.0, "bound": False,
                                    "gate_us": 90.0, "ungated": 0, "samples": 200})
    assert checks.judge_gate([gated])[0] == checks.PASS
    ungated = {**gated, "launch": {**gated["launch"], "ungated": 40, "bound": True}}
    assert checks.judge_gate([ungated])[0] == checks.FAIL
    assert checks.judge_gate([_result(8, 20.0, launch={"host_us_per_call": 30.0, "device_us_per_call": 20.0,
                                                       "bound": True})])[0] == checks.FAIL

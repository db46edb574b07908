"""All-to-all-v in traces (issue 42): grouped Send/Recv in NCCL logs, PyTorch's all_to_allv in Kineto and execution
traces, PARAM's in_split; per-peer sizes as a split pattern; tallies by pattern; the replay and the pricing use it."""

from __future__ import annotations

import json

import pytest

from conftest import microbench
from microbench.workload.traces import read_trace
from microbench.workload.traces.peer_sizes import parse_sizes, pattern_of
from microbench.workload.traces.samples import et_comms_node, json_document, kineto_comms, nccl_call


def test_per_peer_sizes_become_the_pattern_of_the_same_peak():
    assert pattern_of([4, 4, 4, 4]) == "uniform" and pattern_of([4, 5, 4, 4]) == "uniform"
    # peak 6 of mean 3 on 4 peers: r = 2, hot:K has peak K/(K+3) of the total: K = 2 x 3 / (4 - 2) = 3
    assert pattern_of([6, 2, 2, 2]) == "hot:3"
    assert pattern_of([0, 0, 8, 0]) == "hot:1e+09"  # everything to one peer
    assert parse_sizes("[6, 2, 2, 2]") == [6, 2, 2, 2]
    assert parse_sizes("[1, 2, ...]") is None and parse_sizes("[]") is None and parse_sizes([1, -1]) is None


def _log(tmp_path, lines):
    path = tmp_path / "nccl.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _grouped(op_count: int, counts: list[int], *, pid: int = 1, dev: int = 0, comm: str = "0xe1") -> list[str]:
    """One rank's all_to_all_single through NCCL: a Send and a Recv per peer in one group (one opCount)."""
    out = []
    for peer, count in enumerate(counts):
        if count:
            out += [nccl_call("Send", count, 9, comm, len(counts), pid=pid, dev=dev, opcount=op_count, root=peer),
                    nccl_call("Recv", count, 9, comm, len(counts), pid=pid, dev=dev, opcount=op_count, root=peer)]
    return out


def test_nccl_log_grouped_sends_are_one_all_to_all_or_all_to_all_v(tmp_path):
    lines = (_grouped(5, [64, 64, 64, 64]) + _grouped(6, [192, 64, 64, 64]) + _grouped(7, [192, 64, 64, 64])
             # a pipeline stage: one send and one recv of one opCount stay point to point
             + [nccl_call("Send", 32, 9, "0xe2", 2, pid=1, opcount=1, root=1),
                nccl_call("Recv", 32, 9, "0xe2", 2, pid=1, opcount=1, root=1)])
    report = read_trace(_log(tmp_path, lines))
    got = {(m.collective, m.bytes, m.group_size, m.splits): m.count for m in report.messages()}
    # bf16 (datatype 9): 64 x 2 = 128 B to each of 4 peers: an all-to-all of 128 B blocks; 192 + 3 x 64 = 384
    # elements, 768 B in all, peak 192 of mean 96: r = 2, hot:3
    assert got == {("alltoall", 128, 4, None): 1, ("alltoallv", 768, 4, "hot:3"): 2,
                   ("send", 64, 2, None): 1, ("recv", 64, 2, None): 1}
    assert report.split_patterns() == {"hot:3": 2}
    assert any("one NCCL group" in n for n in report.notes)


def test_kineto_all_to_allv_with_its_split_sizes(tmp_path):
    events = [kineto_comms("all_to_allv", 4096, "BFloat16", 4, ts=1, in_split="[6, 2, 2, 2]"),
              kineto_comms("all_to_allv", 4096, "BFloat16", 4, ts=2, in_split="[1, 1, 1, ...]"),
              kineto_comms("all_to_allv", 4096, "BFloat16", 4, ts=3),  # no split sizes: an equal split
              kineto_comms("all_to_allv", 4096, "BFloat16", 4, ts=4, cat="kernel", in_split="[6, 2, 2, 2]")]
    path = tmp_path / "k.json"
    path.write_text("".join(json_document({"schemaVersion": 1}, "traceEvents", events)))
    report = read_trace(str(path))
    got = {(m.collective, m.bytes, m.splits): m.count for m in report.messages()}
    # 4096 bf16 = 8192 B in all; rows 6, 2, 2, 2 of 12: peak 2 x the mean, hot:3; a list cut short: unknown
    assert got == {("alltoallv", 8192, "hot:3"): 1, ("alltoallv", 8192, None): 1, ("alltoall", 2048, None): 1}
    assert report.split_patterns() == {"hot:3": 1, "unknown": 1}
    assert any("cut short" in n for n in report.notes)


def test_execution_trace_and_param_all_to_allv(tmp_path):
    nodes = [et_comms_node(1, "all_to_allv", 1000, "Float", 4, in_split="[700, 100, 100, 100]")]
    et = tmp_path / "et.json"
    et.write_text("".join(json_document({"schema": "1.1.1-chakra.0.0.4", "pid": 3}, "nodes", nodes)))
    got = {(m.collective, m.bytes, m.splits) for m in read_trace(str(et)).messages()}
    # peak 700 of mean 250: r = 2.8, K = 2.8 x 3 / 1.2 = 7
    assert got == {("alltoallv", 4000, "hot:7")}
    param = tmp_path / "p.json"
    param.write_text(json.dumps([{"comms": "all_to_allv", "in_msg_size": 1000, "dtype": "float32", "world_size": 4,
                                  "in_split": [700, 100, 100, 100], "out_split": [250] * 4}]))
    assert {(m.collective, m.bytes, m.splits) for m in read_trace(str(param)).messages()} == {
        ("alltoallv", 4000, "hot:7")}


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_workload_tallies_by_split_and_prices_on_the_matching_curve(tmp_path, fmt):
    lines = _grouped(5, [192, 64, 64, 64]) + _grouped(6, [192, 64, 64, 64], pid=2, dev=1, comm="0xe5")
    log = _log(tmp_path, lines)
    results = tmp_path / "r.jsonl"
    proc = microbench("run", "--np", "4", "alltoallv", "--splits", "hot:3", "-m", "512,1K", "-i", "3", "-x", "1",
                      "--out", str(results), timeout=180)
    assert proc.returncode == 0, proc.output
    args = ["workload", "--trace", log, "--results", str(results)] + (["--json"] if fmt == "json" else [])
    out = microbench(*args, timeout=120)
    assert out.returncode == 0, out.output
    if fmt == "table":
        assert "all-to-all-v calls by split pattern (the peak-to-mean of their per-peer sizes as hot:K): hot:3 2" \
            in out.stdout
        return
    doc = json.loads(out.stdout)
    assert doc["trace"]["alltoallv_splits"] == {"hot:3": 2}
    (row,) = doc["weighting"]["messages"]
    assert (row["collective"], row["bytes"], row["splits"], row["benchmark"]) == (
        "alltoallv", 768, "hot:3", "alltoallv[hot:3]")
    assert row["how"] == "interpolated" and not any("no curve of that split" in n for n in doc["weighting"]["notes"])

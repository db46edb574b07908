"""Trace readers on hand-written fixtures: messages, unreadable lines counted, formats detected, clear errors."""

import gzip
import shutil
from pathlib import Path

import pytest

from microbench.errors import UsageError
from microbench.workload.messages import Message
from microbench.workload.traces import read_trace

FIXTURES = Path(__file__).parent / "fixtures" / "workload"


def trace_messages(report, iterations=1):
    return {(m.collective, m.bytes, m.group_size): m.count for m in report.messages(iterations)}


def test_nccl_coll_lines():
    report = read_trace(str(FIXTURES / "nccl_coll.log"))
    assert report.format == "nccl"
    assert report.ranks == ["node1:1001 gpu0", "node1:1002 gpu1"]
    # per process: 2 AllReduce of 1024 float32; AllGather sendcount 256 bf16; ReduceScatter recvcount 128 float32
    # over 2 ranks = 1024 B of input; Broadcast 10 int8; one Send (rank 0) and one Recv (rank 1) of 1024 fp16
    assert trace_messages(report) == {
        ("allreduce", 4096, 2): 2, ("allgather", 512, 2): 1, ("reduce_scatter", 1024, 2): 1,
        ("broadcast", 10, 2): 1, ("send", 2048, 2): 0.5, ("recv", 2048, 2): 0.5,
    }
    assert report.unreadable == 2  # datatype 42, and a truncated line
    assert report.uncurved == {"Gather": 1}
    assert report.skipped["line without a call (lines minus call records)"] == 3
    assert all(m.phase == "trace" for m in report.messages())


def test_trace_iterations_divide_counts():
    report = read_trace(str(FIXTURES / "nccl_coll.log"), "nccl")
    assert trace_messages(report, iterations=2)[("allreduce", 4096, 2)] == 1


def test_deepspeed_summary_uses_the_last_table():
    report = read_trace(str(FIXTURES / "deepspeed_summary.log"))
    assert report.format == "deepspeed"
    assert trace_messages(report) == {
        ("broadcast", 2048, None): 146,
        ("broadcast", 103_022_592, None): 1,         # 98.25 MB = 98.25 * 1024^2
        ("allreduce", 25_165_824, None): 40,
        ("allgather", 6_291_456, None): 80,
        ("reduce_scatter", 711_836_303, None): 40,   # 678.86 * 1,048,576 = 711,836,303.36
    }
    assert report.unreadable == 1  # "abc KB"
    assert report.skipped["straggler breakdown row (repeats the summary)"] == 1
    assert report.skipped["verbose line (the summary table counts it)"] == 1
    assert report.skipped["no data (barrier, wait, init)"] == 2  # calls of a barrier row
    assert report.skipped["all_to_all without --trace-group-size (its size is the whole buffer)"] == 10


def test_deepspeed_group_size_and_all_to_all():
    report = read_trace(str(FIXTURES / "deepspeed_summary.log"), group_size=4)
    got = trace_messages(report)
    assert got[("alltoall", 262_144, 4)] == 10  # a 1 MB input buffer is 256 KiB to each of 4 peers
    assert got[("allreduce", 25_165_824, 4)] == 40


def test_deepspeed_verbose_lines():
    report = read_trace(str(FIXTURES / "deepspeed_verbose.log"))
    assert trace_messages(report) == {("allreduce", 25_165_824, None): 2, ("allgather", 6_291_456, None): 1}


def test_kineto_counts_cpu_side_events_once():
    report = read_trace(str(FIXTURES / "kineto_trace.json"))
    assert report.format == "kineto"
    assert trace_messages(report) == {
        ("allreduce", 2048, 4): 1,        # 1024 bf16
        ("allgather", 1024, 4): 2,        # 256 float32 in, per rank
        ("reduce_scatter", 8192, 4): 1,   # 4096 bf16 of input
        ("alltoall", 1024, 4): 1,         # 1024 float32 over 4 peers: 256 each
        ("send", 1024, 2): 1,             # 512 fp16
    }
    assert report.unreadable == 1  # "In msg nelems": "x"
    assert report.skipped["no data (barrier, wait, init)"] == 2
    assert report.skipped["GPU kernel event (its CPU-side record_param_comms is counted)"] == 6


def test_kineto_gzip(tmp_path):
    path = tmp_path / "rank0.pt.trace.json.gz"
    with open(FIXTURES / "kineto_trace.json", "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert trace_messages(read_trace(str(path)))[("allgather", 1024, 4)] == 2


def test_param_basic_trace():
    report = read_trace(str(FIXTURES / "param_basic.json"))
    assert report.format == "param"
    assert trace_messages(report) == {
        ("allreduce", 4096, 8): 2,        # 1024 float32
        ("allgather", 256, 8): 1,         # 128 bf16 in
        ("reduce_scatter", 2048, 8): 1,   # 1024 fp16 in, group from global_ranks
        ("alltoall", 400, 8): 1,          # 800 float32 over 8 peers
    }
    assert report.unreadable == 2  # "in_msg_size": "big", and an entry that is neither comms nor compute
    assert report.skipped == {"no data (barrier, wait, init)": 1, "compute entry": 1}


def test_format_given_overrides_detection():
    with pytest.raises(UsageError, match="not a JSON file"):
        read_trace(str(FIXTURES / "nccl_coll.log"), "kineto")


@pytest.mark.parametrize("content,message", [
    (b"hello\nworld\n", "cannot tell the format"),
    (b"\x00\xff\xfe binary", "not a text or gzip"),
    (b"[1, 2", "cannot tell the format"),
])
def test_unreadable_files_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "t.log"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        read_trace(str(path))


def test_missing_file_and_empty_trace(tmp_path):
    with pytest.raises(UsageError, match="cannot read trace"):
        read_trace(str(tmp_path / "missing.log"))
    path = tmp_path / "t.log"
    path.write_text("x:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff\n")
    with pytest.raises(UsageError, match=r"no collective calls found .* \(1 unreadable of 1 lines\)"):
        read_trace(str(path), "nccl")


def test_zero_size_calls_are_left_out(tmp_path):
    path = tmp_path / "t.log"
    line = "h:1:1 [0] NCCL INFO AllReduce: opCount {} sendbuff 0x1 recvbuff 0x1 count {} datatype 7 op 0 root 0 " \
           "comm 0x2 [nranks=4] stream 0x3\n"
    path.write_text(line.format(0, 0) + line.format(1, 256) + "some application output\n")
    report = read_trace(str(path))
    assert trace_messages(report) == {("allreduce", 1024, 4): 1}
    assert report.skipped == {"zero-size call (moves no data)": 1, "line without a call (lines minus call records)": 1}
    assert report.unreadable == 0


def test_empty_trace_file(tmp_path):
    path = tmp_path / "t.log"
    path.write_text("\n")
    with pytest.raises(UsageError, match="is empty"):
        read_trace(str(path))


def test_messages_are_message_objects():
    report = read_trace(str(FIXTURES / "param_basic.json"))
    assert Message("allreduce", 4096, 2, 8, "trace") in report.messages()

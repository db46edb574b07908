"""NCCL/RCCL INFO logs the tests write themselves: ranks per GPU, unprefixed and interleaved lines, launcher
prefixes, NCCL 2.28's new collectives, lines of any length."""

import gzip

import pytest

from microbench.workload.traces import read_trace
from microbench.workload.traces.samples import nccl_call, nccl_init


def counts(report, iterations=1):
    return {(m.collective, m.bytes, m.group_size): m.count for m in report.messages(iterations)}


def write(tmp_path, lines, name="nccl.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_process_with_two_gpus_is_two_ranks(tmp_path):
    # nccl-tests -g 2 style: process 100 drives GPUs 0 and 1 (one communicator rank each), process 200 GPUs 2, 3
    lines = []
    for pid, devs in ((100, (0, 1)), (200, (2, 3))):
        for dev in devs:
            comm = f"0x{pid}{dev}0"
            lines.append(nccl_init(comm, dev, 4, pid=pid, dev=dev))
            lines += [nccl_call("AllReduce", 1024, 7, comm, 4, pid=pid, dev=dev, opcount=i) for i in range(3)]
    report = read_trace(write(tmp_path, lines))
    assert report.ranks == ["node1:100 gpu0", "node1:100 gpu1", "node1:200 gpu2", "node1:200 gpu3"]
    assert counts(report) == {("allreduce", 4096, 4): 3}  # per rank, not 6 per process
    assert report.rank_spread() == {"min": 3, "median": 3, "max": 3}
    assert report.communicator_ranks == 4


def test_a_process_in_two_communicators_is_one_rank(tmp_path):
    lines = []
    for pid in (100, 200):
        lines += [nccl_init(f"0x{pid}a", pid // 100 - 1, 2, pid=pid), nccl_init(f"0x{pid}b", 0, 1, pid=pid)]
        lines += [nccl_call("AllReduce", 256, 9, f"0x{pid}a", 2, pid=pid),
                  nccl_call("Broadcast", 64, 0, f"0x{pid}b", 1, pid=pid)]
    report = read_trace(write(tmp_path, lines))
    assert report.ranks == ["node1:100 gpu0", "node1:200 gpu0"]
    assert counts(report) == {("allreduce", 512, 2): 1, ("broadcast", 64, 1): 1}
    assert report.communicator_ranks == 4


def test_the_device_of_the_init_line_wins_over_the_calling_thread(tmp_path):
    # a thread whose current device is 0 enqueues on the communicator created on device 1
    lines = [nccl_init("0xaa", 0, 2, pid=7, dev=0), nccl_init("0xbb", 1, 2, pid=7, dev=1),
             nccl_call("AllGather", 8, 7, "0xaa", 2, pid=7, dev=0),
             nccl_call("AllGather", 8, 7, "0xbb", 2, pid=7, dev=0)]
    report = read_trace(write(tmp_path, lines))
    assert report.ranks == ["node1:7 gpu0", "node1:7 gpu1"]


def test_lines_without_prefix_are_attributed_by_their_communicator_or_reported(tmp_path):
    lines = [nccl_init("0xa1", 0, 2, pid=1), nccl_init("0xb2", 1, 2, pid=2, dev=1),
             nccl_call("AllReduce", 16, 7, "0xa1", 2, pid=1), nccl_call("AllReduce", 16, 7, "0xb2", 2, pid=2, dev=1),
             nccl_call("AllReduce", 16, 7, "0xa1", 2, prefix=False),  # only process 1 owns 0xa1
             nccl_call("AllReduce", 16, 7, "0xc3", 2, prefix=False)]  # nobody owns 0xc3
    report = read_trace(write(tmp_path, lines))
    assert report.calls_per_rank() == {"node1:1 gpu0": 2, "node1:2 gpu1": 1}
    assert report.unattributed == {("allreduce", 64, 2, None): 1}  # (collective, bytes, group, splits)
    assert "?" not in "".join(report.ranks)
    assert report.rank_spread() == {"min": 1, "median": 1.5, "max": 2}  # the partial rank shows


def test_same_communicator_address_in_two_processes_is_ambiguous(tmp_path):
    lines = [nccl_call("AllReduce", 16, 7, "0x5500", 2, pid=1), nccl_call("AllReduce", 16, 7, "0x5500", 2, pid=2),
             nccl_call("AllReduce", 16, 7, "0x5500", 2, prefix=False)]
    report = read_trace(write(tmp_path, lines))
    assert sum(report.unattributed.values()) == 1 and report.total_calls == 2


def test_rccl_globalrank_attributes_an_unprefixed_line(tmp_path):
    lines = [nccl_call("AllReduce", 16, 7, "0x5500", 2, pid=1, globalrank=0),
             nccl_call("AllReduce", 16, 7, "0x5500", 2, pid=2, dev=1, globalrank=1),
             nccl_call("AllReduce", 16, 7, "0x5500", 2, prefix=False, globalrank=1)]
    report = read_trace(write(tmp_path, lines))
    assert report.calls_per_rank() == {"node1:1 gpu0": 1, "node1:2 gpu1": 2}
    assert not report.unattributed


def test_interleaved_lines_are_credited_to_the_process_that_wrote_them(tmp_path):
    one = nccl_call("AllReduce", 16, 7, "0xa", 2, pid=1)
    two = nccl_call("AllGather", 32, 7, "0xb", 2, pid=2, dev=1)
    cut = one.index("count")
    # one's line broken by two's, and the start of a line of two glued before one's ("...opCounode1:1:1 [0]")
    lines = [one[:cut] + two, one[cut:], two[:40] + one]
    report = read_trace(write(tmp_path, lines))
    assert report.calls_per_rank() == {"node1:1 gpu0": 1, "node1:2 gpu1": 1}
    assert counts(report) == {("allreduce", 64, 2): 0.5, ("allgather", 128, 2): 0.5}
    assert report.unreadable == 1  # the broken first record of one


def test_a_record_cut_short_does_not_swallow_the_next(tmp_path):
    one = nccl_call("AllReduce", 16, 7, "0xa", 2, pid=1)
    two = nccl_call("AllGather", 32, 7, "0xb", 2, pid=2, dev=1)
    glued = one[:one.index("op 0")] + two[two.index("NCCL INFO"):]  # one's fields end early, two's prefix is gone
    report = read_trace(write(tmp_path, [two, glued]))
    assert report.unreadable == 1  # one
    assert report.calls_per_rank() == {"node1:2 gpu1": 2}  # two, and its unprefixed copy by its communicator


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "[1,0]<stdout>: ", " 3: ", "worker-1: ", "[default0]:",
                                    "[2025-01-01 10:00:00] ", "worker-1: [default0]:"])
def test_launcher_prefixes(tmp_path, prefix):
    lines = [prefix + nccl_call("ReduceScatter", 128, 7, "0xa", 4, host="gpu-node-07.cluster", pid=31337, dev=3)]
    report = read_trace(write(tmp_path, lines))
    assert report.ranks == ["gpu-node-07.cluster:31337 gpu3"]
    assert counts(report) == {("reduce_scatter", 2048, 4): 1}  # 128 float32 per rank x 4 ranks of input


def test_nccl_228_collectives_and_uncurved_ones(tmp_path):
    lines = [nccl_call("AlltoAll", 100, 7, "0xa", 4), nccl_call("Gather", 8, 7, "0xa", 4),
             nccl_call("Scatter", 8, 7, "0xa", 4), nccl_call("Scatter", 8, 7, "0xa", 4),
             nccl_call("PutSignal", 1, 0, "0xa", 4)]
    report = read_trace(write(tmp_path, lines))
    assert counts(report) == {("alltoall", 400, 4): 1}  # count is the block to each peer
    assert report.uncurved == {"Gather": 1, "Scatter": 2, "PutSignal": 1}


def test_a_long_word_and_an_overlong_line_are_read_in_linear_time(tmp_path):
    # the former pattern ([A-Za-z]+ before ": opCount") took quadratic time on a long run of letters
    word = "A" * 200_000
    lines = [word, word + ": opCount 1 " + word, nccl_call("AllReduce", 4, 7, "0xa", 2), "x" * (3 << 20)]
    report = read_trace(write(tmp_path, lines))
    assert counts(report) == {("allreduce", 16, 2): 1}
    assert report.skipped["line longer than 1 MiB (no log line is)"] == 1


def test_gzip_and_a_bom(tmp_path):
    path = tmp_path / "nccl.log.gz"
    with gzip.open(path, "wt") as f:
        f.write("\ufeff" + nccl_call("Broadcast", 3, 8, "0xa", 2) + "\n")
    assert counts(read_trace(str(path))) == {("broadcast", 24, 2): 1}


def test_a_log_whose_calls_come_after_the_first_mebibyte(tmp_path):
    lines = ["application output line"] * 60_000 + [nccl_call("AllReduce", 4, 7, "0xa", 2)]
    report = read_trace(write(tmp_path, lines))
    assert report.format == "nccl" and report.total_calls == 1

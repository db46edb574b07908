"""alltoallv (issue 42): split patterns to the element, nccl-tests 2.19's size, algbw and busbw, real checked runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import microbench, read_jsonl, results_of
from microbench.benchmarks import splits
from microbench.benchmarks.base import Buffers, Context
from microbench.benchmarks.table import COLLECTIVES, alltoallv_entry, with_splits
from microbench.errors import UsageError

#: zipf:1.2 on 4 ranks, 1024 one-byte elements, worked by hand: weights 1, 2^-1.2 = 0.435275, 3^-1.2 = 0.267581,
#: 4^-1.2 = 0.189465 (sum 1.892321); 1024 x weight / sum = 541.13, 235.54, 144.80, 102.53; floors 541, 235, 144,
#: 102 leave 2, which go to the largest remainders (0.80: destination 2, 0.54: destination 1)
ZIPF_ROW_1024 = [541, 236, 145, 102]


def test_zipf_matrix_matches_the_hand_computation():
    m = splits.parse("zipf:1.2").matrix(1024, 4)
    assert m.tolist() == [ZIPF_ROW_1024] * 4
    described = splits.parse("zipf:1.2").describe(1024, 4)
    assert described == {"send_max": 1024, "recv_max": 4 * 541, "recv_imbalance": pytest.approx(4 * 541 / 1024)}


def test_uniform_split_of_a_count_n_does_not_divide_still_receives_evenly():
    m = splits.UNIFORM.matrix(10, 4)
    # 10 over 4: 2 each and 2 left over, given to the sender itself and the rank after it
    assert m.tolist() == [[3, 3, 2, 2], [2, 3, 3, 2], [2, 2, 3, 3], [3, 2, 2, 3]]
    assert m.sum(axis=0).tolist() == [10] * 4 and m.sum(axis=1).tolist() == [10] * 4


def test_hot_destination_and_a_histogram_file(tmp_path):
    assert splits.parse("hot:5").matrix(8, 4).tolist() == [[5, 1, 1, 1]] * 4
    assert splits.parse("hot:1").matrix(8, 4).tolist() == splits.UNIFORM.matrix(8, 4).tolist()
    hist = tmp_path / "router.txt"
    hist.write_text("# tokens per expert, 8 experts\n6, 2  1 1\n0 0 4 2\n")
    with pytest.raises(UsageError, match="2 rows make a matrix of 2 x 2, but row 1 has 4 weights"):
        splits.parse(f"file:{hist}")
    hist.write_text("# tokens per expert, 8 experts on 4 ranks (2 each)\n6 2 1 1 0 0 4 2\n")
    pattern = splits.parse(f"file:{hist}")
    assert pattern.matrix(16, 4).tolist() == [[8, 2, 0, 6]] * 4  # experts (6+2), (1+1), (0+0), (4+2)
    assert pattern.text.startswith("file:router.txt#") and len(pattern.text.split("#")[1]) == 8
    with pytest.raises(UsageError, match="8 bins cannot be spread over 3 ranks"):
        pattern.check_ranks(3)


def test_a_matrix_file_scales_its_heaviest_row_to_the_size(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text("0 2 2\n1 0 1\n0 0 0\n")
    m = splits.parse(f"file:{path}").matrix(8, 3)
    assert m.tolist() == [[0, 4, 4], [2, 0, 2], [0, 0, 0]]
    other = tmp_path / "n.txt"
    other.write_text("0 2 2\n1 0 2\n0 0 0\n")
    assert splits.parse(f"file:{other}").text != splits.parse(f"file:{path}").text  # same name, other weights


@pytest.mark.parametrize("text, why", [("zipf", "give uniform"), ("zipf:0", "0 < S"), ("zipf:x", "0 < S"),
                                       ("hot:0.5", "1 <= K"), ("gauss:1", "give uniform"),
                                       ("file:/nonexistent/x", "cannot read")])
def test_bad_patterns_are_one_line(text, why):
    with pytest.raises(UsageError, match=why):
        splits.parse(text)


def test_bad_file_lines_are_named(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("1 2\n3 x\n")
    with pytest.raises(UsageError, match=r"bad.txt:2: not a list of numbers"):
        splits.parse(f"file:{path}")
    path.write_text("1 -2\n")
    with pytest.raises(UsageError, match=r"bad.txt:1: weights must be finite"):
        splits.parse(f"file:{path}")


@pytest.mark.parametrize("text", ["uniform", "zipf:0.7", "zipf:2.5", "hot:3"])
@pytest.mark.parametrize("n", [2, 3, 4, 7])
@pytest.mark.parametrize("count", [1, 5, 64, 1000])
def test_every_rank_sends_exactly_the_size(text, n, count):
    m = splits.parse(text).matrix(count, n)
    assert (m >= 0).all() and m.sum(axis=1).tolist() == [count] * n


def test_entry_sizes_bandwidth_and_check_data_follow_the_pattern():
    zipf = splits.parse("zipf:1.2")
    entry = alltoallv_entry(zipf, itemsize=4)
    # 256 float32: 256 x weight / sum = 135.28, 58.88, 36.20, 25.63 -> 135, 59, 36, 26: rank 0 receives 4 x 135
    assert entry.buffer_counts(256, 4) == (256, 4 * 135)
    assert entry.algbw_bytes(1024, 4) == 4 * max(entry.buffer_counts(256, 4))
    assert entry.busbw_factor(4) == pytest.approx(0.75) and entry.splits is zipf
    nonblocking = with_splits(COLLECTIVES["ialltoallv"], zipf, 4)
    assert nonblocking.nonblocking and nonblocking.splits is zipf and nonblocking.name == "ialltoallv"
    assert with_splits(COLLECTIVES["allreduce"], zipf, 4) is COLLECTIVES["allreduce"]
    # what rank 1 of 4 receives, filled by every rank and checked: a wrong block is caught, the tail stays poisoned
    m = zipf.matrix(1024, 4)
    sent = {}
    for rank in range(4):
        b = Buffers(np.zeros(1024, np.uint8), np.zeros(4 * 541, np.uint8))
        entry8 = alltoallv_entry(zipf, 1)
        entry8.fill(b, Context(rank, 4), 3)
        sent[rank] = b.send.copy()
    recv = np.zeros(4 * 541, np.uint8)
    offsets = np.concatenate([[0], np.cumsum(m[:, 1])])
    for src in range(4):
        start = m[src, :1].sum()
        recv[offsets[src]:offsets[src + 1]] = sent[src][start:start + m[src, 1]]
    b = Buffers(sent[1], recv)
    assert alltoallv_entry(zipf, 1).verify(b, Context(1, 4), 3) == 0
    recv[offsets[2]] ^= 1
    assert alltoallv_entry(zipf, 1).verify(b, Context(1, 4), 3) == 1
    recv[offsets[2]] ^= 1
    recv[-1] = 7  # beyond what rank 1 receives: must stay poisoned
    assert alltoallv_entry(zipf, 1).verify(b, Context(1, 4), 3) == 1


@pytest.mark.parametrize("loop", ["native", "mpi4py", "python"])
def test_run_zipf_checked_records_nccl_tests_figures(loop, tmp_path):
    out = tmp_path / "z.jsonl"
    proc = microbench("run", "--np", "4", "alltoallv", "--splits", "zipf:1.2", "-c", "-m", "1K,4K", "-i", "4",
                      "-x", "1", "--loop", loop, "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["size_bytes"] for r in res] == [1024, 4096]
    first = res[0]
    assert first["check"] == "pass" and first["splits"] == "zipf:1.2" and first["mpi_call"] == "MPI_Alltoallv"
    assert first["send_bytes"] == 1024 and first["recv_bytes"] == 4 * 541 == first["algbw_bytes"]
    assert first["busbw_factor"] == pytest.approx(0.75)
    assert first["splits_recv_imbalance"] == pytest.approx(4 * 541 / 1024, rel=1e-5)
    assert first["algbw_gbps"] == pytest.approx(4 * 541 / (first["latency_us"]["avg"] * 1e-6) / 1e9, rel=1e-6)
    assert read_jsonl(out)[0]["options"]["splits"] == "zipf:1.2"
    assert "zipf:1.2" in proc.stdout and "MPI_Alltoallv" in proc.stdout


def test_run_uniform_and_the_nonblocking_twin(tmp_path):
    out = tmp_path / "u.jsonl"
    proc = microbench("run", "--np", "4", "alltoallv", "ialltoallv", "-c", "-m", "10,4K", "-i", "3", "-x", "1",
                      "--dtype", "float32", "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [(r["benchmark"], r["size_bytes"]) for r in res] == [
        ("alltoallv", 8), ("alltoallv", 4096), ("ialltoallv", 8), ("ialltoallv", 4096)]
    assert all(r["check"] == "pass" and r["splits"] == "uniform" and r["recv_bytes"] == r["size_bytes"]
               and r["splits_recv_imbalance"] == 1.0 for r in res)
    assert res[2]["mpi_call"] == "MPI_Ialltoallv" and "overlap" in res[3]


def test_a_corrupted_receive_fails_the_check(tmp_path):
    proc = microbench("run", "--np", "4", "alltoallv", "--splits", "hot:3", "-c", "-m", "64", "-i", "2", "-x", "0",
                      env={"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_CORRUPT": "2:alltoallv:64"}, timeout=120)
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.output


def test_a_file_pattern_is_read_once_and_refused_where_it_cannot_fit(tmp_path):
    hist = tmp_path / "hist.txt"
    hist.write_text("1 2 3 4 5 6 7 8\n")
    out = tmp_path / "f.jsonl"
    proc = microbench("run", "--np", "4", "alltoallv", "--splits", f"file:{hist}", "-c", "-m", "1K", "-i", "2",
                      "-x", "0", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.output
    (r,) = results_of(out)
    assert r["splits"].startswith("file:hist.txt#") and r["check"] == "pass"
    # bins (1+2) (3+4) (5+6) (7+8) of 36: 1024 x 3, 7, 11, 15 / 36 = 85.3, 199.1, 312.9, 426.7 -> 85 199 313 427
    assert r["recv_bytes"] == 4 * 427 and r["send_bytes"] == 1024
    proc = microbench("run", "--np", "3", "alltoallv", "--splits", f"file:{hist}", "-m", "1K", timeout=60)
    assert proc.returncode == 2 and "8 bins cannot be spread over 3 ranks" in proc.stderr, proc.output
    proc = microbench("run", "--np", "2", "allreduce", "--splits", "zipf:1", "-m", "1K", timeout=60)
    assert proc.returncode == 2 and "--splits applies to alltoallv, ialltoallv" in proc.stderr, proc.output


def test_check_and_compare_tell_the_splits_apart(tmp_path):
    """splits is part of the configuration key: a spec can name it, and a uniform and a skewed run never compare."""
    out = tmp_path / "r.jsonl"
    for pattern in ("uniform", "zipf:1.2"):
        proc = microbench("run", "--np", "2", "alltoallv", "--splits", pattern, "-m", "1K,4K", "-i", "3", "-x", "1",
                          "--out", str(out), timeout=120)
        assert proc.returncode == 0, proc.output
        (tmp_path / f"{pattern.replace(':', '-')}.jsonl").write_text(
            "".join(line + "\n" for line in out.read_text().splitlines()
                    if json.loads(line)["run_id"] == json.loads(out.read_text().splitlines()[-1])["run_id"]))
    proc = microbench("compare", "--baseline", str(tmp_path / "uniform.jsonl"), "--new",
                      str(tmp_path / "zipf-1.2.jsonl"), timeout=120)
    assert proc.returncode == 2 and "nothing to compare" in proc.stderr, proc.output
    proc = microbench("compare", "--baseline", str(tmp_path / "zipf-1.2.jsonl"), "--new",
                      str(tmp_path / "zipf-1.2.jsonl"), "--json", timeout=120)
    assert {c["config"]["splits"] for c in json.loads(proc.stdout)["rows"]} == {"zipf:1.2"}, proc.output
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "alltoallv"\nsplits = "zipf:1.2"\nmax_latency_us = 1e9\n')
    proc = microbench("check", str(out), "--spec", str(spec), "--json", timeout=120)
    assert proc.returncode == 0, proc.output
    judged = json.loads(proc.stdout)["rules"][0]["judgements"]
    assert sorted((j["config"]["splits"], j["config"]["size_bytes"]) for j in judged) == [
        ("zipf:1.2", 1024), ("zipf:1.2", 4096)]
    spec.write_text('[[rule]]\nbenchmark = "alltoallv"\nsplits = 3\nmax_latency_us = 1e9\n')
    proc = microbench("check", str(out), "--spec", str(spec), timeout=120)
    assert proc.returncode == 2 and "splits" in proc.stderr, proc.output

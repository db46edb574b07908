"""The streaming benchmark's parts (scripts/bench_traces.py): every sample it writes is read back in full.

Behaviour only (files, calls, ranks, positive figures); its speed and memory figures are the benchmark's.
"""

from __future__ import annotations

import importlib.util

import pytest

from microbench.workload.traces import read_trace

from conftest import REPO


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_traces", REPO / "scripts" / "bench_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPECTED = {"nccl": ("nccl", 16), "nccl.gz": ("nccl", 16), "nccl-profiler": ("nccl-profiler", 1),
            "deepspeed": ("deepspeed", 1), "kineto": ("kineto", 1), "kineto.gz": ("kineto", 1),
            "execution-trace": ("execution-trace", 1)}


def test_every_sample_is_its_format(bench, tmp_path):
    assert set(bench.FORMATS) == set(EXPECTED)
    for fmt, (detected, ranks) in EXPECTED.items():
        path = tmp_path / f"s.{fmt}"
        text_bytes = bench.write_sample(path, fmt, 300_000)
        assert 300_000 <= text_bytes < 400_000
        report = read_trace(str(path))
        assert report.format == detected and len(report.ranks) == ranks and report.total_calls > 0, fmt
        assert report.unreadable == 0, fmt


def test_measure_reads_in_a_fresh_process(bench, tmp_path):
    path = tmp_path / "s.nccl"
    bench.write_sample(path, "nccl", 200_000)
    m = bench.measure(path, repeat=2)
    assert m["seconds"] > 0 and m["cpu_seconds"] > 0 and m["peak_mib"] >= m["base_mib"] > 0
    assert m["calls"] == read_trace(str(path)).total_calls and m["ranks"] == 16

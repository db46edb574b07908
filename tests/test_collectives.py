"""The benchmark table is data: each entry's fields agree with each other and with the transports."""

from __future__ import annotations

import inspect
import re

import pytest

from microbench.benchmarks.base import LARGE_MESSAGE_BYTES
from microbench.benchmarks.table import COLLECTIVES, pair_metric_benchmark
from microbench.errors import UsageError
from microbench.measure.backends.mpi import MPIBackend, NativeMPIBackend
from microbench.measure.native import toolchain
from microbench.measure.testhooks import FaultHooks, SizeHooks


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_busbw_formula_text_is_the_factor(name, n):
    coll = COLLECTIVES[name]
    # the formula as written for tables and docs, evaluated at n ranks ("2(n-1)/n" -> 2*(n-1)/n)
    expression = re.sub(r"(\d)\(", r"\1*(", coll.busbw_formula).replace("n", str(n))
    assert eval(expression) == pytest.approx(coll.busbw_factor(n))  # noqa: S307 - our own constant text


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_every_primitive_exists_on_every_mpi_backend(name):
    primitive = COLLECTIVES[name].primitive
    for backend in (MPIBackend, NativeMPIBackend):
        assert callable(getattr(backend, primitive, None)), (backend.__name__, primitive)
    assert primitive in inspect.getsource(COLLECTIVES[name].build)


def test_native_call_kinds_come_from_the_c_source():
    kinds = toolchain.KINDS
    assert kinds["nothing"] == 0 and len(set(kinds.values())) == len(kinds)
    used = set(re.findall(r'_call\("(\w+)"', inspect.getsource(NativeMPIBackend)))
    used |= {"bistream", "stream"}  # chosen by a conditional expression
    assert used <= set(kinds), used - set(kinds)


def test_counts_follow_omb_defaults():
    assert COLLECTIVES["latency"].counts.at(8) == (10000, 100)
    assert COLLECTIVES["latency"].counts.at(LARGE_MESSAGE_BYTES + 1) == (1000, 10)
    assert COLLECTIVES["bw"].counts.at(8) == (100, 10) and COLLECTIVES["bibw"].counts.at(1 << 20) == (20, 2)
    assert COLLECTIVES["allreduce"].counts.at(LARGE_MESSAGE_BYTES) == (1000, 100)


def test_pairs_metrics_name_their_benchmarks():
    assert pair_metric_benchmark("latency").name == "latency"
    assert pair_metric_benchmark("bandwidth").name == "bw"


def test_hooks_act_only_when_testing_is_enabled(capsys):
    env = {"MICROBENCH_TEST_CORRUPT": "1:allreduce:8"}
    assert FaultHooks.from_env(env).at(1, "allreduce", 8) == SizeHooks()
    assert "MICROBENCH_TEST_CORRUPT ignored" in capsys.readouterr().err
    hooks = FaultHooks.from_env({**env, "MICROBENCH_TESTING": "1"})
    assert hooks.at(1, "allreduce", 8) == SizeHooks(corrupt=True)
    assert hooks.at(0, "allreduce", 8) == SizeHooks() and hooks.at(1, "allreduce", 16) == SizeHooks()


@pytest.mark.parametrize("value", ["1:allreduce", "x:allreduce:8", "1::8", "1:allreduce:8K"])
def test_a_malformed_hook_is_a_usage_error(value):
    with pytest.raises(UsageError, match="MICROBENCH_TEST_STALL=.*expected RANK:BENCHMARK:SIZE"):
        FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_STALL": value})


def test_a_stall_needs_the_watchdog():
    hooks = FaultHooks.from_env({"MICROBENCH_TESTING": "1", "MICROBENCH_TEST_STALL": "1:allreduce:8"})
    hooks.check_usable(3.0)
    with pytest.raises(UsageError, match="--timeout above 0"):
        hooks.check_usable(0)

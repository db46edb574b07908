"""Property tests: generated records and tool logs fed to every reader give a clean error or a valid result.

"Clean error" is a ``UsageError`` (one line, exit 2 at the command line); "valid result" is one whose values
are what the schema allows (finite latencies of at least 0, no control characters in strings read). Any other
exception, and a hang (pytest-timeout), fails. Records are drawn two ways: from the record model itself
(``model_strategies``: every type and range it declares, so the tests follow the model), where records that
also satisfy the model's relations must be read, and read alike by the row and the columnar reader; and from
microbench's own records with fields replaced by anything.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from fixtures.gate.synth import result, run_line

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from model_strategies import consistent, records as model_records  # noqa: E402

from microbench.errors import UsageError  # noqa: E402
from microbench.records import model  # noqa: E402
from microbench.importers import cli as import_cli  # noqa: E402
from microbench.importers import nccl_tests, omb  # noqa: E402
from microbench.records import read_runs  # noqa: E402
from microbench.results.load import load_table  # noqa: E402

# In CI (CI set, as .ci/run's caller does) the examples are derandomized: the same draws every run, so a failure
# in CI's log is reproduced by running the test again; elsewhere each run draws anew, and a failure prints the
# @reproduce_failure blob that replays it.
REPRODUCIBLE = {"derandomize": bool(os.environ.get("CI")), "print_blob": True}
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], **REPRODUCIBLE)
#: (property, "accepted" | "refused") -> examples seen this session: a property that refused every input would
#: pass its own test; test_each_property_saw_inputs_accepted_and_refused fails it
SEEN: Counter = Counter()
CONTROL = {chr(c) for c in (*range(0, 9), *range(10, 32), *range(127, 160))}

scalars = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
numbers = (st.floats(allow_nan=False, allow_infinity=False) | st.integers(min_value=-(10 ** 25), max_value=10 ** 25)
           | st.text(max_size=4) | st.none())
FIELDS = ["type", "run_id", "schema", "benchmark", "size_bytes", "ranks", "backend", "latency_us", "algbw_gbps",
          "busbw_gbps", "algbw_bytes", "busbw_factor", "check", "hosts", "mpi", "time_utc", "stragglers", "dtype"]


@st.composite
def records(draw) -> list:
    """A run line, results and an end line in microbench's shape, with some fields replaced by anything."""
    recs = _clean_records(draw(st.text(max_size=10)) + " Open MPI")
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(recs) - 1))
        name = draw(st.sampled_from(FIELDS))
        value = draw(st.one_of(json_values, numbers, st.dictionaries(st.sampled_from(["avg", "p50", "min"]), numbers,
                                                                     max_size=3)))
        recs[i] = {**recs[i], name: value}
    return recs


def _clean_records(library: str = "Open MPI") -> list:
    """A run line, two results and an end line as microbench writes them."""
    return [run_line("r0", library=library), *[result("allreduce", s, 10.0, run_id="r0") for s in (8, 64)],
            {"type": "end", "run_id": "r0", "status": "complete", "reason": "", "results": 2}]


def _lines(recs: list, mangle: bytes) -> bytes:
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return mangle + data if mangle[:1] in (b"\xef", b"") else data[: len(data) // 2] + mangle + data[len(data) // 2:]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.mark.timeout(600)
@SETTINGS
@given(recs=records(), mangle=st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff", b"[[[[", b"\n{\n", b"\x00"]))
@example(recs=_clean_records(), mangle=b"")
# found by a run under load: a result whose run id holds a control character and names no run line is read as a
# run of its own, whose id reached the run's metadata unprinted
@example(recs=[*_clean_records()[:2], result("allreduce", 8, 10.0, run_id="\x1f")], mangle=b"")
def test_generated_records_give_a_clean_error_or_a_valid_table(recs, mangle):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "foreign-gen.jsonl"
        path.write_bytes(_lines(recs, mangle))
        try:
            table = load_table([path])
        except UsageError as exc:
            event(f"load_table: {str(exc).split(': ')[1 if ':' in str(exc) else 0][:30]}")
            SEEN["records", "refused"] += 1
            assert "\n" not in str(exc)
        else:
            event("load_table: a table")
            SEEN["records", "accepted"] += 1
            for values in table.latency.values():
                assert all(math.isnan(v) or (math.isfinite(v) and v >= 0) for v in values.tolist())
            assert all(not (set(s) & CONTROL) for run in table.runs for s in _strings(run.meta))
        try:
            runs = read_runs([path])
        except UsageError as exc:
            assert "\n" not in str(exc)
        else:
            for run in runs:
                for res in run.results:
                    lat = res.get("latency_us") or {}
                    assert all(math.isfinite(v) and v >= 0 for k, v in lat.items() if k != "over")
                assert not any(set(s) & CONTROL for s in _strings(run.meta))


MODEL_SETTINGS = settings(max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], **REPRODUCIBLE)


def _write_run(folder: str, run: dict, results: list[dict], end: dict) -> Path:
    path = Path(folder) / "foreign-model.jsonl"
    lines = [{**run, "run_id": "r", "schema": 1}, *({**r, "run_id": "r"} for r in results), {**end, "run_id": "r"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


@pytest.mark.timeout(600)
@MODEL_SETTINGS
@given(run=model_records(model.RunRecord), results=st.lists(model_records(model.ResultRecord), min_size=1, max_size=3),
       end=model_records(model.EndRecord))
def test_records_the_model_allows_are_read_and_read_alike(run, results, end):
    """Records drawn from the model and made consistent are accepted by both readers, which agree on them (the
    property fails if the readers refuse what the model allows)."""
    results = [consistent(r) for r in results]
    with tempfile.TemporaryDirectory() as folder:
        path = _write_run(folder, run, results, end)
        table = load_table([path])
        runs = read_runs([path])
    assert len(runs) == 1 and len(runs[0].results) == len(results) == len(table)
    for row, rec in enumerate(runs[0].results):
        for stat, value in rec["latency_us"].items():
            if stat in table.latency:
                assert table.latency[stat][row] == value
        assert table.values("busbw", "avg")[row] == pytest.approx(rec["busbw_gbps"], rel=1e-9)


@pytest.mark.timeout(600)
@MODEL_SETTINGS
@given(run=model_records(model.RunRecord), results=st.lists(model_records(model.ResultRecord), min_size=1, max_size=3),
       end=model_records(model.EndRecord))
@example(run=run_line("r0"), results=[result("allreduce", 8, 10.0, run_id="r0")],
         end={"type": "end", "status": "complete", "reason": "", "results": 1})
def test_any_record_of_the_model_s_types_is_refused_by_both_readers_or_read_by_both(run, results, end):
    """Records drawn from the model's types alone (their figures need not agree): both readers refuse the same
    file, naming a line of it, or both read it with the same rows."""
    with tempfile.TemporaryDirectory() as folder:
        path = _write_run(folder, run, results, end)
        outcomes = []
        for read in (lambda: len(load_table([path])), lambda: sum(len(r.results) for r in read_runs([path]))):
            try:
                outcomes.append(read())
            except UsageError as exc:
                assert "\n" not in str(exc) and f"{path}:" in str(exc), exc
                outcomes.append("refused")
    event(f"outcome: {'refused' if outcomes[0] == 'refused' else 'read'}")
    SEEN["model types", "refused" if outcomes[0] == "refused" else "accepted"] += 1
    assert outcomes[0] == outcomes[1]


@pytest.fixture(autouse=True, scope="module")
def _no_index():
    """The reader reads the files themselves (entries of temporary files would only pile up)."""
    before = os.environ.get("MICROBENCH_INDEX")
    os.environ["MICROBENCH_INDEX"] = "off"
    yield
    if before is None:
        del os.environ["MICROBENCH_INDEX"]
    else:
        os.environ["MICROBENCH_INDEX"] = before


def _import(runs) -> None:
    """The import's check of every record (``importers.cli._records``), without writing."""
    import_cli._records([(run, "0" * 64) for run in runs])


OMB_HEAD = ("# OSU MPI Allreduce Latency Test v7.4\n"
            "# Size  Avg Latency(us)  Min Latency(us)  Max Latency(us)  Iterations\n")
tokens = st.one_of(st.integers(-(10 ** 40), 10 ** 40).map(str), st.floats().map(repr),
                   st.sampled_from(["nan", "inf", "-inf", "1e400", "N/A", "-0", ""]), st.text(max_size=5))


@pytest.mark.timeout(600)
@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(1, 1 << 20).map(str), *[st.floats(0, 1e6).map(repr)] * 3,
                               st.integers(1, 10 ** 6).map(str)).map(list), min_size=1, max_size=5)
       | st.lists(st.lists(tokens, min_size=1, max_size=6), max_size=5))
@example(rows=[["8", "1.5", "1.2", "1.8", "1000"], ["1024", "3.25", "3.0", "3.5", "1000"]])
def test_generated_omb_logs_give_a_clean_error_or_valid_records(rows):
    text = OMB_HEAD + "".join(" ".join(r) + "\n" for r in rows)
    try:
        runs, _ = omb.parse(text, "gen.log", 2, None)
        _import(runs)
        event("omb: imported")
        SEEN["omb", "accepted"] += 1
    except UsageError as exc:
        event("omb: error")
        SEEN["omb", "refused"] += 1
        assert "\n" not in str(exc) and str(exc).startswith("gen.log")


@pytest.mark.timeout(600)
@SETTINGS
@given(doc=st.fixed_dictionaries({"config": json_values | st.fixed_dictionaries({"devices": json_values}),
                                  "results": st.lists(st.dictionaries(
                                      st.sampled_from(["size", "count", "type", "redop", "root", "out_of_place",
                                                       "in_place"]), json_values | numbers), max_size=3),
                                  "args": st.just(["all_reduce_perf"])}))
@example(doc={"config": {"devices": [{"rank": 0, "hostname": "a"}, {"rank": 1, "hostname": "a"}]},
              "results": [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": -1,
                           **{side: {"time": 100.0, "alg_bw": 10.49, "bus_bw": 10.49, "nwrong": 0}
                              for side in ("out_of_place", "in_place")}}],
              "args": ["all_reduce_perf"]})
def test_generated_nccl_json_gives_a_clean_error_or_valid_records(doc):
    try:
        run = nccl_tests.parse_json(json.dumps(doc), "gen.json", None, None, None)
        _import([run])
        SEEN["nccl json", "accepted"] += 1
    except UsageError as exc:
        SEEN["nccl json", "refused"] += 1
        assert "\n" not in str(exc) and str(exc).startswith(("gen.json", "nccl-tests"))


def test_each_property_saw_inputs_accepted_and_refused():
    """Each property above that ran in this session (file order) accepted some inputs and refused others: one
    that refused everything, or accepted everything hostile, would pass its own test. The accepted ones include
    an explicit well-formed example each (@example), so this holds on every draw."""
    ran = {name for name, _ in SEEN}
    if not ran:
        pytest.skip("no property of this file ran before this test (run the file, not this test alone)")
    assert all(SEEN[name, "accepted"] and SEEN[name, "refused"] for name in ran), SEEN

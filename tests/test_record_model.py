"""The record model (microbench/records/model.py): the one declaration of every record type.

- the JSON Schema beside it is printed from it and current;
- what ``microbench run`` writes passes the model unchanged (nothing dropped, nothing converted), and the
  schema accepts it;
- the builders cannot write what the model does not declare, nor figures that break its relations;
- the relations are one definition checked two ways (one record, whole columns) with the same verdicts;
- a projection keeps the types and ranges of the fields it keeps.
"""

from __future__ import annotations

import json
import sys

import msgspec
import numpy as np
import pytest
from conftest import REPO, run_process

from microbench.records import model, projection, relations, schema, schema_path
from microbench.records.model import ModelError

RUN = ["run", "--np", "2", "allreduce", "latency", "bw", "iallreduce", "pairs", "-m", "8:64", "-i", "20", "-x", "2"]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> list[dict]:
    """The records of one real run of several kinds of benchmark (and its --samples file)."""
    folder = tmp_path_factory.mktemp("model")
    out, samples = folder / "run.jsonl", folder / "samples.jsonl"
    done = run_process([sys.executable, "-m", "microbench", *RUN, "--out", str(out), "--samples", str(samples)],
                       timeout=240, cwd=folder)
    assert done.returncode == 0, done.output
    return [json.loads(line) for path in (out, samples) for line in path.read_text().splitlines()]


def test_the_schema_file_is_printed_from_the_model():
    assert schema_path().read_text() == schema.schema_text(), (
        "records/schema.json is not what the model prints: run `python -m microbench.records.schema`")


def test_what_run_writes_passes_the_model_unchanged(written):
    kinds = {r["type"] for r in written}
    assert {"run", "result", "end", "samples"} <= kinds
    assert {r.get("benchmark") for r in written if r["type"] == "result"} >= {"allreduce", "latency", "pairs",
                                                                               "iallreduce"}
    for record in written:
        kind = model.RECORD_TYPES[record["type"]]
        again = relations.make(kind, **{k: v for k, v in record.items() if k != "type"})
        assert again == record and list(again) == list(record), record["type"]


def test_the_schema_accepts_what_run_writes_and_refuses_a_wrong_type(written):
    from microbench.records.validate import problems

    assert all(problems(r) == [] for r in written)
    result = next(r for r in written if r["type"] == "result")
    assert problems({**result, "size_bytes": "eight"})


def test_a_builder_cannot_write_an_undeclared_field_or_an_impossible_figure(written):
    result = next(r for r in written if r["type"] == "result" and r["benchmark"] == "allreduce")
    fields = {k: v for k, v in result.items() if k != "type"}
    with pytest.raises(ModelError, match="does not declare: new_figure"):
        relations.make(model.ResultRecord, **fields, new_figure=1)
    with pytest.raises(ModelError, match="does not declare: latency_us.p42"):
        relations.make(model.ResultRecord, **{**fields, "latency_us": {**fields["latency_us"], "p42": 1.0}})
    with pytest.raises(ModelError, match="latency_us.p10 .* is above latency_us.p50"):
        relations.make(model.ResultRecord, **{**fields, "latency_us": {**fields["latency_us"],
                                                                     "p10": fields["latency_us"]["p50"] * 2}})
    with pytest.raises(ModelError, match="busbw_gbps .* disagrees with its definition"):
        relations.make(model.ResultRecord, **{**fields, "busbw_gbps": fields["busbw_gbps"] * 2 + 1})
    with pytest.raises(ModelError, match=r">= 0.001"):
        relations.make(model.ResultRecord, **{**fields, "latency_us": {**fields["latency_us"], "min": 1e-300}})
    with pytest.raises(ModelError, match="without dtype"):
        relations.make(model.ResultRecord, **{k: v for k, v in fields.items() if k != "dtype"})


def test_the_relations_give_the_same_verdict_on_one_record_and_on_columns():
    rng = np.random.default_rng(7)
    columns = {s: rng.uniform(1, 10, 500) for s in model.LATENCY_STATS}
    columns["p50"][::7] = np.nan  # an absent statistic is not judged
    whole = {rel: bad for rel, bad in relations.relation_violations(columns)}
    assert any(bad.any() for bad in whole.values()) and not all(bad.all() for bad in whole.values())
    for row in range(0, 500, 37):
        one = {s: columns[s][row] for s in columns}
        for rel, bad in relations.relation_violations(one):
            assert bool(bad) == bool(whole[rel][row])


def test_a_projection_keeps_the_ranges_of_what_it_keeps():
    view = projection.project(model.ResultRecord, {"run_id", "benchmark", "backend", "size_bytes", "ranks",
                                              "latency_us", "algbw_gbps", "busbw_gbps"})
    decoder = msgspec.json.Decoder(view)
    line = {"type": "result", "run_id": "r", "benchmark": "allreduce", "backend": "mpi", "size_bytes": 8,
            "ranks": 2, "latency_us": {"p50": 1.0}, "algbw_gbps": None, "busbw_gbps": None, "ignored": [1, {}]}
    assert decoder.decode(json.dumps(line)).latency_us.p50 == 1.0
    for bad in ({"latency_us": {"p50": 0.0}}, {"size_bytes": -1}, {"ranks": 0}, {"algbw_gbps": 2e6}):
        with pytest.raises(msgspec.ValidationError):
            decoder.decode(json.dumps({**line, **bad}))


def test_the_schema_is_generated_not_written_by_hand():
    text = schema_path().read_text()
    assert "generated from microbench/records/model.py" in text
    assert (REPO / "microbench" / "records" / "model.py").exists()


def test_bytes_that_are_not_utf8_are_written_as_escapes_a_reader_can_read():
    """A string with bytes the OS gave that are not UTF-8 (a Latin-1 file name, as surrogate escapes) would make a
    line no JSON reader accepts: ``make`` writes those bytes as ``\\xNN``."""
    from microbench.records.writer import json_line

    rec = relations.make(model.EndRecord, run_id="r", status="complete", reason="import of r\udce9.log", results=0)
    assert rec["reason"] == "import of r\\xe9.log"
    assert msgspec.json.decode(json_line(rec).encode(), type=model.AnyRecord).reason == "import of r\\xe9.log"

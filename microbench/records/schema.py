"""The JSON Schema (draft 2020-12) of every record type, printed from the record model: what ``schema.json`` beside
this module holds, for other tools (``python -m microbench.records.validate`` checks files against it).

    python -m microbench.records.schema      # rewrite schema.json from the model (a test keeps it current)
"""

from __future__ import annotations

import json

import msgspec

from microbench.records.model import RECORD_TYPES, SCHEMA_VERSION, AnyRecord, LatencyStats, ResultRecord


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of every record type, printed from the model: what ``schema.json``
    holds. ``own_required`` becomes an if/then (required unless the record carries ``source``)."""
    (_, ), components = msgspec.json.schema_components([AnyRecord], ref_template="#/$defs/{name}")
    defs = dict(components)
    defs["LatencyStats"]["minProperties"] = 1  # problems(): a result holds at least one statistic
    for kind in RECORD_TYPES.values():
        node = defs[kind.__name__]
        node["description"] = (kind.__doc__ or "").split("\n\n")[0].replace("\n", " ").strip()
        clauses = []
        if kind.own_required:
            clauses.append({"if": {"not": {"required": ["source"]}}, "then": {"required": list(kind.own_required)}})
        if kind is ResultRecord:
            clauses.append({"if": {"not": {"required": ["source"]}},
                            "then": {"properties": {"latency_us": {"required": list(LatencyStats.own_required)}}}})
            clauses.append({"if": {"properties": {"benchmark": {"const": "pairs"}}, "required": ["benchmark"]},
                            "then": {"required": list(ResultRecord.pairs_required)},
                            "else": {"if": {"not": {"required": ["source"]}},
                                     "then": {"required": list(ResultRecord.harness_required)}}})
        if clauses:
            node["allOf"] = clauses
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://microbench.invalid/schema/records/{SCHEMA_VERSION}.json",
        "title": f"microbench records, schema version {SCHEMA_VERSION}",
        "description": ("One JSON object per line, generated from microbench/records/model.py (do not edit by "
                        "hand). A run is a 'run' line, its 'result' lines (and the diagnostics' 'cycle', 'soak' "
                        "and 'bisect' lines) and an 'end' line; microbench replay --out writes 'replay' lines; "
                        "--samples files hold 'samples' lines. Readers skip fields they do not know, so every "
                        "object allows more properties than it lists. Records imported from other tools carry "
                        "'source' and leave microbench's own harness fields out. Beyond this schema, readers "
                        "refuse records whose figures break the relations their definitions imply "
                        "(microbench.records.relations). docs/records.md describes each field."),
        "oneOf": [{"$ref": f"#/$defs/{kind.__name__}"} for kind in RECORD_TYPES.values()],
        "$defs": defs,
    }


def schema_text() -> str:
    """``json_schema()`` as the text ``schema.json`` holds."""
    return json.dumps(json_schema(), indent=1, sort_keys=False) + "\n"


def main() -> int:  # pragma: no cover - a developer's command
    """Rewrite schema.json from the model."""
    from pathlib import Path

    path = Path(__file__).with_name("schema.json")
    path.write_text(schema_text())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""Checking records files: against the record model (what every reader checks), and against the JSON Schema
printed from it (``schema.json``, for other tools; needs ``jsonschema``, the ``test`` extra).

    python -m microbench.records.validate FILE.jsonl...   # one line per problem, exit 1 if any

Exit 0: every record conforms; 1: problems, one line each; 2: bad input (a file missing) or jsonschema not
installed, one line ``microbench: error: ...``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from microbench.errors import EXIT_BROKEN_PIPE, EXIT_USAGE, UsageError, printable
from microbench.records import schema_path
from microbench.records.files import as_results_file, lines
from microbench.records.model import RECORD_TYPES


@functools.lru_cache(maxsize=1)
def _validators() -> dict:
    try:
        import jsonschema
    except ImportError:
        raise UsageError("checking records against schema.json needs jsonschema: pip install jsonschema "
                         "(or pip install -e '.[test]' in a checkout)") from None

    schema = json.loads(__loader__.get_data(str(schema_path())))  # an install's file, or a zipapp's
    jsonschema.Draft202012Validator.check_schema(schema)
    registry_root = {k: v for k, v in schema.items() if k != "oneOf"}
    return {kind: jsonschema.Draft202012Validator({**registry_root, "$ref": f"#/$defs/{struct.__name__}"})
            for kind, struct in RECORD_TYPES.items()}


def problems(record: object) -> list[str]:
    """What is wrong with one record ([] when it conforms), each as 'field.path: message'."""
    if not isinstance(record, dict) or record.get("type") not in RECORD_TYPES:
        return [f"not a record: its type must be one of {', '.join(RECORD_TYPES)}"]
    errors = sorted(_validators()[record["type"]].iter_errors(record), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(record)'}: {e.message[:300]}" for e in errors]


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def file_problems(path: str | Path) -> list[str]:
    """Every problem of every line of a JSONL file, as 'file:line: ...' (an unparsable line is one)."""
    out = []
    for lineno, raw in lines(as_results_file(Path(path))):
        try:
            record = json.loads(raw.decode(), parse_constant=_no_constant)
        except UnicodeDecodeError:
            out.append(f"{path}:{lineno}: not UTF-8 text")
            continue
        except RecursionError:
            out.append(f"{path}:{lineno}: JSON nested too deeply")
            continue
        except ValueError as exc:  # JSONDecodeError, NaN and infinities
            out.append(f"{path}:{lineno}: not JSON ({getattr(exc, 'msg', exc)})")
            continue
        out.extend(f"{path}:{lineno}: {p}" for p in problems(record))
    return out


def model_problems(path: str | Path) -> list[str]:
    """Every problem the record model finds in a JSONL file, as 'file:line: ...' (a line that is not a microbench
    record is one): what the readers would refuse or skip."""
    import msgspec

    from microbench.records import relations
    from microbench.records.reader import FOREIGN, decode_line

    out = []
    for lineno, raw in lines(as_results_file(Path(path))):
        where = f"{path}:{lineno}"
        try:
            record = decode_line(raw, where)
        except UsageError as exc:
            out.append(str(exc))
            continue
        if record is None or record is FOREIGN:
            out.append(f"{where}: not a microbench record")
            continue
        problem = relations.problems(record, complete=not msgspec.structs.asdict(record).get("source"))
        if problem:
            out.append(f"{where}: {problem}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m microbench.records.validate",
                                     description="Check records files against the record model and schema.json.")
    parser.add_argument("files", nargs="+", metavar="FILE.jsonl")
    paths = parser.parse_args(argv).files
    try:
        _validators()
        found = [p for path in paths for p in (*model_problems(path), *file_problems(path))]
        for p in found:
            print(printable(p))
        sys.stdout.flush()
    except UsageError as exc:
        print(f"microbench: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        sys.stdout = None  # the reader went away: nothing more to print, not even at exit
        return EXIT_BROKEN_PIPE
    return 1 if found else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

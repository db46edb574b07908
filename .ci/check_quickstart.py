"""Check what the README's first Quick-start command promises, from what it left behind (run by .ci/run).

    python .ci/check_quickstart.py RUN_LOG RECORDS.jsonl PLOTS_DIR

RUN_LOG is what the command printed. The checks use jsonschema and matplotlib directly, not microbench's own
readers, so a bug in those cannot hide a broken Quick start:
- the OMB-style table: one table per core benchmark (allreduce, allgather, reduce_scatter, broadcast, latency, bw),
  each a column header and rows of powers of two up to 1 MiB with a positive average latency;
- the records: every line valid against microbench/records/schema.json; one run record, one end record with
  status "complete"; for each benchmark, result records for exactly the sizes its table shows, with the
  table's Avg(us) (printed to 2 decimals);
- the figures: for each benchmark a PNG in PLOTS_DIR that decodes to a picture of more than one colour.
Prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CORE = ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency", "bw")
SCHEMA = Path(__file__).resolve().parent.parent / "microbench" / "records" / "schema.json"
MIB = 1 << 20


def tables(log: str) -> dict[str, list[tuple[int, float]]]:
    """benchmark -> [(size bytes, Avg us)] from the printed tables. A table's title line is the one followed by
    its '# backend ...' line; its rows are the lines of numbers after the '#    Size(B)' header."""
    lines = log.splitlines()
    found: dict[str, list[tuple[int, float]]] = {}
    title = None
    for i, line in enumerate(lines):
        m = re.match(r"# (\w+): ", line)
        if m and i + 1 < len(lines) and lines[i + 1].startswith("# backend "):
            title = m.group(1)
        elif line.lstrip("# ").startswith("Size(B)") and title:
            rows = found.setdefault(title, [])
            for row in lines[i + 1:]:
                cells = row.split()
                if not cells or not cells[0].isdigit():
                    break
                rows.append((int(cells[0]), float(cells[1])))
            title = None
    return found


def table_problems(found: dict[str, list[tuple[int, float]]]) -> list[str]:
    out = []
    if list(found) != list(CORE):
        out.append(f"table: expected tables for {', '.join(CORE)} in that order, found {', '.join(found) or 'none'}")
    for name, rows in found.items():
        sizes = [s for s, _ in rows]
        if not rows:
            out.append(f"table {name}: a header and no rows")
            continue
        if sizes != [sizes[0] << k for k in range(len(sizes))] or sizes[-1] != MIB or sizes[0] > 8:
            out.append(f"table {name}: sizes {sizes} are not the powers of two from at most 8 B to 1 MiB")
        if not all(avg > 0 for _, avg in rows):
            out.append(f"table {name}: an average latency that is not positive: {rows}")
    return out


def record_problems(path: Path, found: dict[str, list[tuple[int, float]]]) -> list[str]:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    out, records = [], []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            out.append(f"{path}:{lineno}: not JSON ({exc.msg})")
            continue
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is not None:
            out.append(f"{path}:{lineno}: not valid against {SCHEMA.name}: {error.message[:300]}")
        records.append(record)
    kinds = [r.get("type") for r in records]
    if kinds.count("run") != 1 or kinds.count("end") != 1:
        out.append(f"{path}: expected one run and one end record, found types {sorted(set(kinds))}")
    ends = [r for r in records if r.get("type") == "end"]
    if ends and ends[0].get("status") != "complete":
        out.append(f"{path}: the end record says {ends[0].get('status')!r}, not 'complete'")
    results: dict[str, dict[int, float]] = {}
    for r in records:
        if r.get("type") == "result":
            results.setdefault(r["benchmark"], {})[r["size_bytes"]] = r["latency_us"]["avg"]
    if sorted(results) != sorted(CORE):
        out.append(f"{path}: results for {sorted(results)}, expected {sorted(CORE)}")
    for name, rows in found.items():
        recorded = results.get(name, {})
        if sorted(recorded) != [s for s, _ in rows]:
            out.append(f"{path}: {name} sizes {sorted(recorded)} differ from its table's {[s for s, _ in rows]}")
            continue
        off = [(s, avg, recorded[s]) for s, avg in rows if abs(recorded[s] - avg) > 0.0051]
        if off:
            out.append(f"{path}: {name} Avg(us) in the table differs from the records' latency_us.avg: {off}")
    return out


def figure_problems(plots: Path) -> list[str]:
    import matplotlib.image

    out = []
    for name in CORE:
        png = plots / f"{name}.png"
        if not png.is_file():
            out.append(f"figure {png}: not written")
            continue
        if png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            out.append(f"figure {png}: not a PNG")
            continue
        pixels = matplotlib.image.imread(png)
        if pixels.shape[0] < 100 or pixels.shape[1] < 100 or pixels.min() == pixels.max():
            out.append(f"figure {png}: {pixels.shape[1]} x {pixels.shape[0]} pixels of one colour")
    return out


def main(argv: list[str]) -> int:
    log, records, plots = Path(argv[0]), Path(argv[1]), Path(argv[2])
    found = tables(log.read_text())
    problems = table_problems(found)
    problems += record_problems(records, found) if records.is_file() else [f"{records}: not written"]
    problems += figure_problems(plots)
    for p in problems:
        print(f"quick start: {p}")
    if not problems:
        print(f"quick start: {len(found)} tables, {sum(map(len, found.values()))} rows, records valid and matching "
              f"the tables, {len(CORE)} figures")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""docs/adding-a-benchmark.md, applied as written to a scratch copy of the package: it builds and passes -c."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from conftest import REPO, microbench, results_of

DOC = REPO / "docs" / "adding-a-benchmark.md"


def blocks(language: str) -> list[str]:
    """The doc's fenced code blocks in one language, dedented (they sit in a numbered list)."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", DOC.read_text(), re.S | re.M)
    return ["\n".join(line[len(indent):] for line in body.splitlines()) + "\n" for indent, body in found]


def insert_methods(path: Path, methods: dict[str, str]) -> None:
    """Append each method's source to the end of its class (``methods``: class name -> source)."""
    lines = path.read_text().splitlines(keepends=True)
    ends = {node.name: node.end_lineno for node in ast.parse("".join(lines)).body if isinstance(node, ast.ClassDef)}
    for name in sorted(methods, key=lambda n: -ends[n]):
        body = "".join("    " + line if line.strip() else line for line in methods[name].splitlines(keepends=True))
        lines[ends[name]:ends[name]] = ["\n", body]
    path.write_text("".join(lines))


def apply_the_doc(package: Path) -> None:
    checkdata, entry, backends = blocks("python")
    (c_block,) = blocks("c")
    with open(package / "benchmarks" / "checkdata.py", "a") as f:
        f.write("\n\n" + checkdata)
    table = package / "benchmarks" / "table.py"
    text = table.read_text()
    text = text.replace("COLLECTIVES: dict[str, Collective] = {", entry + "\n\nCOLLECTIVES: dict[str, Collective] = {", 1)
    text = text.replace("IALLTOALLV)", "IALLTOALLV, GATHER)", 1)
    table.write_text(text)
    methods = dict(re.findall(r"# (\w+)\n(.*?)(?=\n# |\Z)", backends, re.S))
    insert_methods(package / "measure" / "backends" / "mpi.py",
                   {k: methods[k] for k in ("MPIBackend", "NativeMPIBackend")})
    insert_methods(package / "measure" / "backends" / "torch_dist.py", {"TorchBackend": methods["TorchBackend"]})
    enum_line, *case_lines = c_block.splitlines()
    loop = package / "measure" / "native" / "mbloop.c"
    source = loop.read_text()
    source = re.sub(r"(enum\s*{.*?)(\n};)", lambda m: m.group(1) + "\n    " + enum_line.strip() + m.group(2), source,
                    count=1, flags=re.S)
    source = source.replace("    case MB_NOTHING:\n        return MPI_SUCCESS;\n",
                            "    case MB_NOTHING:\n        return MPI_SUCCESS;\n" + "\n".join(
                                "    " + line for line in case_lines) + "\n", 1)
    loop.write_text(source)


def test_the_worked_example_builds_and_passes_its_check(tmp_path):
    from microbench.measure.native.toolchain import KINDS

    number = int(re.search(r"MB_GATHER = (\d+)", DOC.read_text()).group(1))
    assert number not in KINDS.values(), f"the doc's MB_GATHER = {number} is already a call kind"
    package = tmp_path / "pkg" / "microbench"
    shutil.copytree(REPO / "microbench", package, ignore=shutil.ignore_patterns("__pycache__"))
    apply_the_doc(package)
    out = tmp_path / "gather.jsonl"
    proc = microbench("run", "--np", "2", "gather", "-c", "-m", "8:1K", "-i", "5", "-x", "1", "--loop", "native",
                      "--out", str(out), timeout=240, cwd=tmp_path,
                      env={"PYTHONPATH": str(package.parent), "MICROBENCH_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.output
    res = results_of(out)
    assert [r["size_bytes"] for r in res] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert all(r["benchmark"] == "gather" and r["check"] == "pass" and r["loop"] == "native" for r in res), res
    assert all(r["recv_bytes"] == 2 * r["size_bytes"] for r in res)
    assert all(r.get("mpi_call") == "MPI_Gather" for r in res), [r.get("mpi_call") for r in res]

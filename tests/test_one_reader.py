"""Records are read one way: no module outside the readers opens a results file or decodes JSON lines itself.

The readers are ``records.files`` (finding and opening results files), ``records.reader`` (rows) and
``results.scan`` (columns), plus ``records.validate`` (the schema check for tests and sites). Every other module
that opens a file or decodes JSON is listed in ``OTHER_INPUTS`` with what it reads, which is never a results
file; a new one fails this test until it is listed (or, if it reads records, until it goes through the readers).
The scan is of the source (ast), as tests/test_layers.py does for imports, so an import inside a function
counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "microbench"

#: the modules that read records files
READERS = {
    "records/files.py": "finds and opens results files (regular files, links kept inside the folder, size first)",
    "records/reader.py": "decodes every line into the record model: the row view",
    "results/scan.py": "decodes a projection of the record model: the columnar view",
    "records/validate.py": "checks records against the JSON Schema (tests and sites' own checks)",
}
#: every other module that opens a file or decodes JSON, and what it reads (never a results file)
OTHER_INPUTS = {
    "benchmarks/workload_sizes.py": "a `microbench workload --json` file (--sizes-from)",
    "benchmarks/splits.py": "a split file of weights (--splits file:PATH, --routing file:PATH), text",
    "cli.py": "/dev/null, to silence stdout after a broken pipe",
    "cluster/cache_folder.py": "what microbench remembers between launches in its cache folder (mpicc -show, the launcher)",
    "cluster/facts.py": "/proc and /sys facts of the machine",
    "cluster/machine.py": "/proc/loadavg, /proc/stat and /proc/PID/stat (what else the host was doing)",
    "cluster/launch.py": "writes the --np parent's signal note",
    "cluster/links.py": "/sys facts of a host's links (or a recorded host's copy of them)",
    "cluster/links_nvml.py": "a recorded host's NVML answers (nvml.json)",
    "cluster/links_shaping.py": "tc's JSON list of qdiscs, or a recorded host's (tc.json)",
    "cluster/nccl_tuning.py": "NCCL's debug file (its TUNING lines)",
    "cluster/mpi_runtime.py": "/proc/self/maps (which libmpi was loaded)",
    "gate/reframe_references.py": "a ReFrame reference file (JSON) it writes and reads back",
    "importers/nccl_tests.py": "nccl-tests' -J JSON output",
    "importers/inspector.py": "NCCL Inspector plugin files (JSON lines of a job's operations, not records)",
    "importers/to_records.py": "another tool's output file, for its SHA-256",
    "measure/buffers.py": "/proc/self/smaps (huge pages granted)",
    "output_files.py": "writes figures, pages and JUnit files (a temporary file put on the name)",
    "measure/cache.py": "/sys cache sizes",
    "measure/native/loops.py": "/proc/cpuinfo",
    "measure/native/toolchain.py": "the C sources it builds and its build cache",
    "measure/testhooks.py": "writes the test hooks' slot report",
    "records/writer.py": "writes records (the one writer)",
    "report/page.py": "its own HTML and script assets",
    "report/workload.py": "a `microbench workload --json` file (report --workload)",
    "results/index.py": "its own index entries (msgpack of decoded parts)",
    "results/load.py": "a part's configuration list (JSON inside an index entry)",
    "results/tablebuild.py": "a part's configuration list (JSON inside an index entry)",
    "run/watchdog.py": "writes and reads the failure note of a dying rank",
    "workload/traces/jsonread.py": "communication traces (Kineto, execution traces), streamed",
    "workload/traces/nccl_profiler.py": "NCCL profiler plugin output (JSON lines of events, not records)",
    "workload/traces/inspector.py": "NCCL Inspector plugin files (JSON lines of a job's operations, not records)",
    "workload/traces/source.py": "opens a communication trace (plain or gzip)",
    # issue 45: the doctor
    "doctor/hosts.py": "an Open MPI / MPICH host file (the nodes a launch should reach)",
    "doctor/sysfs.py": "/sys facts of InfiniBand/RoCE ports, NUMA nodes, GPUs and NICs (the network and placement layers)",
    "doctor/plane.py": "the doctor's own control-plane messages (one JSON object a line over TCP)",
    "doctor/rendezvous.py": "the coordinator's address file rank 0 publishes for the other ranks",
    "doctor/software.py": "/sys/module facts (the GPU driver's version)",
}

_JSON = {"json.loads", "json.load", "msgspec.json.decode", "msgspec.json.Decoder", "ijson.items", "ijson.kvitems",
         "ijson.parse", "ijson.basic_parse"}
_OPEN = {"open", "os.open", "io.open", "gzip.open", "os.fdopen"}
_READ_METHODS = {"read_bytes", "read_text", "scandir", "rglob", "iterdir", "walk"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def inputs(source: str) -> set[str]:
    """What a module's source does that reads input: JSON decoding, file opening, folder walking."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name in _JSON:
            found.add(name)
        elif name in _OPEN:
            found.add(name)
        elif isinstance(node.func, ast.Attribute) and node.func.attr in _READ_METHODS:
            found.add(f".{node.func.attr}()")
    return found


def modules_reading() -> dict[str, set[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = inputs(path.read_text())
        if found:
            out[path.relative_to(PACKAGE).as_posix()] = found
    return out


def test_only_the_readers_and_listed_inputs_open_files_or_decode_json():
    unlisted = {m: sorted(f) for m, f in modules_reading().items() if m not in READERS and m not in OTHER_INPUTS}
    assert not unlisted, (
        f"modules that open files or decode JSON without being a reader or listed in OTHER_INPUTS: {unlisted}. "
        "Records are read through records.reader (rows) or results.scan (columns) only; a module that reads "
        "another format is listed with what it reads.")


def test_the_lists_hold_no_stale_entries():
    reading = modules_reading()
    stale = [m for m in (*READERS, *OTHER_INPUTS) if m not in reading]
    assert not stale, f"listed but no longer reading anything: {stale}"


def test_only_the_readers_use_the_file_openers():
    """``records.files``' line and chunk readers are the readers' alone (a verb gets records, never lines)."""
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "microbench.records.files":
                names = {a.name for a in node.names} & {"chunks", "lines"}
                if names and rel not in READERS:
                    users.append((rel, sorted(names)))
    assert not users, f"modules reading record lines themselves: {users}"


@pytest.mark.parametrize("planted", [
    "import json\n\ndef read(path):\n    return [json.loads(l) for l in open(path)]\n",
    "import msgspec\n\ndef read(data):\n    return msgspec.json.decode(data)\n",
    "from pathlib import Path\n\ndef read(p):\n    return Path(p).read_bytes()\n",
])
def test_the_scan_sees_a_module_reading_records_itself(planted):
    """The check can fail: each way a verb module could read a results file itself is seen."""
    assert inputs(planted)

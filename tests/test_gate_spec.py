"""Spec loading: defaults and overrides, every documented key, and one clear error per kind of mistake."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from microbench.errors import UsageError
from microbench.gate.spec import load_spec

from conftest import REPO, run_process


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rules_inherit_defaults_and_override_them(tmp_path):
    spec = load_spec(write(tmp_path, """
description = "demo"
[defaults]
tolerance = 0.1
runs = "best"
backend = "mpi"
[[rule]]
benchmark = "allreduce"
sizes = "8:1K"
max_latency_us = 50
[[rule]]
name = "bw at 1M"
benchmark = ["allreduce", "Reduce-Scatter"]
sizes = ["1M", 4096]
min_busbw_gbps = 0.5
min_algbw_gbps = 0.2
stat = "p50"
runs = "all"
tolerance = 0
ranks = 4
in_place = true
min_runs = 3
require_check = true
"""))
    assert spec.description == "demo"
    first, second = spec.rules
    assert first.index == 1 and first.benchmarks == ("allreduce",)
    assert first.sizes == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert (first.tolerance, first.runs, first.filters) == (0.1, "best", {"backend": "mpi"})
    assert first.stat is None and first.stat_for("latency") == "p50" and first.stat_for("busbw") == "avg"
    assert [t.name for t in first.thresholds] == ["max_latency_us"]
    assert first.title() == "allreduce 8:1K backend=mpi: p50 latency <= 50 us"
    assert second.benchmarks == ("allreduce", "reduce_scatter")
    assert second.sizes == (4096, 1 << 20)
    assert second.filters == {"backend": "mpi", "ranks": 4, "in_place": True}
    assert (second.tolerance, second.runs, second.min_runs, second.require_check) == (0.0, "all", 3, True)
    assert [(t.metric, t.bound, t.limit) for t in second.thresholds] == [("busbw", "min", 0.5), ("algbw", "min", 0.2)]
    assert second.stat_for("busbw") == "p50"
    assert second.title() == "bw at 1M"


def test_require_check_alone_is_a_rule(tmp_path):
    spec = load_spec(write(tmp_path, '[[rule]]\nbenchmark = "bw"\nrequire_check = true\n'))
    assert spec.rules[0].thresholds == () and spec.rules[0].require_check


def test_pairs_rules_filter_on_the_matrix_and_count_outliers(tmp_path):
    spec = load_spec(write(tmp_path, """
[[rule]]
benchmark = "pairs"
max_outliers = 0
[[rule]]
benchmark = "pairs"
metric = "latency"
schedule = "serial"
stat = "max"
max_latency_us = 3
"""))
    outliers, slowest = spec.rules
    assert outliers.benchmarks == ("pairs",)
    assert [(t.metric, t.bound, t.limit) for t in outliers.thresholds] == [("outliers", "max", 0.0)]
    assert outliers.title() == "pairs all sizes: outliers <= 0 flagged"
    assert slowest.filters == {"metric": "latency", "schedule": "serial"}
    assert slowest.title() == "pairs all sizes metric=latency schedule=serial: max latency <= 3 us"


BAD_SPECS = [
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = \n', "not valid TOML"),
    ('description = "no rules"\n', "no rules"),
    ('[rule]\nbenchmark = "allreduce"\nmax_latency_us = 5\n', "array of tables"),
    ('colour = "red"\n[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\n', "unknown key 'colour' at the top level"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency = 5\n', "unknown key 'max_latency' (did you mean 'max_latency_us'?)"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nfrobnicate = 1\n', "rule 1 (allreduce): unknown key 'frobnicate'"),
    ('[[rule]]\nbenchmark = "allreduse"\nmax_latency_us = 5\n', "unknown benchmark 'allreduse'"),
    ('[[rule]]\nmax_latency_us = 5\n', "benchmark is required"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nstat = "p95"\n', "unknown stat 'p95'"),
    ('[[rule]]\nbenchmark = "allreduce"\nsizes = "1M:1K"\nmax_latency_us = 5\n', "sizes: bad size range"),
    ('[[rule]]\nbenchmark = "allreduce"\nsizes = "8X"\nmax_latency_us = 5\n', "sizes: bad size '8X'"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = -5\n', "max_latency_us must be a positive number"),
    ('[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = "fast"\n', "min_busbw_gbps must be a positive number"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\ntolerance = 10\n', "tolerance must be a fraction"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nruns = "mean"\n', "runs must be one of best, median, all"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nmin_runs = 0\n', "min_runs must be a whole number"),
    ('[[rule]]\nbenchmark = "allreduce"\nrequire_check = "yes"\n', "require_check must be true or false"),
    ('[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\n', "nothing to judge"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nranks = "2"\n', "ranks must be a whole number"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nin_place = 1\n', "in_place must be true or false"),
    ('[defaults]\nbenchmark = "allreduce"\n[[rule]]\nbenchmark = "bw"\nrequire_check = true\n',
     "unknown key 'benchmark' in [defaults]"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\ndtype = 32\n', "dtype must be a string"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\n[[rule]]\nbenchmark = "bw"\n', "rule 2 (bw): nothing to judge"),
    ('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = inf\n', "max_latency_us must be a positive number (got inf)"),
    ('[[rule]]\nbenchmark = "allreduce"\nmin_busbw_gbps = nan\n', "min_busbw_gbps must be a positive number (got nan)"),
    ('[[rule]]\nbenchmark = "pairz"\nmax_outliers = 0\n', "unknown benchmark 'pairz': choose from allreduce"),
    ('[[rule]]\nbenchmark = "pairs"\nmax_outliers = -1\n', "max_outliers must be a whole number of at least 0"),
    ('[[rule]]\nbenchmark = "pairs"\nmax_outliers = 0.5\n', "max_outliers must be a whole number of at least 0"),
    ('[[rule]]\nbenchmark = ["pairs", "bw"]\nmax_outliers = 0\n', 'max_outliers applies to benchmark = "pairs" alone'),
    ('[[rule]]\nbenchmark = "pairs"\nmetric = 1\nmax_outliers = 0\n', "metric must be a string"),
]


@pytest.mark.parametrize("text,fragment", BAD_SPECS, ids=[f for _, f in BAD_SPECS])
def test_bad_spec_is_one_clear_usage_error(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as info:
        load_spec(path)
    message = str(info.value)
    assert fragment in message
    # a decode error names the file and line (FILE:LINE:); a rule's problem names the spec and the rule
    assert message.startswith(f"{path}:3: spec is" if fragment == "not valid TOML" else f"spec {path}")
    assert "\n" not in message


def test_missing_spec_file(tmp_path):
    with pytest.raises(UsageError, match="no such spec file"):
        load_spec(tmp_path / "absent.toml")


def test_bad_spec_from_the_command_line_exits_2_with_one_line(tmp_path):
    from fixtures.gate.synth import result, write_run

    results = write_run(tmp_path / "r.jsonl", [result()])
    spec = write(tmp_path, '[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 5\nstat = "p95"\n')
    proc = run_process([sys.executable, "-m", "microbench", "check", str(results), "--spec", str(spec)], timeout=60)
    assert proc.returncode == 2, proc.output
    assert proc.stderr.strip().splitlines() == [f"microbench: error: spec {spec}: rule 1 (allreduce): unknown stat "
                                                "'p95': choose from p50, avg, min, max, p10, p90, p99, fastest, slowest"]
    assert proc.stdout == ""


@pytest.mark.parametrize("name", ["local-2rank.toml", "infiniband-example.toml"])
def test_example_specs_are_valid(name):
    spec = load_spec(REPO / "scripts" / "specs" / name)
    assert spec.description and len(spec.rules) >= 4
    assert any(r.require_check for r in spec.rules)
    assert any(t.metric == "busbw" for r in spec.rules for t in r.thresholds)
    assert any(t.metric == "latency" for r in spec.rules for t in r.thresholds)

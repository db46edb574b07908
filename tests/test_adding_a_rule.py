"""docs/architecture.md's worked example of a new judged number, applied as written to a scratch copy of the
package: one entry in the metrics table, and `check` judges it (spec key, statistics loaded, verdict, message)."""

from __future__ import annotations

import json
import re
import shutil

from conftest import REPO, microbench
from fixtures.gate.synth import result, write_run

DOC = REPO / "docs" / "architecture.md"


def the_entry() -> str:
    """The python block of the section 'Judged numbers: one table'."""
    section = DOC.read_text().split("### Judged numbers: one table", 1)[1].split("\n### ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


def test_the_metric_is_not_there_before_the_doc_adds_it():
    from microbench.results import metrics

    assert "tail" not in metrics.TABLE and "max_tail_ratio" not in metrics.SPEC_KEYS


def test_the_worked_example_adds_a_judged_number_with_one_entry(tmp_path):
    package = tmp_path / "pkg" / "microbench"
    shutil.copytree(REPO / "microbench", package, ignore=shutil.ignore_patterns("__pycache__"))
    table = package / "results" / "metrics.py"
    text = table.read_text()
    assert text.count("\n)}\n") == 1, "the metrics table should end with one ')}' line"
    table.write_text(text.replace("\n)}\n", "\n" + the_entry() + ")}\n", 1))
    records = write_run(tmp_path / "r.jsonl", [result("allreduce", s, 10.0) for s in (8, 64)])  # p99 = 2 x p50
    env = {"PYTHONPATH": str(package.parent), "MICROBENCH_INDEX": str(tmp_path / "index")}
    for limit, status in ((3, 0), (1.5, 1)):
        spec = tmp_path / f"tail-{limit}.toml"
        spec.write_text(f'[[rule]]\nbenchmark = "allreduce"\nmax_tail_ratio = {limit}\n')
        done = microbench("check", str(records), "--spec", str(spec), "--json", env=env, cwd=tmp_path)
        assert done.returncode == status, done.output
        judged = [j for rule in json.loads(done.stdout)["rules"] for j in rule["judgements"]]
        assert [j["criterion"] for j in judged] == ["max_tail_ratio"] * 2
        assert all(abs(j["value"] - 2.0) < 1e-9 for j in judged)
    text_out = microbench("check", str(records), "--spec", str(spec), env=env, cwd=tmp_path).stdout
    assert "tail (p99 / p50 latency)" in text_out

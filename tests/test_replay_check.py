"""`microbench check` bounds replay records ([[replay]] rules): the exposed share and the prediction error."""

import json
import re

import pytest

from conftest import microbench
from microbench.errors import UsageError
from microbench.gate.spec import parse_spec

MODEL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--seq", "64", "--vocab", "512"]


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """Two replay records of real 2-rank DDP runs: one with compute (--tflops), one without."""
    out = tmp_path_factory.mktemp("replay") / "replay.jsonl"
    for extra in (["--tflops", "0.5"], []):
        result = microbench("replay", "--np", "2", *MODEL, "--scheme", "ddp", "--dp", "2", "--iterations", "2",
                            "--out", str(out), *extra)
        assert result.returncode == 0, result.stderr
    return out


def _check(tmp_path, records, spec_text: str, *extra):
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    return microbench("check", str(records), "--spec", str(spec), *extra)


def test_generous_bounds_pass_on_every_matching_replay(tmp_path, replays):
    records = [json.loads(line) for line in replays.read_text().splitlines()]
    result = _check(tmp_path, replays, '[[replay]]\nscheme = "ddp"\nmax_prediction_error = 1e9\n')
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replay rule 1 PASS" in result.stdout and result.stdout.rstrip().endswith("-> PASS")
    assert all(r["run_id"] in result.stdout for r in records)


def test_a_bound_the_replay_exceeds_fails_naming_the_run_and_the_figure(tmp_path, replays):
    result = _check(tmp_path, replays, '[[replay]]\nmax_prediction_error = 0\nmax_exposed_share = 0\n', "--json")
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    rows = out["replay_rules"][0]["judgements"]
    assert out["passed"] is False and len(rows) == 4
    no_compute = [r for r in rows if r["what"] == "max_exposed_share" and r["value"] is None]
    assert len(no_compute) == 1 and "run it with --tflops" in no_compute[0]["detail"]


def test_no_matching_replay_fails_closed(tmp_path, replays):
    result = _check(tmp_path, replays, '[[replay]]\nscheme = "zero3"\nmax_prediction_error = 1\n')
    assert result.returncode == 1 and "no replay record matches" in result.stdout


@pytest.mark.parametrize("text,message", [
    ('[[replay]]\nscheme = "ddp"\n', "give max_exposed_share or max_prediction_error"),
    ('[[replay]]\nmax_exposed = 0.1\n', "unknown key 'max_exposed'"),
    ('[[replay]]\nmax_exposed_share = -1\n', "must be a number >= 0"),
    ('replay = 3\n', "'replay' must be an array of tables"),
])
def test_a_bad_replay_rule_is_one_error(text, message):
    with pytest.raises(UsageError, match=message):
        parse_spec(__import__("tomllib").loads(text))


def test_a_replay_record_of_unexpected_shape_is_refused_naming_its_line(tmp_path):
    """A replay record that breaks the record model is refused like any record (one line naming FILE:LINE,
    exit 2): no bound is judged on figures that are not what the model says they are."""
    odd = tmp_path / "foreign-odd.jsonl"  # not schema-valid on purpose
    odd.write_text("\n".join(json.dumps(r) for r in [
        {"type": "replay", "run_id": "a", "workload": "ddp", "comparison": "none", "exposed_share": "x", "compute": {}},
        {"type": "replay", "run_id": "b\u001b[31m", "workload": {"scheme": "ddp"}, "comparison": [1, {"what": "total",
         "ratio": None}], "compute": None},
    ]) + "\n")
    result = _check(tmp_path, odd, '[[replay]]\nmax_prediction_error = 1\nmax_exposed_share = 1\n')
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert re.fullmatch(r"microbench: error: .*foreign-odd\.jsonl:1: a replay record that breaks the record "
                        r"model: .*\n", result.stderr), result.stderr
    assert "\u001b" not in result.stdout + result.stderr

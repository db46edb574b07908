"""What a newcomer meets first, held true: ``microbench --help``, the torch install advice (said the same way in
the README, docs/torch-and-gpus.md, .ci/run, the torch-missing error and ``microbench info``), the records
validator without jsonschema, and scripts/plot_reference.py leaving the figures it does not draw."""

from __future__ import annotations

import importlib.util
import shutil
import sys

from conftest import REPO, assert_figure, microbench, run_process

from microbench.cluster.torch_runtime import TORCH_CPU_INSTALL, TORCH_INSTALL_HINT


def test_help_says_what_the_tool_is_with_examples_and_where_the_docs_are():
    proc = microbench("--help")
    assert proc.returncode == 0, proc.output
    assert "one parser, one verb per module" not in proc.stdout  # the developers' docstring is not the help
    assert "``" not in proc.stdout
    assert "OSU Micro-Benchmarks" in proc.stdout and "examples:" in proc.stdout
    examples = proc.stdout.split("examples:")[1].split("exit status:")[0]
    assert "microbench run --np 2" in examples and "microbench check" in examples and "--help" in examples
    assert f"documentation: {REPO / 'README.md'}" in proc.stdout and str(REPO / "docs") in proc.stdout


def test_the_torch_install_advice_is_the_same_everywhere():
    assert TORCH_CPU_INSTALL == "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert TORCH_CPU_INSTALL in TORCH_INSTALL_HINT
    for path in ("README.md", "docs/torch-and-gpus.md", ".ci/run", "docs/frameworks.md"):
        text = (REPO / path).read_text()
        assert TORCH_CPU_INSTALL in text, path
        # the advice that pulled 16 CUDA wheels from PyPI
        assert "pip install torch==2.13.0 ml_dtypes" not in text and "CPU only and small" not in text, path
    # nor in a test's skip reason, which a newcomer without torch reads (test_doctor_torch.py gave it)
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name != "test_newcomer.py":
            assert "pip install torch==2.13.0 ml_dtypes" not in path.read_text(), path.name
    for block in ("README.md", "docs/torch-and-gpus.md"):  # the torch block's second line: the CPU build
        assert f"{TORCH_CPU_INSTALL} && pip install ml_dtypes   # CPU only" in (REPO / block).read_text(), block
    hidden = ("import sys; sys.modules['torch'] = None; sys.argv = ['microbench', 'info']; "
              "from microbench.cli import main; raise SystemExit(main())")
    info = run_process([sys.executable, "-c", hidden])
    assert info.returncode == 0, info.output
    assert f"torch: not installed, needed for --backend torch ({TORCH_INSTALL_HINT})" in info.stdout
    hidden = ("import sys; sys.modules['torch'] = None; "
              "from microbench.cluster.torch_runtime import import_torch; import_torch()")
    error = run_process([sys.executable, "-c", hidden])
    assert error.returncode != 0 and TORCH_INSTALL_HINT in error.stderr


def test_validate_without_jsonschema_is_one_line(tmp_path):
    good = tmp_path / "run.jsonl"
    good.write_text("")
    hidden = ("import sys, runpy; sys.modules['jsonschema'] = None; "
              "runpy.run_module('microbench.records.validate', run_name='__main__')")
    proc = run_process([sys.executable, "-c", hidden, str(good)])
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "microbench: error: checking records against schema.json needs jsonschema: pip install jsonschema "
        "(or pip install -e '.[test]' in a checkout)"]
    missing = run_process([sys.executable, "-m", "microbench.records.validate", str(tmp_path / "absent.jsonl")])
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [f"microbench: error: no such results file: {tmp_path / 'absent.jsonl'}"]
    assert run_process([sys.executable, "-m", "microbench.records.validate", str(good)]).returncode == 0


def test_plot_reference_redraws_the_benchmarks_figures_and_keeps_the_others(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("plot_reference", REPO / "scripts" / "plot_reference.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shutil.copy(REPO / "plots" / "reference.jsonl", tmp_path / "foreign-reference.jsonl")  # an older record
    kept = {"replay-prediction.png": b"made by bench_replay", "frameworks-comm.png": b"made by bench_frameworks"}
    for name, content in kept.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "ialltoall.png").write_bytes(b"a benchmark the record no longer has")
    (tmp_path / "allreduce.png").write_bytes(b"an old drawing")
    monkeypatch.setattr(script, "PLOTS", tmp_path)
    monkeypatch.setattr(script, "RECORD", tmp_path / "foreign-reference.jsonl")
    monkeypatch.setattr("sys.argv", ["plot_reference.py"])
    assert script.main() == 0
    for name, content in kept.items():
        assert (tmp_path / name).read_bytes() == content
    assert not (tmp_path / "ialltoall.png").exists()
    drawn = ["allreduce.png", "allgather.png", "reduce_scatter.png", "broadcast.png", "latency.png", "bw.png"]
    for name in drawn:
        assert_figure(tmp_path / name)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted([*kept, *drawn])

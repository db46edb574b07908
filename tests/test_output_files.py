"""Figures and pages are written so that nothing planted in the output folder is followed
(``microbench.output_files``: a temporary file put on the name with os.replace; a name that is a link, or not a
regular file, refused), figure names never collide, and a large pairs matrix makes a small page quickly
(review hostile-input-2: N10, N15, N19, N21)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import run_process
from fixtures.gate.synth import pairs_result, private_index, result, write_run

from microbench.errors import UsageError
from microbench.output_files import write_output, write_text

LIMIT_S = 120  #: a command's hang guard: each takes a few seconds (the 1000 x 1000 report took minutes before)
PRECIOUS = "precious\n"


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


def mb(tmp_path: Path, *args) -> object:
    return run_process([sys.executable, "-m", "microbench", *map(str, args)], timeout=LIMIT_S,
                       env={"MPLCONFIGDIR": str(tmp_path / "mpl")}, cwd=tmp_path)


def one_error(done, fragment: str) -> None:
    errors = [l for l in done.stderr.splitlines() if not l.startswith("# note:")]
    assert done.returncode == 2 and len(errors) == 1 and errors[0].startswith("microbench: error: "), done.output
    assert fragment in errors[0], errors[0]


@pytest.fixture
def results(tmp_path) -> Path:
    return write_run(tmp_path / "r.jsonl", [result("allreduce", s, 10.0) for s in (8, 64)])


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(PRECIOUS)
    return path


# ------------------------------------------------------------------------------------------- planted links (N10)
def test_plot_never_writes_through_a_link_planted_in_the_output_folder(tmp_path, results, victim):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "allreduce.png").symlink_to(victim)
    one_error(mb(tmp_path, "plot", results, "-o", figs), f"{figs}/allreduce.png: it is outside the output folder {figs}")
    assert victim.read_text() == PRECIOUS
    (figs / "allreduce.png").unlink()
    (figs / "allreduce.png").symlink_to("elsewhere.png")  # a link inside the folder: refused as a link
    one_error(mb(tmp_path, "plot", results, "-o", figs), "figs/allreduce.png: it is a symbolic link")
    assert not (figs / "elsewhere.png").exists()


def test_a_hard_link_planted_on_a_figure_is_replaced_not_written_through(tmp_path, results, victim):
    figs = tmp_path / "figs"
    figs.mkdir()
    os.link(victim, figs / "allreduce.png")
    done = mb(tmp_path, "plot", results, "-o", figs)
    assert done.returncode == 0, done.output
    assert victim.read_text() == PRECIOUS
    assert (figs / "allreduce.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in figs.iterdir()) == ["allreduce.png"]  # no temporary file left


@pytest.mark.parametrize("verb,name", [
    (["report", "{results}", "-o", "{out}"], "page.html"),
    (["history", "{results}", "-o", "{out}"], "h.png"),
    (["check", "{results}", "--spec", "{spec}", "--junit", "{out}"], "junit.xml"),
    (["workload", "--model", "13B", "--scheme", "zero3", "--dp", "8", "--results", "{results}", "--figure", "{out}"],
     "w.png"),
])
def test_every_output_refuses_a_planted_link(tmp_path, results, victim, verb, name):
    out = tmp_path / "out" / name
    out.parent.mkdir()
    out.symlink_to(victim)
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nmax_latency_us = 50\n')
    done = mb(tmp_path, *[a.format(results=results, out=out, spec=spec) for a in verb])
    one_error(done, f"{out}: it is a symbolic link")
    assert victim.read_text() == PRECIOUS and out.is_symlink()


def test_a_figure_name_without_a_known_suffix_is_refused(tmp_path, results):
    # matplotlib appends .png to a name without a suffix: workload --figure /dev/full wrote /dev/full.png
    done = mb(tmp_path, "workload", "--model", "13B", "--scheme", "zero3", "--dp", "8", "--results", results,
              "--figure", tmp_path / "w")
    one_error(done, "w: the name must end in one of ")
    assert not list(tmp_path.glob("w*"))


def test_write_output_leaves_nothing_behind_on_an_error_and_keeps_the_umask(tmp_path):
    def broken(f):
        f.write(b"half")
        raise RuntimeError("drawing failed")

    with pytest.raises(RuntimeError):
        write_output(tmp_path / "x.png", broken)
    assert list(tmp_path.iterdir()) == []
    old = os.umask(0o027)
    try:
        path = write_text(tmp_path / "page.html", "<p>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == "<p>"
    os.mkfifo(tmp_path / "fifo.html")
    with pytest.raises(UsageError, match="fifo.html: it is not a regular file"):
        write_text(tmp_path / "fifo.html", "<p>")
    with pytest.raises(UsageError, match="refusing to write .*: it is outside the output folder"):
        write_text(tmp_path / "sub" / "x.html", "<p>", folder=tmp_path / "other")


# ------------------------------------------------------------------------------------------- names (N19)
def test_heatmap_names_never_collide_and_an_unknown_metric_is_refused(tmp_path):
    """Ids that sanitise to one name get distinct figures; a metric the record model does not know (the review's
    ``latency-x``, which made run ``y`` collide with run ``x-y``) is refused naming its line."""
    odd = tmp_path / "foreign-odd.jsonl"
    write_run(odd, [{**pairs_result("latency"), "metric": "latency-x"}], run_id="y")
    done = mb(tmp_path, "plot", odd, "-o", tmp_path / "odd")
    assert done.returncode == 2 and "foreign-odd.jsonl:2:" in done.stderr and "latency-x" in done.stderr, done.output
    path = tmp_path / "foreign-pairs.jsonl"
    write_run(path, [pairs_result("latency")], run_id="x-y")
    write_run(path, [pairs_result("bandwidth")], run_id="y")
    write_run(path, [pairs_result("latency")], run_id="a/b")
    write_run(path, [pairs_result("latency")], run_id="a_b-" + __import__("hashlib").sha1(
        b"pairs-latency-a/b").hexdigest()[:8])  # the id that a/b is sanitised to
    done = mb(tmp_path, "plot", path, "-o", tmp_path / "figs")
    assert done.returncode == 0, done.output
    written = [l.split("wrote ", 1)[1] for l in done.stdout.splitlines() if l.startswith("wrote ")]
    assert len(written) == len(set(written)) == 4, written
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(Path(w).name for w in written)


# ------------------------------------------------------------------------------------------- a large matrix (N15)
def test_a_1000_by_1000_pairs_matrix_makes_a_small_page_quickly(tmp_path):
    n = 1000
    rec = pairs_result("latency")
    labels = [f"node{i}" for i in range(n)]
    rec.update(matrix=[[None if i == j else 2.0 for j in range(n)] for i in range(n)], labels=labels, ranks=n,
               participant_ranks=list(range(n)), rounds=n - 1, outliers=[], node_outliers=[])
    path = tmp_path / "foreign-p1000.jsonl"
    write_run(path, [rec])
    done = mb(tmp_path, "report", path, "-o", tmp_path / "p.html")
    assert done.returncode == 0, done.output
    page = (tmp_path / "p.html").read_text()
    assert len(page) < 4 << 20, len(page)  # blocks of pairs, not a million cells (230 MB before)
    assert page.count('class="cell') <= 64 * 64 and "worst 2 us of 16 x 16 pairs" in page
    assert json.dumps(labels[-1])[1:-1] in page

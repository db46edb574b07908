"""microbench report on a year of nightlies: a page whose size does not grow with the runs (<= 5 MB), that
still shows per configuration the median over runs with its band, the newest runs individually (--newest),
the history's steps and the check and compare verdicts, and says what it aggregated.

The year is built from one real `microbench run --np 2 all` (every benchmark, the non-blocking ones and
their overlap blocks included, at two sizes) by scripts/gate_nightlies.py, with a known step.
"""

from __future__ import annotations

import sys
import time

import pytest
from fixtures.gate.synth import private_index
from fixtures.htmlreport.dom import parse

from microbench.cli import main as microbench_main
from microbench.report import history
from microbench.report.loaded import DEFAULT_NEWEST

from conftest import REPO, microbench

sys.path.insert(0, str(REPO / "scripts"))
import gate_nightlies as nightlies  # noqa: E402

NIGHTS = 365
PAGE_LIMIT = 5_000_000  #: bytes (issue 29)
SPEC = """description = "a year"
[defaults]
ranks = 2
backend = "mpi"
runs = "median"

[[rule]]
name = "allreduce answers within a second"
benchmark = "allreduce"
max_latency_us = 1000000
"""


@pytest.fixture(autouse=True)
def _index(tmp_path_factory, monkeypatch):
    private_index(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="module")
def year(tmp_path_factory):
    """365 nights of the whole suite at 8 B and 1 KiB; allreduce 1.5x slower from night 200 on."""
    base = tmp_path_factory.mktemp("year")
    template = base / "run.jsonl"
    proc = microbench("run", "--np", "2", "all", "-m", "8,1K", "-i", "50", "-x", "5", "--out", str(template),
                      timeout=300)
    assert proc.returncode == 0, proc.output
    plan = nightlies.Plan(NIGHTS, night_sigma=0.0, record_sigma=0.01,
                          steps=[nightlies.Step(200, 1.5, ("allreduce",))])
    files = nightlies.write_nightlies(template, base / "nights", plan)
    (base / "spec.toml").write_text(SPEC)
    return base, files


def report(year, out, *extra) -> tuple[str, object]:
    base, files = year
    code = microbench_main(["report", str(base / "nights"), "-o", str(out), "--spec", str(base / "spec.toml"),
                            "--baseline", str(files[0].parent), *map(str, extra)])
    assert code == 0
    html = out.read_text()
    return html, parse(html)


@pytest.fixture(scope="module")
def page(year, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "year.html"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MICROBENCH_INDEX", str(tmp_path_factory.getbasetemp() / "index"))
        html, root = report(year, out)
    return out, html, root


def test_the_page_of_a_year_is_small_and_says_what_it_aggregated(page):
    out, html, root = page
    assert out.stat().st_size <= PAGE_LIMIT, out.stat().st_size
    said = root.find("p", cls="aggregated").all_text()
    assert f"{NIGHTS} runs" in said and f"the newest {DEFAULT_NEWEST} runs individually" in said


def test_curves_show_the_median_over_runs_and_only_the_newest_runs(page):
    _, _, root = page
    for bench in ("allreduce", "iallreduce", "alltoall"):
        chart = root.find(id=f"bench-{bench}").find("svg", cls="chart")
        series = chart.find_all("g", cls="series")
        medians = [g for g in series if g.attrs["data-label"].startswith(f"median of {NIGHTS} runs")]
        singles = [g for g in series if g not in medians]
        assert len(medians) == 1 and "off" not in medians[0].classes
        assert len(singles) == DEFAULT_NEWEST and all("off" in g.classes for g in singles)
        assert all(c.attrs.get("data-lo") and c.attrs.get("data-hi") for c in medians[0].find_all("circle"))
        assert all("2026-12-" in g.attrs["data-label"] for g in singles)  # the newest nights


def test_runs_are_listed_for_the_newest_and_counted_for_the_rest(page):
    _, _, root = page
    runs = root.find(id="runs")
    assert len(runs.find("table").find("tbody").find_all("tr")) == DEFAULT_NEWEST
    assert f"{NIGHTS - DEFAULT_NEWEST} older run(s)" in runs.all_text()
    assert f"{NIGHTS} run(s)" in root.find("table", cls="summary").all_text()


def test_history_is_binned_and_lists_the_step(page):
    _, _, root = page
    group = root.find(id="history-allreduce")
    lines = group.find("svg", cls="chart").find_all("g", cls="series")
    assert lines and all(0 < len(g.find_all("circle")) <= history.MAX_POINTS for g in lines)
    text = group.all_text()
    assert "step in allreduce 8: x1.5" in text and "from " in text and "2026-07-20" in text  # night 200
    assert "median of" in group.find("svg", cls="chart").find("text", cls="title").text


def test_check_and_compare_verdicts_are_on_the_page(year, page):
    from microbench.gate.compare import compare
    from microbench.results.load import load_table

    _, _, root = page
    rule = root.find(id="check").find_all("div", cls="rule")
    assert len(rule) == 1
    cells = [td.all_text() for td in rule[0].find("tbody").find_all("tr")[0].find_all("td")]
    assert cells[6] == str(NIGHTS) and cells[7].startswith(f"{NIGHTS} runs: smallest ")  # not 365 values
    result = compare(load_table([year[1][0].parent]), load_table([year[0] / "nights"]), "latency", "p50", 0.05)
    rows = root.find(id="compare").find("table").find("tbody").find_all("tr")
    assert len(rows) == len(result.rows) > 0
    for tr, row in zip(rows, result.rows):
        cells = [td.all_text() for td in tr.find_all("td")]
        assert cells[1] == row.key.benchmark and cells[9] == f"{row.ratio:.3f}"


def test_newest_chooses_how_many_runs_are_shown(year, tmp_path):
    _, root = report(year, tmp_path / "two.html", "--newest", "2")
    chart = root.find(id="bench-allreduce").find("svg", cls="chart")
    assert len([g for g in chart.find_all("g", cls="series") if "median" not in g.attrs["data-label"]]) == 2


@pytest.mark.parametrize("value", ["0", "x"])
def test_newest_must_be_a_count(year, tmp_path, capsys, value):
    code = microbench_main(["report", str(year[0] / "nights"), "-o", str(tmp_path / "r.html"), "--newest", value])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("microbench: error: argument --newest") and err.count("\n") == 1, err


def test_in_chromium_the_year_opens_and_draws(page, tmp_path):
    """A year's page in Chromium: its load event fires and every chart draws, with no browser error (CI installs
    chromium; skipped where it is missing). How long that takes is not held here: load stretches it (2.0 s
    at load 3, 3.4 s with both cores busy and more; docs/report.md)."""
    from fixtures.htmlreport import browser as chromium

    reason = chromium.missing()
    if reason:
        pytest.skip(reason)
    from selenium.webdriver.common.by import By

    driver = chromium.start(str(tmp_path / "profile"))
    try:
        driver.get(page[0].as_uri())
        timing = "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"
        deadline = time.monotonic() + 30
        loaded_ms = driver.execute_script(timing)
        while loaded_ms <= 0 and time.monotonic() < deadline:  # the load event may still be running
            time.sleep(0.05)
            loaded_ms = driver.execute_script(timing)
        assert loaded_ms > 0, loaded_ms  # parsed, laid out, script run
        charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert len(charts) == len(page[2].find_all("svg", cls="chart")) > 10
        assert not [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        png = charts[0].screenshot_as_png
        assert chromium.ink_fraction(png) > 0.01 and chromium.colours(png) > 8
    finally:
        driver.quit()

"""microbench report: one self-contained page whose figures, tables and verdicts are what the records and
the gate say. Inputs are real `microbench run --np 2` records, synthetic runs, and an imported OMB log."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from fixtures.gate import synth
from fixtures.htmlreport.dom import parse
from fixtures.htmlreport.inputs import OMB_SIZES, make_inputs

from microbench.cli import main as microbench_main
from microbench.gate.check import evaluate
from microbench.gate.compare import compare
from microbench.gate.spec import load_spec
from microbench.report.page import asset
from microbench.results.load import load_table
from microbench.run import terminal
from microbench.units import format_size

from conftest import microbench, read_jsonl


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("report-inputs"))


@pytest.fixture(scope="module")
def page(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    code = microbench_main(["report", str(inputs.new), "-o", str(out), "--spec", str(inputs.spec),
                            "--baseline", str(inputs.baseline), "--workload", str(inputs.workload)])
    assert code == 0
    html = out.read_text()
    return out, html, parse(html)


def results(path, benchmark=None) -> list[dict]:
    return [r for r in read_jsonl(path) if r.get("type") == "result" and benchmark in (None, r["benchmark"])]


def series_points(group, chart_index: int, run_id: str) -> dict[str, dict]:
    """x text -> the point's attributes, of the series of ``run_id`` in a figure group's chart."""
    chart = group.find_all("svg", cls="chart")[chart_index]
    g = [s for s in chart.find_all("g", cls="series") if s.attrs["data-label"].startswith(run_id)]
    assert len(g) == 1, [s.attrs["data-label"] for s in chart.find_all("g", cls="series")]
    return {c.attrs["data-x"]: c.attrs for c in g[0].find_all("circle")}


def close(shown: str, value: float) -> bool:
    return float(shown) == pytest.approx(value, rel=1e-5)


def test_the_page_loads_nothing_from_anywhere(page):
    _, html, root = page
    assert not root.find_all("link") and not root.find_all("img") and not root.find_all("iframe")
    assert not [n for n in root.find_all() if "src" in n.attrs]
    assert all(n.attrs["href"].startswith("#") for n in root.find_all("a"))
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) == {"http://www.w3.org/2000/svg"}
    csp = root.find("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp
    scripts = root.find_all("script")
    assert len(scripts) == 1 and scripts[0].text == asset("report.js")


def test_curves_show_the_recorded_latency_busbw_and_band(page, inputs):
    _, _, root = page
    for path in inputs.real_runs:
        for bench in ("allreduce", "latency"):
            group = root.find(id=f"bench-{bench}")
            recs = results(path, bench)
            run_id = recs[0]["run_id"]
            lat, bw = series_points(group, 0, run_id), series_points(group, 1, run_id)
            assert sorted(lat) == sorted(format_size(r["size_bytes"]) for r in recs)
            for r in recs:
                x, p50 = format_size(r["size_bytes"]), r["latency_us"]["p50"]
                assert close(lat[x]["data-y"], p50)
                assert close(lat[x]["data-lo"], r["latency_us"]["p10"])
                assert close(lat[x]["data-hi"], r["latency_us"]["p90"])
                busbw = r["algbw_bytes"] / (p50 * 1e-6) / 1e9 * r["busbw_factor"]
                assert close(bw[x]["data-y"], busbw)


def test_the_omb_style_tables_are_the_terminal_rows(page, inputs):
    _, html, _ = page
    for path in inputs.real_runs:
        for rec in results(path):
            assert terminal.format_result_row(rec, ("first",)) in html


def test_imported_records_show_what_exists_and_say_what_is_missing(page, inputs):
    _, html, root = page
    recs = results(inputs.omb)
    assert len(recs) == len(OMB_SIZES) and all("p50" not in r["latency_us"] for r in recs)
    points = series_points(root.find(id="bench-allreduce"), 0, recs[0]["run_id"])
    label = [g for g in root.find(id="bench-allreduce").find_all("g", cls="series")
             if g.attrs["data-label"].startswith(recs[0]["run_id"])][0].attrs["data-label"]
    assert label.endswith("[avg]")
    for r in recs:
        assert close(points[format_size(r["size_bytes"])]["data-y"], r["latency_us"]["avg"])
    lacking = root.find(id="runs").all_text()
    assert f"no p50 latency in {len(recs)} of {len(recs)} results" in lacking
    assert "its allreduce records have no p50 latency; its curve shows avg" in html
    row = terminal.format_result_row(recs[0], ())
    assert row.split()[4] == "-"  # the P50 column of the table
    assert row in html


def test_check_verdicts_per_rule_with_reasons(page, inputs):
    _, _, root = page
    spec = load_spec(inputs.spec)
    outcomes = evaluate(spec, load_table([inputs.new]))
    assert [o.passed for o in outcomes] == [True, False, False]
    section = root.find(id="check")
    blocks = section.find_all("div", cls="rule")
    assert len(blocks) == len(outcomes)
    for block, outcome in zip(blocks, outcomes):
        assert block.find("h3").find("span", cls="badge").text == ("PASS" if outcome.passed else "FAIL")
        text = block.all_text()
        for j in outcome.judgements:
            assert j.detail in text
        for problem in outcome.problems:
            assert problem in text
    assert "flagged: node1-node4 (1 run)" in blocks[2].all_text()
    assert section.find("p").find("span", cls="badge").text == "FAIL"


def test_compare_rows_are_the_gates(page, inputs):
    _, _, root = page
    result = compare(load_table([inputs.baseline]), load_table([inputs.new]), "latency", "p50", 0.05)
    rows = root.find(id="compare").find("table").find("tbody").find_all("tr")
    assert len(rows) == len(result.rows) > 0
    for tr, row in zip(rows, result.rows):
        cells = [td.all_text() for td in tr.find_all("td")]
        assert cells[:2] == [format_size(row.key.size_bytes), row.key.benchmark]
        assert cells[9] == f"{row.ratio:.3f}"


def test_a_known_regression_shows_with_its_interval(tmp_path):
    synth.write_runs(tmp_path / "base" / "b.jsonl", 5, synth.base_latency, prefix="b", day=1)
    synth.write_runs(tmp_path / "new" / "n.jsonl", 5, lambda b, s: synth.base_latency(b, s) * (1.3 if s == 8 else 1),
                     prefix="n", day=2)
    out = tmp_path / "r.html"
    assert microbench_main(["report", str(tmp_path / "new"), "-o", str(out), "--baseline", str(tmp_path / "base")]) == 0
    result = compare(load_table([tmp_path / "base"]), load_table([tmp_path / "new"]))
    rows = parse(out.read_text()).find(id="compare").find("tbody").find_all("tr")
    verdicts = {(tr.find_all("td")[1].text, tr.find_all("td")[0].text): tr for tr in rows}
    for row in result.rows:
        tr = verdicts[(row.key.benchmark, format_size(row.key.size_bytes))]
        cells = [td.all_text() for td in tr.find_all("td")]
        assert cells[10] == f"[{row.interval[0]:.3f}, {row.interval[1]:.3f}]"
        assert cells[11] == f"{row.p_adjusted:.3g}"
        assert cells[13] == ("REGRESSION" if row.key.size_bytes == 8 else "ok")
        assert ("bad" in tr.classes) == (row.key.size_bytes == 8)


@pytest.mark.parametrize("newest", [None, 8])
def test_many_runs_show_the_median_over_runs_first(tmp_path, newest):
    """The median over all 8 runs shows first; the newest runs (5 unless --newest says) start hidden."""
    synth.write_runs(tmp_path / "n.jsonl", 8, synth.base_latency, benchmarks=("allreduce",), sizes=(8, 1024))
    out = tmp_path / "r.html"
    more = ["--newest", str(newest)] if newest else []
    assert microbench_main(["report", str(tmp_path / "n.jsonl"), "-o", str(out), *more]) == 0
    chart = parse(out.read_text()).find(id="bench-allreduce").find("svg", cls="chart")
    shown = [g for g in chart.find_all("g", cls="series") if "off" not in g.classes]
    assert [g.attrs["data-label"] for g in shown] == ["median of 8 runs"]
    assert len(chart.find_all("g", cls="off")) == (newest or 5)
    p50 = sorted(synth.base_latency("allreduce", 8) * j for j in synth.JITTER[:8])
    median = (p50[3] + p50[4]) / 2
    assert close(shown[0].find("circle", data_x="8").attrs["data-y"], median)


def test_history_has_one_point_per_run(page, inputs):
    _, _, root = page
    chart = root.find(id="history-allreduce").find("svg", cls="chart")
    by_label = {g.attrs["data-label"]: g for g in chart.find_all("g", cls="series")}
    for size in (8, 1024):
        points = by_label[f"allreduce {format_size(size)}"].find_all("circle")
        values = sorted(float(c.attrs["data-y"]) for c in points)
        recorded = sorted(r["latency_us"]["p50"] for p in inputs.real_runs for r in results(p, "allreduce")
                          if r["size_bytes"] == size)
        assert len(values) == len(recorded) == 2
        assert all(close(f"{v:.6g}", w) for v, w in zip(values, recorded))
    assert "1 run(s) have no p50 latency and are not in the history" in root.find(id="history").all_text()


def test_history_lists_the_gates_steps(tmp_path):
    path = tmp_path / "n.jsonl"
    for i in range(10):
        p50 = 10.0 * (1.5 if i >= 5 else 1.0) * synth.JITTER[i]
        synth.write_run(path, [synth.result("allreduce", 8, p50)], run_id=f"n{i}",
                        time_utc=f"2026-11-{i + 1:02d}T07:00:00Z")
    out = tmp_path / "r.html"
    assert microbench_main(["report", str(path), "-o", str(out)]) == 0
    text = parse(out.read_text()).find(id="history").all_text()
    step = [line for line in text.split("step in ")[1:]][0]
    assert step.startswith("allreduce 8: x1.5") and "from n5 (2026-11-06 07:00), worse" in step
    assert "no recorded change" in step


def test_heatmaps_frame_the_records_outliers(page):
    _, _, root = page
    maps = root.find(id="pairs").find_all("svg", cls="heatmap")
    assert len(maps) == 3  # the real run's latency and bandwidth matrices, the synthetic 6-node one
    six = [m for m in maps if len(m.find_all("rect", cls="cell")) == 30][0]
    out = sorted(c.attrs["data-tip"] for c in six.find_all("rect", cls="out"))
    assert out == ["node1 - node4: 9 us (outlier)", "node4 - node1: 9 us (outlier)"]


def test_a_pairs_record_without_outliers_has_them_computed(tmp_path):
    rec = synth.pairs_result("bandwidth", 5, 10.0, bad=(0, 2), bad_value=1.0)
    del rec["outliers"], rec["node_outliers"]
    synth.write_run(tmp_path / "foreign-p.jsonl", [rec])
    out = tmp_path / "r.html"
    assert microbench_main(["report", str(tmp_path / "foreign-p.jsonl"), "-o", str(out)]) == 0
    section = parse(out.read_text()).find(id="pairs")
    assert [c.attrs["data-tip"] for c in section.find_all("rect", cls="out")] == \
        ["node0 - node2: 1 GB/s (outlier)", "node2 - node0: 1 GB/s (outlier)"]
    assert "1 outlier link(s) (computed here: the record has no outlier list)" in section.all_text()


def test_workload_pricing_is_the_workload_commands(page, inputs):
    import json

    _, _, root = page
    data = json.loads(inputs.workload.read_text())
    text = root.find(id="workload").all_text()
    assert f"predicted communication per iteration: {data['weighting']['time_per_iteration_us']:.6g} us" in text
    assert f"{100 * data['compute']['share_no_overlap']:.1f}% without overlap" in text
    bars = root.find(id="workload").find_all("rect", cls="bar")
    assert len(bars) == 3 * len(data["weighting"]["bins"]) > 0
    for flag in data["weighting"]["unpriced"]:
        assert f"no measured {flag} curve" in text


@pytest.mark.parametrize("args, message", [
    (["-o", "{tmp}/r.png"], "the name must end in .html"),
    (["-o", "{tmp}/r.html", "--workload", "{tmp}/nothing.json"], "cannot read --workload"),
    (["-o", "{tmp}/r.html", "--workload", "{tmp}/not.json"], "is not JSON"),
    (["-o", "{tmp}/r.html", "--workload", "{tmp}/plain.json"], "holds no pricing"),
    (["-o", "{tmp}/r.html", "--spec", "{tmp}/nothing.toml"], "spec"),
    (["-o", "{tmp}/r.html", "--baseline", "{tmp}/empty"], "no result records in baseline"),
    (["-o", "{tmp}/r.html", "--threshold", "-3%"], "--threshold"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, message):
    run = synth.write_run(tmp_path / "r.jsonl", [synth.result(size=8)])
    (tmp_path / "not.json").write_text("{not json")
    (tmp_path / "plain.json").write_text('{"messages": []}')
    (tmp_path / "empty").mkdir()
    code = microbench_main(["report", str(run), *[a.format(tmp=tmp_path) for a in args]])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.startswith("microbench: error:") and err.count("\n") == 1, err
    assert not (tmp_path / "r.html").exists()


def test_no_results_is_one_line_from_the_command(tmp_path):
    done = microbench("report", str(tmp_path), "-o", str(tmp_path / "r.html"), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"microbench: error: no result records in results ({tmp_path})"]


# ------------------------------------------------------------------ in a real headless Chromium
@pytest.fixture(scope="module")
def browser(page, tmp_path_factory):
    """The report opened in headless Chromium (skips, saying why, where chromium or selenium is missing)."""
    from fixtures.htmlreport import browser as chromium

    reason = chromium.missing()
    if reason:
        pytest.skip(reason)
    driver = chromium.start(str(tmp_path_factory.mktemp("chromium-profile")))
    try:
        driver.get(page[0].as_uri())
        yield driver
    finally:
        driver.quit()


def _tip(driver) -> str:
    from selenium.webdriver.common.by import By

    tip = driver.find_element(By.CSS_SELECTOR, "div.tip")
    return tip.text if tip.is_displayed() else ""


def _hover(driver, element) -> str:
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    ActionChains(driver).move_to_element(element).perform()
    return _tip(driver)


def test_in_chromium_the_page_loads_without_errors_or_network(browser, page):
    logs = browser.get_log("browser")
    assert not [entry for entry in logs if entry["level"] in ("SEVERE", "WARNING")], logs
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert browser.title == parse(page[1]).find("title").text


def test_in_chromium_every_figure_renders(browser, page, tmp_path_factory):
    from fixtures.htmlreport.browser import colours, ink_fraction
    from selenium.webdriver.common.by import By

    figures = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(figures) == len(page[2].find_all("svg", cls="chart")) >= 10
    for n, fig in enumerate(figures):
        browser.execute_script("arguments[0].scrollIntoView()", fig)
        png = fig.screenshot_as_png
        assert fig.size["width"] > 150 and fig.size["height"] > 150
        assert ink_fraction(png) > 0.01 and colours(png) > 8, f"figure {n} ({fig.get_attribute('aria-label')}) blank"
    shots = tmp_path_factory.mktemp("screens")
    browser.save_screenshot(str(shots / "report.png"))


def _only(browser, group, sid: str) -> None:
    """Show only series ``sid`` of a figure group (points of other runs may sit on the same pixel)."""
    from selenium.webdriver.common.by import By

    for button in group.find_elements(By.CSS_SELECTOR, ".legend button[data-toggle]"):
        want = button.get_attribute("data-toggle") == sid
        if (button.get_attribute("aria-pressed") == "true") != want:
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
            button.click()


def test_in_chromium_hover_shows_the_recorded_values(browser, inputs):
    from selenium.webdriver.common.by import By

    group = browser.find_element(By.ID, "bench-allreduce")
    for path in [*inputs.real_runs, inputs.omb]:
        recs = results(path, "allreduce")
        g = group.find_element(By.CSS_SELECTOR, f'svg.chart g.series[data-label^="{recs[0]["run_id"]}"]')
        _only(browser, group, g.get_attribute("data-series"))
        for rec in recs:
            lat, size = rec["latency_us"], format_size(rec["size_bytes"])
            text = _hover(browser, g.find_element(By.CSS_SELECTOR, f'circle[data-x="{size}"]'))
            if path == inputs.omb:  # no p50 in an OMB log: the curve shows avg, and says so
                assert text.splitlines()[1:] == [size, f"avg latency: {lat['avg']:.6g} us"], text
            else:
                assert text.splitlines()[1:] == [size, f"p50 latency: {lat['p50']:.6g} us",
                                                 f"p10..p90: {lat['p10']:.6g} .. {lat['p90']:.6g} us"], text
            assert text.startswith(rec["run_id"])
    cell = browser.find_element(By.CSS_SELECTOR, "#pairs rect.cell.out")
    assert _hover(browser, cell) in ("node1 - node4: 9 us (outlier)", "node4 - node1: 9 us (outlier)")
    glyph = browser.find_element(By.CSS_SELECTOR, "#compare svg.glyph")
    assert _hover(browser, glyph).startswith("ratio ")


def test_in_chromium_buttons_hide_and_show_series(browser, inputs):
    from selenium.webdriver.common.by import By

    browser.refresh()  # the page as it opens (an earlier test toggled series)
    run_id = results(inputs.real_runs[0])[0]["run_id"]
    group = browser.find_element(By.ID, "bench-allreduce")
    series = group.find_elements(By.CSS_SELECTOR, f'g.series[data-label^="{run_id}"]')
    assert len(series) == 2  # the latency and the busbw chart
    sid = series[0].get_attribute("data-series")
    button = group.find_element(By.CSS_SELECTOR, f'.legend button[data-toggle="{sid}"]')
    chart = group.find_elements(By.CSS_SELECTOR, "svg.chart")[0]
    browser.execute_script("arguments[0].scrollIntoView()", group)
    before = chart.screenshot_as_png
    button.click()
    assert [s.is_displayed() for s in series] == [False, False] and button.get_attribute("aria-pressed") == "false"
    assert chart.screenshot_as_png != before
    button.click()
    assert [s.is_displayed() for s in series] == [True, True] and button.get_attribute("aria-pressed") == "true"
    run_token = series[0].get_attribute("data-keys").split()[-1]
    run_button = group.find_element(By.CSS_SELECTOR, f'.toggles button[data-toggle="{run_token}"]')
    run_button.click()
    assert [s.is_displayed() for s in series] == [False, False] and button.get_attribute("aria-pressed") == "false"
    run_button.click()
    assert all(s.is_displayed() for s in series)


def test_the_size_script_measures_the_page(tmp_path):
    import sys

    from conftest import REPO, run_process

    synth.write_runs(tmp_path / "n.jsonl", 2, synth.base_latency)
    done = run_process([sys.executable, str(REPO / "scripts" / "report_size.py"), str(tmp_path / "n.jsonl"),
                        "--out-dir", str(tmp_path / "out")], timeout=120)
    assert done.returncode == 0, done.output
    row = [line for line in done.stdout.splitlines() if line.startswith("microbench report (whole page)")][0]
    assert int(row.split()[-2].replace(",", "")) == (tmp_path / "out" / "report.html").stat().st_size


def _huge(p50: float, size: int = 8) -> dict:
    """A result whose every latency statistic is ``p50``."""
    stats = dict.fromkeys(synth.MULTIPLES, p50) | {"samples": 1000, "timing_ranks": 2}
    return synth.with_latency(synth.result("allreduce", size, p50), stats)


def test_latencies_at_the_longest_a_record_may_hold_are_shown_and_beyond_refused(tmp_path, capsys):
    """A latency at the longest the record model allows (``MAX_DURATION_US``, about 116 days: a hung call) is a
    value like any other: the per-run median of two such records, the history, the curves and the compare
    interval are drawn and listed; a longer one (a broken timer, a hostile file: 1e308 crashed report and compare
    once) is refused, naming its line."""
    from microbench.records.model import MAX_DURATION_US as top

    path = tmp_path / "n.jsonl"
    for i in range(6):
        big = [_huge(0.9 * top), _huge(top)] if i == 5 else [synth.result("allreduce", 8, 10.0 + i)]
        synth.write_run(path, [*big, _huge(top if i == 4 else 12.0, 64)], run_id=f"n{i}",
                        time_utc=f"2026-11-{i + 1:02d}T07:00:00Z")
    out = tmp_path / "r.html"
    assert microbench_main(["report", str(path), "-o", str(out), "--baseline", str(path), "--newest", "6"]) == 0
    assert "wrote" in capsys.readouterr().out
    root = parse(out.read_text())
    history = root.find(id="history-allreduce")
    shown = [c.attrs["data-y"] for c in history.find_all("circle")]
    assert f"{0.95 * top:.6g}" in shown  # n5: the median of 0.9 and 1 times the longest
    assert f"{top:.6g}" in shown  # n4's 64 B
    rows = root.find(id="compare").find("tbody").find_all("tr")
    eight = [tr for tr in rows if tr.find_all("td")[0].text == "8"][0]
    low, high = eight.find_all("td")[10].all_text().strip("[]").split(", ")  # the interval, its ends readable
    assert low == "0.000" and (high == "inf" or re.fullmatch(r"\d\.\d\de\+\d+", high)), high
    result = compare(load_table([path]), load_table([path]))
    assert [r.baseline_median for r in result.rows] == [12.5, 12.0]
    assert result.rows[0].baseline.tolist()[-1] == pytest.approx(0.95 * top, rel=1e-15)
    # blind to any change at that spread: INCONCLUSIVE (exit 4), never PASS
    assert microbench_main(["compare", "--baseline", str(path), "--new", str(path)]) == 4
    assert microbench_main(["history", str(path)]) == 0
    assert f"{0.95 * top:.4g}" in capsys.readouterr().out
    beyond = synth.write_run(tmp_path / "foreign-beyond.jsonl", [_huge(1.7e308)])
    assert microbench_main(["report", str(beyond), "-o", str(tmp_path / "b.html")]) == 2
    assert "foreign-beyond.jsonl:2:" in capsys.readouterr().err


def test_log_axes_and_medians_hold_at_the_largest_float():
    from microbench.report import svg
    from microbench.results.columns import median_of, per_run_medians

    top = sys.float_info.max
    lo, hi = svg.log_domain([10.0, top], 1.3)
    assert hi == top and svg.log10_ticks(lo, hi)[-1][0] <= top and len(svg.log10_ticks(lo, hi)) <= 13
    _, _, medians = per_run_medians(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64),
                                    np.array([top, top]))
    assert medians.tolist() == [top] and median_of([top, top / 2]) == top * 0.75


def test_the_page_shows_the_three_outcomes(tmp_path):
    """Issue 39: a rule on fewer runs than it asks for, and a comparison of single real runs, are INCONCLUSIVE
    on the page as in the verbs, never PASS."""
    import random

    from fixtures.corpus import corpus

    drawn = corpus.draw(random.Random(60), 2)
    base = corpus.write_side(tmp_path / "base" / "b.jsonl", drawn[:1], corpus.dt.date(2026, 3, 1))
    new = corpus.write_side(tmp_path / "new" / "n.jsonl", drawn[1:], corpus.dt.date(2026, 3, 2), factor=1.4)
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nsizes = "8"\nmax_latency_us = 1e6\nmin_runs = 3\n')
    out = tmp_path / "r.html"
    assert microbench_main(["report", str(new), "-o", str(out), "--baseline", str(base), "--spec", str(spec)]) == 0
    root = parse(out.read_text())
    check = root.find(id="check")
    assert check.find("p").find("span", cls="badge").text == "INCONCLUSIVE"
    assert check.find("div", cls="rule").find("h3").find("span", cls="badge").text == "INCONCLUSIVE"
    text = root.find(id="compare").all_text()
    assert "Outcome: INCONCLUSIVE: no regression seen" in text and "PASS (" not in text

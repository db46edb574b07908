"""microbench import omb / nccl-tests: synthetic output in the tools' formats, read back as records that check,
compare, history and plot use."""

from __future__ import annotations

import json

import pytest
from fixtures.importers import make

from microbench.cli import main as microbench_main
from microbench.records.validate import file_problems, problems

from conftest import assert_figure, read_jsonl


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = microbench_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def imported(capsys, tmp_path, tool: str, name: str, lines, *options: str) -> list[dict]:
    src = make.write(tmp_path / name, lines)
    out = tmp_path / "out.jsonl"
    code, stdout, err = run_cli(capsys, "import", tool, src, "--out", str(out), *options)
    assert code == 0, err
    assert file_problems(out) == []  # microbench/records/schema.json
    return read_jsonl(out)


def of_type(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r["type"] == kind]


def results_of_run(records: list[dict]) -> list[dict]:
    return of_type(records, "result")


def test_omb_collective_with_full_stats_validation_and_tail_columns(capsys, tmp_path):
    sizes = [4, 8, 1024]
    recs = imported(capsys, tmp_path, "omb", "allreduce.log",
                    make.omb_collective("Allreduce", sizes, full=True, validate=True, tails=(50, 99), iterations=200),
                    "--ranks", "4", "--args", "-m 4:1K -x 20")
    run, = of_type(recs, "run")
    assert (run["backend"], run["ranks"], run["versions"]) == ("mpi", 4, {"omb": "7.4"})
    assert run["source"]["tool"] == "omb" and run["source"]["version"] == "7.4"
    assert run["source"]["file"].endswith("allreduce.log") and len(run["source"]["sha256"]) == 64
    assert "hosts" in run["source"]["unknown"] and "hosts" not in run
    assert "loop" not in results_of_run(recs)[0]  # microbench's own loop fields do not apply
    results = of_type(recs, "result")
    assert [r["size_bytes"] for r in results] == sizes
    for res, size in zip(results, sizes):
        avg = make.model_latency_us(size)
        assert res["latency_us"] == pytest.approx({"avg": avg, "min": round(avg * 0.9, 2), "max": round(avg * 1.1, 2),
                                                   "p50": round(avg * 1.5, 2), "p99": round(avg * 1.99, 2)})
        assert (res["dtype"], res["op"], res["in_place"], res["check"]) == ("int8", "sum", False, "pass")
        assert (res["iterations"], res["warmup"], res["ranks"]) == (200, 20, 4)
        # microbench's definitions: S = size, busbw = S / avg x 2(n-1)/n
        assert res["busbw_gbps"] == pytest.approx(size / (avg * 1e-6) / 1e9 * 1.5)
        assert res["source"]["values"]["Avg Latency(us)"] == avg
    end, = of_type(recs, "end")
    assert end["status"] == "complete" and end["results"] == 3


def test_a_job_log_with_several_omb_benchmarks_and_one_without_counterpart(capsys, tmp_path):
    lines = ["#!/bin/bash job output", *make.omb_latency([0, 1, 8]), *make.omb_bandwidth([8, 4096]),
             *make.omb_bandwidth([8, 4096], bidirectional=True),
             *make.omb_collective("All-to-All Personalized Exchange", [16]),
             *make.omb_title("Barrier Latency"), "# Avg Latency(us)", "             3.20"]
    src = make.write(tmp_path / "job.log", lines)
    out = tmp_path / "out.jsonl"
    code, stdout, err = run_cli(capsys, "import", "omb", src, "--out", str(out), "--ranks", "8")
    assert code == 0, err
    assert "Barrier Latency test has no microbench counterpart; skipped" in err
    recs = read_jsonl(out)
    runs = of_type(recs, "run")
    assert [r["options"]["mpi_call"] for r in runs] == [
        "MPI_Send/MPI_Recv ping-pong", "MPI_Isend window", "MPI_Isend/MPI_Irecv window both ways", "MPI_Alltoall"]
    assert [r["ranks"] for r in runs] == [2, 2, 2, 8]  # OMB's point-to-point tests run on two processes
    assert runs[0]["source"]["skipped"] == ["line 6: 0 B (microbench sizes start at 1 B)"]
    by_bench = {}
    for res in of_type(recs, "result"):
        by_bench.setdefault(res["benchmark"], []).append(res)
    assert [r["size_bytes"] for r in by_bench["latency"]] == [1, 8]
    for bench, factor in (("bw", 1), ("bibw", 2)):
        res = by_bench[bench][1]
        printed = make.omb_bandwidth_mbps(4096, bench == "bibw")
        assert res["latency_us"]["avg"] == pytest.approx(factor * 4096 / printed)  # us per message, 1 MB = 1e6 B
        assert res["algbw_gbps"] == pytest.approx(printed / 1000)  # back to OMB's figure, in GB/s
        assert "latency_us.avg" in res["source"]["derived"]
        assert res["latency_us"]["min"] == res["latency_us"]["max"] == res["latency_us"]["avg"]  # one timing rank
    alltoall, = by_bench["alltoall"]
    assert (alltoall["send_bytes"], alltoall["algbw_bytes"], alltoall["busbw_factor"]) == (128, 128, 7 / 8)


def test_omb_before_7_prints_no_datatype_and_a_short_table_is_incomplete(capsys, tmp_path):
    lines = make.omb_collective("Reduce", [8, 16], version="5.6.2", dtype=None)
    src = make.write(tmp_path / "old.log", lines)
    code, _, err = run_cli(capsys, "import", "omb", src, "--out", str(tmp_path / "o.jsonl"))
    assert code == 2 and "OMB does not print how many ranks ran its Reduce Latency test: pass --ranks N" in err
    recs = imported(capsys, tmp_path, "omb", "old.log", lines, "--args", "-m 1M", "--ranks", "3")
    run, = of_type(recs, "run")
    assert run["versions"] == {"omb": "5.6.2"}
    for res in of_type(recs, "result"):
        assert res["dtype"] is None and "dtype" in res["source"]["unknown"]
        assert res["ranks"] == 3 and "root" not in res and "root" in res["source"]["unknown"]  # OMB prints no root
    end, = of_type(recs, "end")
    assert end["status"] == "incomplete" and "1048576 B" in end["reason"]


def test_nccl_tests_text_table_gives_out_of_place_and_in_place_results(capsys, tmp_path):
    hosts = ["node1", "node1", "node2", "node2"]
    sizes = [4096, 1 << 20]
    recs = imported(capsys, tmp_path, "nccl-tests", "ag.log", make.nccl_text("all_gather_perf", hosts, sizes))
    run, = of_type(recs, "run")
    assert (run["backend"], run["ranks"], run["ranks_per_host"]) == ("nccl", 4, {"node1": 2, "node2": 2})
    assert run["versions"] == {"nccl-tests": "2.17.1", "nccl": "2.27.3"}
    assert run["device"]["name"] == "NVIDIA H100 80GB HBM3" and run["device"]["count"] == 4
    results = of_type(recs, "result")
    assert [(r["size_bytes"], r["in_place"]) for r in results] == [(1024, False), (1024, True), (1 << 18, False),
                                                                   (1 << 18, True)]
    for res, (size, count, _, _, _, halves) in zip(results[::2], make.nccl_rows("all_gather_perf", 4, sizes)):
        assert res["recv_bytes"] == size  # nccl-tests prints the gathered buffer; microbench each rank's part
        t, algbw, busbw = halves[0]
        assert res["latency_us"] == {"avg": t}
        assert res["busbw_gbps"] == pytest.approx(busbw)
        assert (res["dtype"], res["check"], res["iterations"], res["warmup"]) == ("float32", "pass", 20, 5)
    assert of_type(recs, "end")[0]["status"] == "complete"


def test_old_nccl_tests_text_needs_the_program_and_a_cut_log_is_incomplete(capsys, tmp_path):
    lines = make.nccl_text("all_reduce_perf", ["h1", "h2"], [8, 1024], new=False, check=False, finished=False)
    src = make.write(tmp_path / "old.log", lines)
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(capsys, "import", "nccl-tests", src, "--out", str(out))
    assert code == 2 and err.strip().count("\n") == 0 and "pass --benchmark" in err
    code, _, err = run_cli(capsys, "import", "nccl-tests", src, "--out", str(out), "--benchmark", "all_reduce_perf")
    assert code == 0, err
    recs = read_jsonl(out)
    assert {r["check"] for r in of_type(recs, "result")} == {None}  # -c 0: "N/A"
    assert of_type(recs, "run")[0]["versions"] == {}  # neither printed
    assert of_type(recs, "end")[0]["status"] == "incomplete"


def test_nccl_tests_json_with_its_command_line_and_per_iteration_figures(capsys, tmp_path):
    doc = make.nccl_json("reduce_scatter_perf", ["a", "b"], [1024, 4096], args=["-a", "3", "-I", "1"], per_iter=True)
    recs = imported(capsys, tmp_path, "nccl-tests", "rs.json", doc)
    run, = of_type(recs, "run")
    assert run["command"] == "./build/reduce_scatter_perf -a 3 -I 1"
    assert run["source"]["start_time_local"] == "2026-11-20 09:15:00" and "time_utc" not in run
    assert "time_utc" in run["source"]["unknown"]
    first = of_type(recs, "result")[0]
    t = doc["results"][0]["out_of_place"]["time"]
    # -a 3: the time is the maximum over ranks; -I 1: the slowest/fastest/p99 iteration
    assert first["latency_us"] == pytest.approx({"max": t, "fastest": t * 0.8, "slowest": t * 1.5, "p50": t,
                                                 "p99": t * 1.4})
    assert (first["size_bytes"], first["send_bytes"], first["recv_bytes"]) == (1024, 1024, 512)
    assert first["algbw_gbps"] is None  # bandwidth is defined on the mean; the JSON gives the max
    assert of_type(recs, "end")[0]["status"] == "complete"


def test_importing_the_same_file_twice_writes_it_once(capsys, tmp_path):
    src = make.write(tmp_path / "lat.log", make.omb_latency([1, 2]))  # point to point: 2 ranks, no --ranks needed
    out = tmp_path / "out.jsonl"
    assert run_cli(capsys, "import", "omb", src, "--out", str(out))[0] == 0
    code, _, err = run_cli(capsys, "import", "omb", src, "--out", str(out))
    assert code == 0 and "already in" in err
    assert len(of_type(read_jsonl(out), "run")) == 1


@pytest.mark.parametrize("tool, content, options, message", [
    ("omb", "no benchmark here\n", (), "nothing to import"),
    ("omb", "# OSU MPI Latency Test v7.4\n# Size   Latency (us)\n8   0.5   0.7\n", (), "3 columns where OMB's header"),
    ("omb", "# OSU MPI Latency Test v7.4\n8   0.5\n", (), "a table row before OMB's column header"),
    ("omb", "# OSU MPI Latency Test v7.4\n# Size   Latency (us)\n", (), "has no table rows"),
    ("omb", "x", ("--args", "-i lots"), "cannot read OMB options"),
    ("nccl-tests", "{\"config\": {}", (), "not JSON"),
    ("nccl-tests", "{\"results\": []}", (), "not an nccl-tests JSON file"),
    ("nccl-tests", "nothing\n", ("--benchmark", "all_reduce_perf"), "no nccl-tests run found"),
    ("nccl-tests", "x", ("--benchmark", "sendrecv_perf"), "has no microbench counterpart"),
    ("nccl-tests", "x", ("--time", "yesterday"), None),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, tool, content, options, message):
    src = tmp_path / "in.txt"
    src.write_text(content)
    code, _, err = run_cli(capsys, "import", tool, str(src), "--out", str(tmp_path / "o.jsonl"), *options)
    assert code == 2
    assert err.startswith("microbench: error: ") and err.strip().count("\n") == 0, err
    assert message is None or message in err
    assert not (tmp_path / "o.jsonl").exists()


def test_cpu_time_and_rank0_time_are_refused(capsys, tmp_path):
    doc = make.nccl_json("all_reduce_perf", ["a", "b"], [8], args=["-a", "0"])
    src = make.write(tmp_path / "a0.json", doc)
    code, _, err = run_cli(capsys, "import", "nccl-tests", src, "--out", str(tmp_path / "o.jsonl"))
    assert code == 2 and "-a 0" in err
    text = make.write(tmp_path / "cpu.log", make.nccl_text("all_reduce_perf", ["a"], [8]))
    code, _, err = run_cli(capsys, "import", "nccl-tests", text, "--out", str(tmp_path / "o.jsonl"), "--args",
                           "all_reduce_perf -C 1")
    assert code == 2 and "-C 1" in err


@pytest.fixture
def imported_history(capsys, tmp_path):
    """Three nccl-tests logs of one configuration on three days (the last one slower), one records file each."""
    folder = tmp_path / "history"
    for day, base in ((1, 20.0), (2, 21.0), (3, 30.0)):
        src = make.write(tmp_path / f"day{day}.log", make.nccl_text("all_reduce_perf", ["h1", "h2"], [8, 1024],
                                                                    base=base))
        code, _, err = run_cli(capsys, "import", "nccl-tests", src, "--out", str(folder / f"day{day}.jsonl"),
                               "--time", f"2026-11-0{day}T08:00:00Z")
        assert code == 0, err
    return folder


def test_check_compare_history_and_plot_read_imported_records(capsys, tmp_path, imported_history):
    days = [str(imported_history / f"day{d}.jsonl") for d in (1, 2, 3)]
    spec = tmp_path / "spec.toml"
    spec.write_text('[[rule]]\nbenchmark = "allreduce"\nbackend = "nccl"\nsizes = "8"\nin_place = false\n'
                    'stat = "avg"\nmax_latency_us = 25\nrequire_check = true\nruns = "all"\n')
    code, out, err = run_cli(capsys, "check", *days[:2], "--spec", str(spec), "--json")
    assert code == 0, out + err
    assert json.loads(out)["summary"] == {"rules": 1, "passed": 1, "failed": 0}
    code, out, _ = run_cli(capsys, "check", *days, "--spec", str(spec), "--json")
    assert code == 1  # the third day's 30 us breaks the 25 us limit
    code, out, err = run_cli(capsys, "history", str(imported_history), "--stat", "avg", "-m", "8", "--json")
    assert code == 0, err
    series = {s["label"]: s for s in json.loads(out)["series"]}
    points = next(s for label, s in series.items() if "out-of-place" in label)["points"]
    assert [(p["time_utc"], p["value"]) for p in points] == [
        (f"2026-11-0{d}T08:00:00Z", v) for d, v in ((1, 20.0), (2, 21.0), (3, 30.0))]
    code, out, err = run_cli(capsys, "compare", "--baseline", *days[:2], "--new", days[2], "--stat", "avg",
                             "-m", "8", "--json", "--fail-unconfirmed")
    assert code == 1, err  # +46 %: flagged (too few runs to confirm, so "regression?", which fails when asked)
    rows = json.loads(out)["rows"]
    assert {r["verdict"] for r in rows} == {"regression?"} and rows[0]["ratio"] == pytest.approx(30.0 / 20.5)
    code, out, err = run_cli(capsys, "plot", str(imported_history), "-o", str(tmp_path / "plots"), "--stat", "avg")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["allreduce.png"]
    assert_figure(tmp_path / "plots" / "allreduce.png")


def test_omb_device_buffers_and_several_datatypes_in_one_section(capsys, tmp_path):
    lines = make.omb_collective("Allgather", [8, 16], dtype="MPI_CHAR")
    lines[1] = lines[1].replace("OSU MPI ", "OSU MPI-CUDA ")
    lines += make.omb_collective("Allgather", [8, 16], dtype="MPI_FLOAT")[2:]  # OMB -T mpi_char,mpi_float
    recs = imported(capsys, tmp_path, "omb", "ag.log", lines, "--ranks", "2")
    run, = of_type(recs, "run")
    assert run["device"]["kind"] == "cuda" and run["options"]["title"] == "OSU MPI-CUDA Allgather Latency Test v7.4"
    assert [(r["dtype"], r["size_bytes"], r["device"]) for r in of_type(recs, "result")] == [
        ("int8", 8, "cuda"), ("int8", 16, "cuda"), ("float32", 8, "cuda"), ("float32", 16, "cuda")]


def test_the_schema_lets_imported_records_lack_statistics_their_tool_did_not_print(capsys, tmp_path):
    recs = imported(capsys, tmp_path, "nccl-tests", "ar.log", make.nccl_text("all_reduce_perf", ["a", "b"], [8]))
    res = of_type(recs, "result")[0]
    assert res["latency_us"] == {"avg": 20.0} and problems(res) == []
    own = {k: v for k, v in res.items() if k != "source"}  # the same figures as microbench's own record: refused
    assert any("'min' is a required property" in p for p in problems(own))
    assert problems({**res, "latency_us": {}})  # a result with no statistic at all is refused either way

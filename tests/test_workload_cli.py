"""microbench workload end to end: JSON and tables, sweeps, traces, weighting, figure, errors, and the
sizes a workload file hands to microbench run --sizes-from."""

import json
import math
import sys
from pathlib import Path

import pytest
from fixtures.gate import synth

from microbench.cli import main
from microbench.errors import UsageError
from microbench.workload import sizes_for_benchmarks

from conftest import run_process

FIXTURES = Path(__file__).parent / "fixtures" / "workload"


def workload(capsys, *args):
    code = main(["workload", *args])
    out, err = capsys.readouterr()
    return code, out, err


def workload_json(capsys, *args):
    code, out, err = workload(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_json_of_a_modelled_workload(capsys):
    doc = workload_json(capsys, "--model", "19M", "--scheme", "ddp", "--dp", "8")
    assert doc["params"] == 71_459_840
    assert doc["volume"]["elements"] == 125_054_720 and doc["volume"]["bytes"] == 250_109_440
    assert all(set(m) == {"collective", "bytes", "count", "group_size", "phase"} for m in doc["messages"])
    assert doc["check"]["residual_bytes"] == 0 and doc["check"]["message_bytes"] == 250_109_440
    assert any("bucket_cap_mb" in a for a in doc["assumptions"])


def test_custom_model_and_dtype(capsys):
    doc = workload_json(capsys, "--hidden", "64", "--layers", "2", "--heads", "4", "--seq", "128", "--vocab", "1024",
                        "--scheme", "zero1", "--dp", "2", "--dtype", "fp32")
    assert doc["params"] == 238_720  # 2*1024*64 + 128*64 + 2*(12*64^2 + 8*64) + 2*64
    assert doc["volume"]["bytes"] == 238_720 * 4  # 2 * P * 1/2 elements of 4 bytes
    assert {"collective": "allgather", "bytes": 238_720 // 2 * 4, "count": 1, "group_size": 2,
            "phase": "optimizer"} in doc["messages"]


def test_table_says_what_and_how(capsys):
    code, out, _ = workload(capsys, "--model", "1.3B", "--scheme", "zero3", "--dp", "8")
    assert code == 0
    assert "# workload: 1.3B GPT-NeoX" in out and "Eq. 3 (ZeRO-3)" in out
    assert "unexplained difference 0 B" in out and "# assumptions:" in out
    assert any(line.split()[:2] == ["forward", "allgather"] for line in out.splitlines())


def test_sequence_sweep(capsys):
    tp = workload_json(capsys, "--model", "1.3B", "--scheme", "tp", "--tp", "8", "--seq", "512,1024,2048,4096")
    allreduce = [p["by_collective"]["allreduce"] for p in tp["sweep"]]
    assert [a / allreduce[0] for a in allreduce] == [1, 2, 4, 8]  # tensor-parallel volume is linear in s
    ddp = workload_json(capsys, "--model", "1.3B", "--scheme", "ddp", "--dp", "8", "--seq", "512,4096")
    # data-parallel volume follows params, which depend on s only through the position embedding s*h
    params = [1_418_596_352 - (2048 - 512) * 2048, 1_418_596_352 + 2048 * 2048]
    assert [p["params"] for p in ddp["sweep"]] == params
    assert [p["by_collective"]["allreduce"] for p in ddp["sweep"]] == [2 * p * 2 * 7 // 8 for p in params]
    code, out, _ = workload(capsys, "--model", "19M", "--scheme", "pp", "--pp", "2", "--seq", "1024,2048")
    assert code == 0 and "send x2" in out and "(flat = x1, linear in s = x2)" in out


def test_sequence_sweep_by_parallel_dimension(capsys):
    doc = workload_json(capsys, "--model", "19M", "--scheme", "3d", "--tp", "2", "--pp", "2", "--dp", "2",
                        "--seq", "512,1024")
    # s = 512, b = 4, bf16: A = 4*512*512*2 = 2,097,152 B. tp: 3 layers per stage -> 6 forward, 6 backward,
    # 6 recompute allreduces, embedding and lm_head: 20 allreduces moving 2A/2 each; loss 3 x 8,192 B fp32 moving
    # 8,192 each: 41,967,616. pp: one send forward and one backward: 2A = 4,194,304.
    # dp: the first stage's tensor rank holds 25,152*512 + 512*512 + 3*(12*512^2/2 + 8*512) = 17,870,848
    # elements, allreduced over 2: 2 * 17,870,848 * 1/2 * 2 B = 35,741,696.
    first, second = (p["by_dimension"] for p in doc["sweep"])
    assert first == {"tp": 41_967_616, "pp": 4_194_304, "dp": 35_741_696}
    # at s = 1024 activations double; the position embedding adds 512*512 parameters to the dp volume
    assert second == {"tp": 2 * 41_967_616, "pp": 2 * 4_194_304, "dp": 35_741_696 + 2 * 262_144}
    code, out, _ = workload(capsys, "--model", "19M", "--scheme", "3d", "--tp", "2", "--pp", "2", "--dp", "2",
                            "--seq", "512,1024")
    assert code == 0 and "by parallel dimension: dp x1.01, tp x2, pp x2" in out


def test_custom_sizes_are_not_replaced_by_defaults(capsys):
    code, _, err = workload(capsys, "--model", "19M", "--vocab", "0", "--scheme", "ddp", "--dp", "2")
    assert code == 2 and "--vocab must be a positive whole number, not 0" in err


def test_trace_through_the_cli(capsys):
    doc = workload_json(capsys, "--trace", str(FIXTURES / "nccl_coll.log"), "--trace-iterations", "2")
    assert doc["trace"]["format"] == "nccl" and doc["trace"]["unreadable"] == 2 and doc["trace"]["ranks"] == 2
    assert {"collective": "allreduce", "bytes": 4096, "count": 1, "group_size": 2, "phase": "trace"} in doc["messages"]
    code, out, _ = workload(capsys, "--trace", str(FIXTURES / "deepspeed_summary.log"), "--trace-format", "deepspeed")
    assert code == 0 and "read as deepspeed" in out and "1 unreadable" in out


def synthetic_run(path):
    """A run whose allreduce, allgather, reduce_scatter, latency and broadcast latency is 1 us per KiB + 2 us."""
    lines = [synth.run_line("s", ranks=8)]
    for bench in ("allreduce", "allgather", "reduce_scatter", "broadcast", "latency"):
        for k in range(0, 31, 2):
            size = 1 << k
            lat = {"p50": 2 + size / 1024, "avg": 3 + size / 1024, "min": 3 + size / 1024, "max": 3 + size / 1024}
            lines.append(synth.with_latency(synth.result(bench, size, ranks=8, run_id="s"), lat))
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_weighting_compute_and_figure(capsys, tmp_path):
    runs = tmp_path / "run.jsonl"
    synthetic_run(runs)
    figure = tmp_path / "w.png"
    doc = workload_json(capsys, "--model", "19M", "--scheme", "zero3", "--dp", "8", "--results", str(runs),
                        "--tflops", "100", "--figure", str(figure))
    wt = doc["weighting"]
    assert wt["statistic"] == "p50" and wt["unpriced"] == [] and wt["time_per_iteration_us"] > 0
    # measured sizes (powers of 4) are priced exactly; others lie between their measured neighbours
    law = lambda size: 2 + size / 1024  # noqa: E731
    for row in wt["messages"]:
        if row["how"] == "measured":
            assert row["latency_us"] == law(row["bytes"])
        else:
            assert row["how"] == "interpolated"
            below = 1 << (row["bytes"].bit_length() - 1) // 2 * 2
            assert law(below) < row["latency_us"] < law(4 * below)
    assert {r["how"] for r in wt["messages"]} == {"measured", "interpolated"}
    assert doc["compute"]["compute_s"] == pytest.approx(6 * 71_459_840 * 8192 / 100e12)
    assert doc["compute"]["communication_s"] == pytest.approx(wt["time_per_iteration_us"] * 1e-6)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("achieved FLOP/s" in a for a in doc["assumptions"])


def test_compute_counts_one_device_of_a_pipeline(capsys, tmp_path):
    runs = tmp_path / "run.jsonl"
    synthetic_run(runs)
    doc = workload_json(capsys, "--model", "19M", "--scheme", "pp", "--pp", "2", "--microbatches", "4",
                        "--results", str(runs), "--tflops", "100")
    wt = doc["weighting"]
    sends = [r for r in wt["messages"] if r["collective"] == "send"]
    # 1 boundary x 4 microbatches, forward and backward: 8 sends of b*s*h, summed over the 2 stages
    assert sum(r["count"] for r in sends) == 8
    assert wt["time_per_iteration_us"] == pytest.approx(8 * sends[0]["latency_us"])
    # one device's share is half of the pipeline's send time; compute is 6 * P * 4 microbatches * 8192 tokens / 2
    assert doc["compute"]["communication_s"] == pytest.approx(wt["time_per_iteration_us"] / 2 * 1e-6)
    assert doc["compute"]["compute_s"] == pytest.approx(6 * 71_459_840 * 8192 * 4 / 2 / 100e12)


def test_weighting_table(capsys, tmp_path):
    runs = tmp_path / "run.jsonl"
    synthetic_run(runs)
    code, out, _ = workload(capsys, "--model", "19M", "--scheme", "pp", "--pp", "2", "--results", str(runs),
                            "--stat", "avg")
    assert code == 0 and "latency statistic avg" in out and "(share of each size bin)" in out
    # two sends of b*s*h = 8 MiB per iteration (one per direction across the one boundary), priced by hand: 8 MiB
    # lies half way in log(size) between the measured 4 MiB (avg 3 + 4096 us) and 16 MiB (3 + 16384 us), so
    # log-log interpolation gives their geometric mean; a recv costs nothing
    send_us = 2 * math.sqrt((3 + 4096) * (3 + 16384))
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split()[:1] in (["send"], ["recv"]) and len(line.split()) == 6}
    assert rows == {"recv": ["recv", "2", "0", "B", "0", "0.0%"],
                    "send": ["send", "2", "16.0", "MiB", f"{send_us:.1f}", "100.0%"]}, out
    assert f"# total {send_us:.1f} us per iteration" in out
    assert "8388608      16777216  100.0%  100.0%  100.0%" in out  # every call in the 8 to 16 MiB bin


@pytest.mark.parametrize("args,message", [
    ([], "give --model NAME"),
    (["--model", "19M", "--hidden", "64"], "not both"),
    (["--hidden", "64"], "needs all of --hidden --layers --heads"),
    (["--model", "19M", "--scheme", "ddp", "--dp", "8", "--figure", "x.png"], "need --results"),
    (["--model", "19M", "--dp", "8", "--seq", "512,1024", "--results", "x.jsonl"], "a --seq sweep"),
    (["--model", "19M", "--seq", "0"], "positive whole numbers"),
    (["--trace", "/nonexistent/nccl.log"], "cannot read trace"),
    (["--trace", "x.log", "--scheme", "ddp"], "with --trace the messages come from the trace"),
    (["--model", "19M", "--trace-iterations", "3"], "need --trace FILE"),
    (["--model", "19M", "--scheme", "ddp", "--dp", "8", "--results", "/nonexistent.jsonl"], "no such results"),
    (["--model", "19M", "--scheme", "zero2"], "needs --dp of at least 2"),
])
def test_bad_input_is_one_line_and_status_2(capsys, args, message):
    code, out, err = workload(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("microbench: error: ") and message in err and err.count("\n") == 1


def test_bad_input_from_the_command_line():
    done = run_process([sys.executable, "-m", "microbench", "workload", "--model", "13B", "--scheme", "tp",
                        "--tp", "3"], timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "microbench: error: --tp 3 must divide --hidden (5120), --heads (40) and --vocab (50304)"]


def test_sizes_for_benchmarks(capsys, tmp_path):
    doc = workload_json(capsys, "--model", "19M", "--scheme", "3d", "--tp", "2", "--pp", "2", "--dp", "2")
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    sizes = sizes_for_benchmarks(str(path))
    expected: dict[str, set] = {}
    for m in doc["messages"]:
        bench = "latency" if m["collective"] in ("send", "recv") else m["collective"]
        expected.setdefault(bench, set()).add(m["bytes"])
    assert sizes == {b: sorted(v) for b, v in expected.items()}
    assert sizes["latency"] == [4 * 2048 * 512 * 2]  # one b*s*h bf16 activation, sent and received
    assert list(sizes) == sorted(sizes)
    sweep = workload_json(capsys, "--model", "19M", "--scheme", "tp", "--tp", "2", "--seq", "512,1024")
    path.write_text(json.dumps(sweep))
    assert 4 * 512 * 512 * 2 in sizes_for_benchmarks(str(path))["allreduce"]


@pytest.mark.parametrize("content,message", [
    (None, "cannot read workload file"),
    ("not json", "not a JSON workload file"),
    ('{"params": 1}', "no \"messages\" list"),
    ('{"messages": [{"collective": "gather", "bytes": 8}]}', "unknown collective 'gather'"),
    ('{"messages": [{"collective": "allreduce", "bytes": 1.5}]}', "not a whole number of bytes"),
    ('{"messages": []}', "has no messages"),
])
def test_sizes_for_benchmarks_rejects_bad_files(tmp_path, content, message):
    path = tmp_path / "w.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message):
        sizes_for_benchmarks(str(path))


def test_trace_ranks_unattributed_and_uncurved_in_the_table(capsys, tmp_path):
    from microbench.workload.traces.samples import nccl_call

    log = tmp_path / "nccl.log"
    log.write_text("\n".join([nccl_call("AllReduce", 256, 7, "0xa", 2, pid=1),
                              nccl_call("AllReduce", 256, 7, "0xa", 2, pid=1),
                              nccl_call("AllReduce", 256, 7, "0xb", 2, pid=2, dev=1),
                              nccl_call("AllReduce", 256, 7, "0xc", 2, prefix=False),
                              nccl_call("Gather", 8, 7, "0xb", 2, pid=2, dev=1)]) + "\n")
    code, out, _ = workload(capsys, "--trace", str(log))
    assert code == 0
    assert "3 collective calls from 2 rank(s)" in out
    assert "# calls per rank: min 1, median 1.5, max 2 (node1:1 gpu0 2, node1:2 gpu1 1); 2 communicator rank(s)" in out
    assert "# unattributed: 1 call(s) no rank could be credited with (not in the counts)" in out
    assert "# uncurved collectives (no measured curve, not priced), calls: Gather 1" in out
    assert "count is calls per rank (the mean over the 2 rank(s) in the trace)" in out


def test_several_trace_files_are_one_workload(capsys, tmp_path):
    from microbench.workload.traces.samples import json_document, kineto_comms

    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        events = [kineto_comms("allreduce", 1024, "Float", 2)] * (rank + 1)
        path.write_text("".join(json_document({"distributedInfo": {"rank": rank}}, "traceEvents", events)))
        paths.append(str(path))
    doc = workload_json(capsys, "--trace", *paths)
    assert doc["trace"]["ranks"] == 2 and doc["trace"]["rank_calls"] == {"rank 0": 1, "rank 1": 2}
    assert doc["messages"] == [{"collective": "allreduce", "bytes": 4096, "count": 1.5, "group_size": 2,
                                "phase": "trace"}]

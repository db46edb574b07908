#!/usr/bin/env python3
"""The workload model checked against real frameworks: messages and communication time, side by side.

For each framework and scheme (PyTorch DDP, FSDP2, DTensor tensor parallelism and pipelining; DeepSpeed
ZeRO-1/2/3) on 2 and 4 ranks of this machine (gloo, CPU), in one run:

1. the real job (``scripts/frameworks/torch_job.py``, ``deepspeed_job.py``) trains the GPT of
   ``scripts/frameworks/gpt.py`` and records its communication as users do: the torch profiler's Kineto trace
   per rank, and for DeepSpeed its comms logger's ``log_summary`` table;
2. the traces are read back with ``microbench workload --trace`` (the real job's messages), and the model's
   messages for the same shape and layout come from ``microbench.workload.schemes.build``
   (``biases="full"``: the job's layers have real GPT biases);
3. the two are matched by (collective, bytes) (``frameworks/compare.py``): each difference named with its
   cause, or reported as unexplained;
4. time: curves of ``microbench run --backend torch`` at the modelled sizes price the model's messages
   (``microbench workload --results``); ``microbench replay --backend torch`` issues them (the model's
   messages as a PARAM trace; the pipeline through ``--scheme pp``); the real job gives the time inside its collectives (the profiler's gloo
   annotations, slowest rank) and its exposed communication (iteration minus a compute-only iteration).

    python scripts/bench_frameworks.py [--ranks 2,4] [--cases ddp,fsdp2,zero1,zero2,zero3,tp,pp]
                                       [--json out.json] [--figure plots/frameworks-comm.png] [--work DIR]
    python scripts/bench_frameworks.py --replot out.json --figure plots/frameworks-comm.png

Needs torch (the CPU build: ``pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu``) and, for the DeepSpeed cases, ``pip install deepspeed==0.19.8``
(``pip install -e .[frameworks]``); a case whose framework is missing is reported as not run, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from frameworks.compare import compare, unexplained  # noqa: E402
from microbench.workload.distribution import Workload  # noqa: E402
from microbench.workload.model import Model  # noqa: E402
from microbench.workload.schemes import build  # noqa: E402

#: the model every job trains (5.29M parameters in fp32) and its batch
SHAPE = {"hidden": 256, "layers": 4, "heads": 4, "seq": 128, "vocab": 4096, "micro_batch": 2}
MICROBATCHES = 4  #: pipeline microbatches per iteration (pp)
ITERATIONS = {"warmup": 2, "profiled": 2, "timed": 5}


@dataclass(frozen=True)
class Case:
    name: str       #: what the table calls it
    scheme: str     #: the model's --scheme
    job: str        #: scripts/frameworks/<job>.py
    args: tuple     #: the job's options
    needs: str      #: the module the job imports
    layout: str = "dp"  #: the model's parallel size the ranks fill: "dp", "tp" or "pp"
    not_in_job: tuple = ()  #: (phase, why) the model lists but the job does not run


CASES = {
    "ddp": Case("PyTorch DDP", "ddp", "torch_job", ("--scheme", "ddp"), "torch"),
    "fsdp2": Case("PyTorch FSDP2", "fsdp2", "torch_job", ("--scheme", "fsdp2"), "torch"),
    "zero1": Case("DeepSpeed ZeRO-1", "zero1", "deepspeed_job", ("--stage", "1"), "deepspeed"),
    "zero2": Case("DeepSpeed ZeRO-2", "zero2", "deepspeed_job", ("--stage", "2"), "deepspeed"),
    "zero3": Case("DeepSpeed ZeRO-3", "zero3", "deepspeed_job", ("--stage", "3"), "deepspeed"),
    "tp": Case("PyTorch DTensor TP", "tp", "torch_job", ("--scheme", "tp"), "torch", "tp",
               (("recompute", "the model assumes Megatron-LM's full activation recomputation; the job does not "
                              "recompute (no activation checkpointing)"),)),
    "pp": Case("PyTorch pipelining (GPipe)", "pp", "torch_job", ("--scheme", "pp"), "torch", "pp"),
}


def model() -> Model:
    return Model(SHAPE["hidden"], SHAPE["layers"], SHAPE["heads"], SHAPE["seq"], SHAPE["vocab"], biases="full")


def env() -> dict:
    out = dict(os.environ, PYTHONPATH=str(REPO), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    out.setdefault("MICROBENCH_INDEX", tempfile.mkdtemp(prefix="mb-index-"))
    return out


def run(cmd: list[str], log: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def microbench(*args: str, log: Path | None = None, timeout: int = 900) -> dict:
    return json.loads(run([sys.executable, "-m", "microbench", *args], log, timeout).stdout)


# ------------------------------------------------------------------------------------------ the real job
def run_job(case: Case, ranks: int, out: Path) -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out.mkdir(parents=True, exist_ok=True)
    shape = [f"--{k.replace('_', '-')}={v}" for k, v in {**SHAPE, **ITERATIONS, "microbatches": MICROBATCHES}.items()]
    run([torchrun, "--standalone", f"--nproc-per-node={ranks}", str(REPO / "scripts" / "frameworks" / f"{case.job}.py"),
         *case.args, *shape, "--out", str(out)], out / "log.txt")


def real_messages(case: Case, ranks: int, out: Path) -> dict:
    traces = sorted(str(p) for p in out.glob("trace_rank*.json"))
    read = microbench("workload", "--trace", *traces, "--trace-format", "kineto", "--trace-group-size", str(ranks),
                      "--trace-iterations", str(ITERATIONS["profiled"]), "--json")
    result = {"kineto": read}
    if case.job == "deepspeed_job":
        result["comms_logger"] = microbench("workload", "--trace", str(out / "log.txt"), "--trace-format",
                                            "deepspeed", "--trace-group-size", str(ranks), "--trace-iterations",
                                            str(ITERATIONS["profiled"]), "--json")
    return result


def collective_calls(out: Path) -> list[list[float]]:
    """Per rank, the seconds of each gloo collective in issue order (the worker thread's annotations)."""
    per_rank = []
    for path in sorted(out.glob("trace_rank*.json")):
        events = json.loads(path.read_text())["traceEvents"]
        calls = sorted((e["ts"], e.get("dur", 0) * 1e-6) for e in events
                       if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("gloo:"))
        per_rank.append([dur for _, dur in calls])
    return per_rank


def collective_seconds(out: Path, point_to_point: bool) -> dict:
    """Seconds per iteration inside the collectives: the slowest rank's sum, and the sum over calls of the
    shortest rank's time in each (the rank that arrived last waits least: the transfer without the skew; not
    for send/recv, whose calls do not line up across ranks)."""
    per_rank = collective_calls(out)
    n = ITERATIONS["profiled"]
    aligned = len({len(c) for c in per_rank}) == 1 and not point_to_point
    return {"in_collectives_s": max(sum(c) for c in per_rank) / n,
            "last_arrival_s": sum(min(call) for call in zip(*per_rank)) / n if aligned else None}


def real_times(out: Path, point_to_point: bool = False) -> dict:
    timings = [json.loads(p.read_text()) for p in sorted(out.glob("timing_rank*.json"))]
    wall = [max(t["iteration_s"][i] for t in timings) for i in range(ITERATIONS["timed"])]
    compute = [max(t["compute_only_s"][i] for t in timings) for i in range(ITERATIONS["timed"])
               if all(t["compute_only_s"] for t in timings)]
    compute_s = statistics.median(compute) if compute else None
    return {"iteration_s": statistics.median(wall), "compute_only_s": compute_s,
            "exposed_s": statistics.median(wall) - compute_s if compute else None,
            **collective_seconds(out, point_to_point)}


# ------------------------------------------------------------------------------------------ the model
def model_messages(case: Case, ranks: int) -> list[dict]:
    """The model's messages for the case's layout, counted per rank (pipeline send/recv: Eq. 4's counts summed
    over the p stages, divided by p, as the trace's counts are the mean over its ranks)."""
    sizes = {"dp": {"dp": ranks}, "tp": {"tp": ranks}, "pp": {"pp": ranks, "microbatches": MICROBATCHES}}
    dist = build(Workload(model(), case.scheme, **sizes[case.layout], micro_batch=SHAPE["micro_batch"], dtype="fp32"))
    out = [m.as_json() for m in dist.messages]
    for m in out:
        if m["collective"] in ("send", "recv"):
            m["count"] /= ranks
    return out


PARAM_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
               "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "send": "send",
               "recv": "recv"}


def write_param_trace(messages: list[dict], ranks: int, path: Path) -> None:
    """The model's per-iteration messages as a PARAM basic trace (bytes as uint8 elements), for replay."""
    entries = []
    for m in messages:
        if m["phase"] != "setup":
            entries += [{"comms": PARAM_NAMES[m["collective"]], "in_msg_size": m["bytes"], "dtype": "uint8",
                         "world_size": ranks}] * round(m["count"])
    path.write_text(json.dumps(entries))


def replay_source(e: dict, trace: str) -> list[str]:
    """What replay issues: the model's messages as a PARAM trace (blocking, one communicator), except for the
    pipeline, whose send/recv a trace cannot replay (no peer): ``--scheme pp`` (its messages do not depend on
    the parameters, so the CLI's Eq. 1 model gives the same)."""
    if e["scheme"] != "pp":
        return ["--trace", trace, "--trace-format", "param"]
    shape = [f"--{k.replace('_', '-')}={v}" for k, v in SHAPE.items()]
    return [*shape, "--scheme", "pp", "--pp", str(e["ranks"]), "--microbatches", str(MICROBATCHES), "--dtype", "fp32"]


# ------------------------------------------------------------------------------------------ one rank count
def measure(cases: list[Case], ranks: int, work: Path) -> list[dict]:
    results = []
    for case in cases:
        out = work / f"{case.scheme}-{ranks}"
        entry = {"case": case.name, "scheme": case.scheme, "ranks": ranks}
        try:
            __import__(case.needs)
        except ImportError as exc:
            entry["not_run"] = f"{case.needs} is not installed ({exc})"
            results.append(entry)
            continue
        print(f"# {case.name} on {ranks} ranks", file=sys.stderr, flush=True)
        started = time.monotonic()
        run_job(case, ranks, out)
        entry["job_s"] = time.monotonic() - started
        entry["model"] = model_messages(case, ranks)
        entry["real"] = real_messages(case, ranks, out)
        rows = compare(entry["model"], entry["real"]["kineto"]["messages"], not_in_job=dict(case.not_in_job))
        entry["rows"] = [r.__dict__ for r in rows]
        entry["unexplained"] = len(unexplained(rows))
        entry["real_times"] = real_times(out, case.layout == "pp")
        # priced and replayed: the model's messages for the job's configuration (phases it does not run left out)
        skip = dict(case.not_in_job)
        write_param_trace([m for m in entry["model"] if m["phase"] not in skip], ranks, out / "model.param.json")
        results.append(entry)
    ran = [e for e in results if "model" in e]
    if not ran:
        return results
    sizes = work / f"sizes-{ranks}.json"
    sizes.write_text(json.dumps({"messages": [m for e in ran for m in e["model"] if m["phase"] != "setup"
                                               and m["collective"] in PARAM_NAMES]}))
    curves = work / f"curves-{ranks}.jsonl"
    curves.unlink(missing_ok=True)
    run([sys.executable, "-m", "microbench", "run", "--np", str(ranks), "--backend", "torch", "--sizes-from",
         str(sizes), "-i", "10", "-x", "2", "--out", str(curves)], work / f"curves-{ranks}.log", timeout=1800)
    for e in ran:
        trace = str(work / f"{e['scheme']}-{ranks}" / "model.param.json")
        priced = microbench("workload", "--trace", trace, "--trace-format", "param", "--results", str(curves), "--json")
        e["predicted_s"] = priced["weighting"]["time_per_iteration_us"] * 1e-6
        try:
            replay = microbench("replay", "--np", str(ranks), "--backend", "torch", *replay_source(e, trace),
                                "--iterations", "5", "--json", timeout=1800)
        except RuntimeError as exc:  # a layout the replay refuses: said in the table, the rest still measured
            e["replayed_s"] = None
            e["replay_refused"] = next((line for line in str(exc).splitlines() if "error:" in line), str(exc))
            continue
        e["replayed_s"] = replay["wall_s"]
        e["replay_predicted_s"] = replay["prediction"]["iteration_s"]
    return results


# ------------------------------------------------------------------------------------------ output
def message_table(e: dict) -> list[str]:
    flag = {"tp": "--tp {n}", "pp": f"--pp {{n}} --microbatches {MICROBATCHES}"}.get(e["scheme"], "--dp {n}")
    lines = [f"**{e['case']}, {e['ranks']} ranks** (`--scheme {e['scheme']} {flag.format(n=e['ranks'])}`)", "",
             "| model: collective | bytes | calls | real job: collective | calls | difference |",
             "|---|---:|---:|---|---:|---|"]
    for r in e["rows"]:
        lines.append(f"| {r['model_collective'] if r['model_calls'] else '-'} | {r['bytes']:,} | {r['model_calls']:g} "
                     f"| {r['collective'] if r['real_calls'] else '-'} | {r['real_calls']:g} | "
                     f"{r['difference'] or 'same'} |")
    if "comms_logger" in e["real"]:
        logged = e["real"]["comms_logger"]["messages"]
        calls = sum(m["count"] for m in logged)
        kineto = sum(m["count"] for m in e["real"]["kineto"]["messages"])
        lines.append(f"\nDeepSpeed's comms logger (rank 0, sizes rounded to 2 decimals): {calls:g} calls per "
                     f"iteration in {len(logged)} sizes; the profiler trace: {kineto:g}.")
    return lines + [""]


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def timing_table(results: list[dict]) -> list[str]:
    lines = ["| framework | scheme | ranks | messages | predicted (ms) | replayed (ms) | real: in collectives (ms) "
             "| real: last arrival (ms) | real: exposed (ms) | real: iteration / compute-only (ms) | predicted / real "
             "| replayed / real | predicted / last arrival |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in results:
        if "not_run" in e:
            lines.append(f"| {e['case']} | {e['scheme']} | {e['ranks']} | not run: {e['not_run']} |||||||||||")
            continue
        t = e["real_times"]
        real = t["in_collectives_s"]
        last = ms(t["last_arrival_s"]) if t.get("last_arrival_s") else "-"
        replayed_ratio = f"{e['replayed_s'] / real:.2f}" if e.get("replayed_s") else "-"
        ratio_last = f"{e['predicted_s'] / t['last_arrival_s']:.2f}" if t.get("last_arrival_s") else "-"
        match = "exact" if not e["unexplained"] else f"{e['unexplained']} unexplained"
        named = {r["difference"] for r in e["rows"] if r["difference"] and not r["difference"].startswith("unexpl")}
        if named and not e["unexplained"]:
            match += " after named differences"
        lines.append(f"| {e['case']} | {e['scheme']} | {e['ranks']} | {match} | {ms(e['predicted_s'])} | "
                     f"{ms(e['replayed_s'])} | {ms(real)} | {last} | {ms(t['exposed_s'])} | {ms(t['iteration_s'])} / "
                     f"{ms(t['compute_only_s'])} | {e['predicted_s'] / real:.2f} | {replayed_ratio} | "
                     f"{ratio_last} |")
    return lines


def figure(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [e for e in results if "predicted_s" in e]
    labels = [f"{e['scheme']}\n{e['ranks']} ranks" for e in ran]
    series = [("predicted (curves)", [e["predicted_s"] for e in ran]),
              ("replayed", [e["replayed_s"] or 0 for e in ran]),
              ("real: in collectives", [e["real_times"]["in_collectives_s"] for e in ran]),
              ("real: last arrival", [e["real_times"].get("last_arrival_s") or 0 for e in ran]),
              ("real: exposed", [e["real_times"]["exposed_s"] or 0 for e in ran])]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(ran)), 4.5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series):
        ax.bar([x + (i - (len(series) - 1) / 2) * width for x in range(len(ran))], [v * 1e3 or float("nan") for v in values],
               width, label=name)
    ax.set_xticks(range(len(ran)), labels, fontsize=8)
    ax.set_yscale("log")  # pipelining's transfers are 1000x smaller than its waits
    ax.set_ylabel("communication per iteration (ms, log)")
    ax.set_title("Model vs real frameworks (gloo, CPU, 5.3M-parameter GPT, fp32)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(results: list[dict], meta: dict) -> None:
    print(f"# {meta['when']}: torch {meta['torch']}, deepspeed {meta['deepspeed']}, {meta['cpus']} CPUs, load "
          f"{meta['load']}; model {SHAPE}, fp32; iterations {ITERATIONS}\n")
    for e in results:
        if "rows" in e:
            print("\n".join(message_table(e)))
    print("\n".join(timing_table(results)))
    for e in results:
        if e.get("replay_refused"):
            print(f"\nreplay refused {e['case']} on {e['ranks']} ranks: {e['replay_refused']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4", help="rank counts (default 2,4)")
    p.add_argument("--cases", default=",".join(CASES), help=f"cases (default {','.join(CASES)})")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("--figure", metavar="FILE.png", help="draw the timing comparison")
    p.add_argument("--work", metavar="DIR", help="keep the jobs' traces and logs here (default: a temporary folder)")
    p.add_argument("--replot", metavar="FILE", help="table and figure again from an earlier --json")
    args = p.parse_args()
    if args.replot:
        doc = json.loads(Path(args.replot).read_text())
        results, meta = doc["results"], doc["meta"]
    else:
        import torch

        try:
            import deepspeed
            ds_version = deepspeed.__version__
        except ImportError:
            ds_version = "not installed"
        work = Path(args.work or tempfile.mkdtemp(prefix="frameworks-"))
        cases = [CASES[c] for c in args.cases.split(",")]
        started = time.monotonic()
        results = [e for n in (int(r) for r in args.ranks.split(",")) for e in measure(cases, n, work)]
        meta = {"when": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__, "deepspeed": ds_version,
                "cpus": os.cpu_count(), "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                "seconds": round(time.monotonic() - started), "work": str(work)}
    report(results, meta)
    if args.json and not args.replot:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if args.figure:
        figure(results, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The input files the docs' examples assume, made in the current folder for scripts/check_docs.py.

A page says ``microbench import omb job-1234.out`` or ``microbench workload --trace nccl.log``; a newcomer has
such a file, the docs harness has not. This makes one, with the generators the tests use (the tools' own
formats: tests/fixtures/importers/make.py, microbench/workload/traces/samples.py, the workload fixtures), so the
page's command runs as written. Never someone's real log.

    python scripts/docs_inputs.py omb job-1234.out                  # OMB output: osu_allreduce, osu_latency
    python scripts/docs_inputs.py nccl-tests all_reduce.json all_gather.log
    python scripts/docs_inputs.py nccl-log nccl.log [rank0.log rank1.log]   # NCCL_DEBUG=INFO call lines
    python scripts/docs_inputs.py kineto rank0.pt.trace.json.gz rank1.pt.trace.json.gz
    python scripts/docs_inputs.py et et_rank0.json                  # a PyTorch Execution Trace
    python scripts/docs_inputs.py deepspeed ds.log
    python scripts/docs_inputs.py inspector nccl-inspector-1234/    # NCCL Inspector logs (a folder)
    python scripts/docs_inputs.py nightlies RESULTS.jsonl nightly/  # nightly/old/ and nightly/new/, 5 nights each
    python scripts/docs_inputs.py december RESULTS.jsonl nightly/   # nightly/2026-12-02/ ... nightly/2026-12-31/
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SIZES = [8, 64, 1024, 65536, 1 << 20]


def _make():
    sys.path.insert(0, str(FIXTURES / "importers"))
    import make

    return make


def omb(path: str) -> None:
    make = _make()
    lines = make.omb_collective("Allreduce", SIZES, full=True) + make.omb_latency(SIZES)
    make.write(Path(path), lines)


def nccl_tests(*paths: str) -> None:
    make = _make()
    hosts = ["node01", "node02"]
    for path in paths:
        program = Path(path).stem + "_perf"
        if path.endswith(".json"):
            make.write(Path(path), make.nccl_json(program, hosts, SIZES))
        else:
            make.write(Path(path), make.nccl_text(program, hosts, SIZES))


def nccl_log(*paths: str) -> None:
    """One NCCL_DEBUG=INFO log per path, one rank each, of a 2-rank job's allreduces and allgathers."""
    from microbench.workload.traces.samples import nccl_call, nccl_init

    for rank, path in enumerate(paths):
        pid = 100 + rank
        lines = [nccl_init("0xabc", rank, len(paths) if len(paths) > 1 else 2, pid=pid)]
        for step in range(10):
            lines += [nccl_call("AllReduce", 262144, 7, "0xabc", max(len(paths), 2), pid=pid, opcount=2 * step),
                      nccl_call("AllGather", 65536, 7, "0xabc", max(len(paths), 2), pid=pid, opcount=2 * step + 1)]
        Path(path).write_text("\n".join(lines) + "\n")


def kineto(*paths: str) -> None:
    text = (FIXTURES / "workload" / "kineto_trace.json").read_bytes()
    for path in paths:
        Path(path).write_bytes(gzip.compress(text) if path.endswith(".gz") else text)


def et(path: str) -> None:
    from microbench.workload.traces.samples import et_comms_node, json_document

    nodes = [et_comms_node(i, "allreduce", 1 << 18, "Float", 2) for i in range(1, 6)]
    head = {"schema": "1.1.1-chakra.0.0.4", "pid": 5150, "time": "2026-01-01 00:00:00", "start_ts": 1}
    Path(path).write_text("".join(json_document(head, "nodes", nodes, {"finish_ts": 2})))


def deepspeed(path: str) -> None:
    shutil.copy(FIXTURES / "workload" / "deepspeed_verbose.log", path)


def inspector(folder: str) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "nccl" / "inspector-v4.jsonl", Path(folder) / "rank0.log")


def nightlies(results: str, folder: str) -> None:
    """FOLDER/old and FOLDER/new: 5 nights each from one real run (scripts/gate_nightlies.py)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from gate_nightlies import Plan, write_nightlies

    write_nightlies(results, str(Path(folder) / "old"), Plan(5, dt.date(2026, 1, 1), seed=1))
    write_nightlies(results, str(Path(folder) / "new"), Plan(5, dt.date(2026, 1, 6), seed=2))


def december(results: str, folder: str) -> None:
    """FOLDER/2026-12-02 ... FOLDER/2026-12-31: a month of nights from one real run (``--lookback 14`` and
    ``--new nightly/2026-12-31/`` have what they need)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from gate_nightlies import Plan, write_nightlies

    write_nightlies(results, folder, Plan(30, dt.date(2026, 12, 2), seed=3))


MAKERS = {"omb": omb, "nccl-tests": nccl_tests, "nccl-log": nccl_log, "kineto": kineto, "et": et,
          "deepspeed": deepspeed, "inspector": inspector, "nightlies": nightlies, "december": december}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("kind", choices=sorted(MAKERS))
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    MAKERS[a.kind](*a.paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

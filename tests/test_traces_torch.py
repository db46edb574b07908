"""Traces that PyTorch itself writes: a 2-rank gloo job under the profiler and the execution-trace observer,
read back by the kineto and execution-trace readers (gloo records the ProcessGroup annotations that NCCL
traces of PyTorch 2.0 hold, with the same Input Dims / Input type and input shapes / types)."""

import json
import socket
import sys

import pytest

from microbench.workload.traces import read_traces

from conftest import run_process

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install ml_dtypes)")

JOB = r'''
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

def rank_main(rank, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    et = ExecutionTraceObserver().register_callback(f"{out}/et_{rank}.json")
    et.start()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        dist.all_reduce(torch.ones(1024, dtype=torch.bfloat16))
        dist.all_gather_into_tensor(torch.empty(512), torch.ones(256))
        dist.broadcast(torch.ones(8, dtype=torch.int64), 0)
        dist.all_to_all_single(torch.empty(16), torch.ones(16))
        if rank == 0:
            dist.send(torch.ones(10), 1)
        else:
            dist.recv(torch.empty(10), 0)
        dist.barrier()
    et.stop()
    et.unregister_callback()
    prof.export_chrome_trace(f"{out}/kineto_{rank}.json")
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank_main, args=(sys.argv[1], sys.argv[2]), nprocs=2)
'''


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch_traces")
    script = out / "job.py"
    script.write_text(JOB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    done = run_process([sys.executable, str(script), str(out), port], timeout=240)
    assert done.returncode == 0, done.output
    return out


EXPECTED = {("allreduce", 2048, 2): 1, ("allgather", 1024, 2): 1, ("broadcast", 64, 2): 1,
            ("alltoall", 32, 2): 1, ("send", 40, 2): 0.5, ("recv", 40, 2): 0.5}


def counts(report):
    return {(m.collective, m.bytes, m.group_size): m.count for m in report.messages()}


def test_profiler_traces_of_both_ranks(traces):
    report = read_traces([str(traces / "kineto_0.json"), str(traces / "kineto_1.json")], group_size=2)
    assert report.format == "kineto" and report.ranks == ["rank 0", "rank 1"]
    assert counts(report) == EXPECTED
    assert report.rank_spread() == {"min": 5, "median": 5, "max": 5}
    assert report.skipped["no data (barrier, wait, init)"] == 2


def test_execution_traces_of_both_ranks(traces):
    pids = [json.loads((traces / f"et_{r}.json").read_text())["pid"] for r in (0, 1)]
    report = read_traces([str(traces / "et_0.json"), str(traces / "et_1.json")], group_size=2)
    assert report.format == "execution-trace" and report.ranks == sorted(f"pid {p}" for p in pids)
    assert counts(report) == EXPECTED
    assert any(n.startswith("execution trace schema '1.") and "chakra" in n for n in report.notes)

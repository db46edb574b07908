"""Layer 6, torch: torch.distributed initialises on the chosen backend and a tiny collective completes.

On each rank, ``collect``: torch (imported in the background since the rank started, so its import overlaps the
layers before), its TCPStore on the rendezvous layer 4 reached (rank 0 the server; under torchrun torchrun's own
store, through its environment), ``init_process_group`` on gloo (nccl with a GPU on every rank, or as
``--torch-backend`` says), then an allreduce of one number, checked. Each of these is a step the coordinator sees,
so a rank that does not get through one is named at it. On the coordinator, ``judge``: every rank's sum is the
number of ranks.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

from microbench.doctor.job import Job
from microbench.doctor.layers import BY_NAME, Finding, LayerResult, verdict

LAYER = BY_NAME["torch"]
HEARTBEAT_S = 1.0  #: while torch's import goes on, the rank says so this often


class Importer:
    """``import torch`` in a thread from the rank's start (a second or more, longer on a loaded node)."""

    def __init__(self):
        self.error: str | None = None
        self.seconds: float | None = None
        self._thread = threading.Thread(target=self._import, name="microbench-doctor-torch", daemon=True)
        self._thread.start()

    def _import(self) -> None:
        import os

        # torch's C++ warnings (a client address without a reverse DNS name) are not what the doctor reports
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        start = time.monotonic()
        try:
            import torch  # noqa: F401
            import torch.distributed  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - reported as this rank's finding
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = time.monotonic() - start

    def wait(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


def choose_backend(requested: str, cuda_everywhere: bool) -> str:
    if requested != "auto":
        return requested
    return "nccl" if cuda_everywhere else "gloo"


def collect(ctx: dict, rank: int, size: int, local_rank: int | None, importer: Importer | None,
            under_torchrun: bool, step) -> dict:
    """Join the process group and allreduce one number; ``step(text)`` reports progress."""
    timeout = float(ctx["timeout"])
    step("import torch")
    if importer is None:
        return {"error": "torch is not installed here"}
    limit = float(ctx.get("import_timeout", timeout))  # as slow as a Python start-up at scale: the launch's limit
    end = time.monotonic() + limit
    while not importer.wait(min(HEARTBEAT_S, max(end - time.monotonic(), 0.0))):
        if time.monotonic() >= end:
            return {"error": f"import torch did not finish in {limit:g} s"}
        step("import torch", heartbeat=True)  # slow, not stuck: the coordinator's clock for this rank restarts
    if importer.error:
        return {"error": f"import torch failed: {importer.error}"}
    import torch
    import torch.distributed as dist

    backend = ctx["backend"]
    if backend == "nccl" and not torch.cuda.is_available():
        return {"error": "the nccl backend needs a GPU and torch sees none here"}
    device = torch.device("cuda", (local_rank or 0) % torch.cuda.device_count()) if backend == "nccl" else None
    if device is not None:
        torch.cuda.set_device(device)
    start = time.monotonic()
    limit = dt.timedelta(seconds=timeout)
    if under_torchrun:
        step("init_process_group (torchrun's store)")
        dist.init_process_group(backend, rank=rank, world_size=size, timeout=limit)
    else:
        host, port = ctx["store"]
        step(f"connect to the store {host}:{port}")
        store = dist.TCPStore(host, int(port), size, is_master=rank == 0, timeout=limit, wait_for_workers=False)
        step("init_process_group")
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=limit)
    init_s = time.monotonic() - start
    step("allreduce of one number")
    value = torch.ones(1, device=device)
    t0 = time.monotonic()
    dist.all_reduce(value)
    if device is not None:
        torch.cuda.synchronize(device)
    return {"backend": backend, "init_s": round(init_s, 3), "allreduce_s": round(time.monotonic() - t0, 4),
            "sum": float(value.item()), "import_s": round(importer.seconds or 0.0, 2),
            "torch": str(torch.__version__), "device": str(device) if device is not None else "cpu"}


def leave() -> None:
    """Destroy the process group (a group left to interpreter exit can abort the process: cluster.world)."""
    from microbench.cluster.world import leave_torch_distributed

    try:
        leave_torch_distributed(barrier=False)
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass


def judge(reports: dict[int, dict], job: Job, size: int) -> LayerResult:
    findings = []
    for host, ranks in job.by_host([r for r, rep in reports.items() if rep.get("sum") != float(size)]).items():
        sums = sorted({reports[r].get("sum") for r in ranks})
        findings.append(Finding(f"{host}: the allreduce of 1 on {size} ranks gave {sums}", host=host, ranks=ranks))
    first = reports[min(reports)]
    init = max(rep.get("init_s", 0.0) for rep in reports.values())
    summary = (f"{first.get('backend')} on {size} rank(s) ({first.get('device')}): init {init:.2f} s, allreduce "
               f"of one number correct; torch {first.get('torch')}")
    if findings:
        summary = findings[0].what
    return verdict(summary, findings, LAYER, details={
        "backend": first.get("backend"), "init_s_max": init,
        "import_s_max": max(rep.get("import_s", 0.0) for rep in reports.values())})

"""The torch.distributed runtime: importing torch, which backends the build has, joining the process group,
and the control-plane reductions (``TorchReducer``) on a gloo group.
"""

from __future__ import annotations

import datetime as dt
import os
import socket

import numpy as np

from microbench.errors import RunError, UsageError

TORCH_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "auto")

#: The CPU build of torch (a few hundred MB): from PyTorch's own index. Plain ``pip install torch`` from PyPI is a
#: CUDA build of several GB. The README, docs/torch-and-gpus.md, .ci/run, the error below and ``microbench info``
#: all say it with these words (tests/test_docs.py checks).
TORCH_CPU_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCH_INSTALL_HINT = (f"CPU only: {TORCH_CPU_INSTALL} && pip install ml_dtypes; with CUDA: "
                      f"pip install -e '.[torch]' (PyPI's torch is a CUDA build of several GB)")


def import_torch():
    """torch and torch.distributed, or a clear error naming the extra to install."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise RunError(f"--backend torch needs PyTorch ({exc}); {TORCH_INSTALL_HINT}") from exc
    return torch, dist


def available_backends(dist) -> dict[str, bool]:
    return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available(),
            "ucc": bool(getattr(dist, "is_ucc_available", lambda: False)())}


def resolve_backend(name: str, device: str) -> str:
    """The process-group backend to use: 'auto' is nccl on CUDA and gloo on the CPU; refuse what is missing."""
    torch, dist = import_torch()
    have = available_backends(dist)
    choice = name if name != "auto" else ("nccl" if device == "cuda" else "gloo")
    if not have.get(choice):
        offered = ", ".join(k for k, v in have.items() if v) or "none"
        raise UsageError(f"this torch build ({torch.__version__}) has no {choice} backend "
                         f"(dist.is_{choice}_available() is False); it offers: {offered}")
    if choice == "nccl" and device != "cuda":
        raise UsageError("the nccl backend moves CUDA tensors: add --device cuda, or use --torch-backend gloo")
    return choice


def init_process_group(backend: str, rank: int, size: int, launcher: str | None, bcast=None,
                       device_index: int | None = None, timeout_s: float = 600.0):
    """Join the default process group (see the module docstring for the rendezvous)."""
    torch, dist = import_torch()
    timeout = dt.timedelta(seconds=timeout_s)
    kwargs = {}
    if device_index is not None and backend == "nccl":
        kwargs["device_id"] = torch.device("cuda", device_index)
    if launcher == "torchrun":
        dist.init_process_group(backend, rank=rank, world_size=size, timeout=timeout, **kwargs)
        return
    if bcast is None:
        raise RunError("--backend torch outside torchrun needs MPI (mpiexec or srun) to share the rendezvous")
    address = None
    store = None
    if rank == 0:
        host = os.environ.get("MICROBENCH_MASTER_ADDR") or socket.gethostname()
        store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False)
        address = (host, store.port)
    host, port = bcast(address)
    if rank != 0:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout, **kwargs)


NCCL_CONNECT_DEFAULT = "unset (NCCL's default: runtime connection since NCCL 2.22)"
#: NCCL's own default where it cannot connect at runtime: older than 2.22, or cuMem off (runtimeConn = cuMem && on)
NCCL_CONNECT_OLD = "unset (NCCL {version} connects with the communicator: runtime connection came in 2.22)"
NCCL_CONNECT_NO_CUMEM = "unset (NCCL_CUMEM_ENABLE=0: NCCL connects with the communicator; runtime connection needs cuMem)"


def nccl_connect_env(backend: str, mode: str, env: dict, version: tuple | None = None) -> str | None:
    """What NCCL_RUNTIME_CONNECT the communicator will read, set in ``env`` first for ``mode`` "eager" ("0":
    every connection made with the communicator, so no call carries one); None for other backends.

    Unset, what NCCL does by itself is said: runtime connection from NCCL 2.22 (``version``, a tuple) with cuMem
    on; with an older NCCL or ``NCCL_CUMEM_ENABLE=0`` it connects with the communicator (NCCL's init.cc:
    runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT). Must run before the NCCL communicator exists: NCCL reads
    the variable when it creates one."""
    if backend != "nccl":
        return None
    if mode == "eager":
        env["NCCL_RUNTIME_CONNECT"] = "0"
    if "NCCL_RUNTIME_CONNECT" in env:
        return env["NCCL_RUNTIME_CONNECT"]
    if version is not None and tuple(version[:2]) < (2, 22):
        return NCCL_CONNECT_OLD.format(version=".".join(map(str, version)))
    if env.get("NCCL_CUMEM_ENABLE") == "0":
        return NCCL_CONNECT_NO_CUMEM
    return NCCL_CONNECT_DEFAULT


def connects_at_runtime(recorded: str | None) -> bool:
    """Whether a run record's ``torch.nccl_runtime_connect`` means NCCL made connections at the first call that
    needed them (NCCL's default from 2.22 with cuMem, or "1" set by the site)."""
    return recorded in (NCCL_CONNECT_DEFAULT, "1")


def nccl_version(torch) -> tuple | None:
    """NCCL's version as torch was built with it, (2, 21, 5); None where torch does not say."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - informative only
        return None
    return tuple(v) if isinstance(v, tuple) else None


def group_options(backend: str, device_index: int | None, new_group) -> dict:
    """Keyword arguments of ``dist.new_group`` for the benchmark's group: NCCL's communicator made now, on this
    rank's GPU (``device_id``), where ``new_group`` takes it (torch 2.5+); otherwise none (made at first use).

    Made now, the communicator's own GPU memory is taken before the preflight reads the free memory, and its
    creation is not part of any benchmark's first call."""
    import inspect

    if backend != "nccl" or device_index is None or "device_id" not in inspect.signature(new_group).parameters:
        return {}
    torch, _ = import_torch()
    return {"device_id": torch.device("cuda", device_index)}


class TorchReducer:
    """Control-plane reductions on a gloo group (used when torchrun started the job: no MPI there)."""

    def __init__(self):
        self.torch, self.dist = import_torch()
        self.group = self.dist.new_group(backend="gloo")
        self.rank, self.size = self.dist.get_rank(), self.dist.get_world_size()
        d = self.dist
        self._ops = {"sum": d.ReduceOp.SUM, "min": d.ReduceOp.MIN, "max": d.ReduceOp.MAX}

    def _tensor(self, values: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(values).copy())

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        t = self._tensor(values)
        self.dist.all_reduce(t, op=self._ops[op], group=self.group)
        return t.numpy()

    def reduce_to_root(self, values: np.ndarray, op: str) -> np.ndarray | None:
        t = self._tensor(values)
        self.dist.reduce(t, 0, op=self._ops[op], group=self.group)
        return t.numpy() if self.rank == 0 else None

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def bcast(self, obj, root: int = 0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=root, group=self.group)
        return box[0]

    def gather(self, obj, root: int = 0):
        out = [None] * self.size if self.rank == root else None
        self.dist.gather_object(obj, out, dst=root, group=self.group)
        return out

    def abort(self, code: int) -> None:
        # torchrun ends the other workers when one exits with an error
        os._exit(code)


def collective_library(backend_name: str, hip_version: str | None) -> str | None:
    """The library behind torch's process-group backend where it is a GPU one: RCCL for ``nccl`` on a ROCm build
    of torch (``torch.version.hip`` set), NCCL for ``nccl`` on a CUDA build; None for the others."""
    if backend_name != "nccl":
        return None
    return "RCCL" if hip_version else "NCCL"


def torch_metadata(backend_name: str, device: str, device_index: int | None) -> dict:
    """torch version, process-group backend and its library (NCCL or RCCL) and version, CUDA or HIP version,
    device name and count, for the run record."""
    torch, dist = import_torch()
    hip = getattr(torch.version, "hip", None)
    out = {"version": str(torch.__version__), "backend": backend_name, "available": available_backends(dist),
           "cuda": torch.version.cuda, "hip": hip, "library": collective_library(backend_name, hip),
           "device": device}
    if backend_name == "nccl":
        try:
            v = torch.cuda.nccl.version()
            out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - informative only
            out["nccl_version"] = None
    if device == "cuda" and torch.cuda.is_available():
        out["device_count"] = torch.cuda.device_count()
        out["device_index"] = device_index
        out["device_name"] = torch.cuda.get_device_name(device_index or 0)
    return out

"""Device buffers: which GPU a rank uses, what it offers, device pools and the device cache flush.

Every pool has host slots (page-aligned, written by their rank; ``--check`` fills and verifies them) and,
for ``--device cuda``, device slots of the same shape (torch tensors or cupy arrays) that the transport
moves. ``push(k)`` copies slot k's host data to the device and ``pull(k)`` back, both outside the timed
region and followed by a device synchronisation. On the CPU the torch tensors share the host slots'
memory, so nothing is copied. GPU timing is in microbench.measure.gpu_loops.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import numpy as np

from microbench.benchmarks.base import Buffers
from microbench.benchmarks.checkdata import POISON
from microbench.errors import RunError, UsageError
from microbench.measure.buffers import BufferPool


def cuda_runtime(buffer_kind: str):
    """(module, device count) for the library that will hold device buffers: torch or cupy."""
    if buffer_kind == "cupy":
        try:
            import cupy
        except ImportError as exc:
            raise RunError(f"--buffer cupy needs cupy ({exc}); pip install cupy-cuda12x (or pip install -e '.[cuda]' in a checkout)") from exc
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # noqa: BLE001 - cupy raises CUDARuntimeError without a driver
            raise RunError(f"--device cuda: no CUDA device is usable by cupy ({str(exc).splitlines()[0]})") from exc
        if count < 1:
            raise RunError("--device cuda: cupy sees no CUDA device")
        return cupy, count
    try:
        import torch
    except ImportError as exc:
        raise RunError(f"--device cuda with torch buffers needs PyTorch ({exc})") from exc
    if not torch.cuda.is_available():
        raise RunError("--device cuda: no CUDA device (torch.cuda.is_available() is False"
                       f"{'; this is a CPU-only torch build' if torch.version.cuda is None else ''})")
    return torch, torch.cuda.device_count()


def index_for_rank(local_rank: int | None, count: int, gpus_per_node: int | None) -> int:
    """This rank's GPU index: its local rank modulo the GPUs per node (--gpus-per-node, else all visible).

    ``local_rank`` None (the launcher did not say) is GPU 0 only where one GPU is visible (one per rank, through
    CUDA_VISIBLE_DEVICES); with several it is an error, never every rank on GPU 0."""
    per_node = gpus_per_node or count
    if per_node < 1:
        raise RunError("--gpus-per-node must be at least 1")
    if local_rank is None and count > 1:
        from microbench.cluster.launch import LOCAL_RANK_VARS

        raise RunError(f"cannot tell this rank's GPU: {count} GPUs are visible and the launcher set none of "
                       f"{', '.join(LOCAL_RANK_VARS)}; set one of them, or give each rank its own GPU with "
                       f"CUDA_VISIBLE_DEVICES")
    index = (local_rank or 0) % per_node
    if index >= count:
        raise RunError(f"local rank {local_rank} maps to GPU {index} but only {count} are visible")
    return index


def l2_cache_bytes(buffer_kind: str, index: int) -> int | None:
    """The GPU's L2 cache size from its properties."""
    if buffer_kind == "cupy":
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(index)["l2CacheSize"])
    import torch

    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0)) or None


#: AMD GPUs whose memory side has a last-level cache behind the L2 (AMD's Infinity Cache, "MALL"), by the
#: architecture's gfx name, in bytes: what cold must evict besides the L2 (AMD's CDNA 3 and 4 white papers:
#: 256 MB on MI300X, MI300A, MI325X, MI350X and MI355X). CDNA 1 and 2 (gfx908, gfx90a) have none.
INFINITY_CACHE_BYTES = {"gfx942": 256 << 20, "gfx950": 256 << 20, "gfx908": 0, "gfx90a": 0}


def gpu_arch(buffer_kind: str, index: int) -> str | None:
    """The GPU's architecture name on ROCm ("gfx942", from ``gcnArchName`` "gfx942:sramecc+:xnack-"); None elsewhere."""
    try:
        if buffer_kind == "cupy":
            import cupy

            raw = cupy.cuda.runtime.getDeviceProperties(index).get("gcnArchName")
        else:
            import torch

            raw = getattr(torch.cuda.get_device_properties(index), "gcnArchName", None)
    except Exception:  # noqa: BLE001 - informative: an unknown architecture needs --cache-size for cold
        return None
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    name = str(raw or "").split(":")[0]
    return name or None


def device_cache_bytes(l2_bytes: int | None, runtime: str, arch: str | None) -> tuple[int | None, str]:
    """(the cache cold and --flush must evict on this GPU, where that figure comes from).

    CUDA: the L2. ROCm: the L2 plus the Infinity Cache of its architecture (``INFINITY_CACHE_BYTES``); an AMD
    architecture not in that table is unknown (None: cold and --flush then need --cache-size), because an
    L2-sized flush would leave a memory-side cache of up to 256 MB warm."""
    if runtime != "rocm":
        return l2_bytes, "GPU L2 (device properties)"
    if not l2_bytes or arch not in INFINITY_CACHE_BYTES:
        return None, f"unknown for AMD {arch or 'GPU'} (its Infinity Cache size is not known here)"
    extra = INFINITY_CACHE_BYTES[arch]
    if not extra:
        return l2_bytes, f"GPU L2 (device properties; {arch} has no Infinity Cache)"
    return l2_bytes + extra, f"GPU L2 (device properties) + {extra >> 20} MiB Infinity Cache ({arch})"


def free_device_bytes(buffer_kind: str, index: int) -> int:
    if buffer_kind == "cupy":
        import cupy

        with cupy.cuda.Device(index):
            return int(cupy.cuda.runtime.memGetInfo()[0])
    import torch

    return int(torch.cuda.mem_get_info(index)[0])


def cuda_aware_mpi(libmpi_path: str | None) -> bool | None:
    """Ask the loaded MPI whether it takes CUDA pointers (Open MPI and MPICH extensions); None if it cannot say."""
    if os.environ.get("MICROBENCH_ASSUME_CUDA_AWARE") in ("0", "1"):
        return os.environ["MICROBENCH_ASSUME_CUDA_AWARE"] == "1"
    try:
        lib = ctypes.CDLL(libmpi_path) if libmpi_path else ctypes.CDLL(None)
    except OSError:
        return None
    query = getattr(lib, "MPIX_Query_cuda_support", None)  # Open MPI (mpi-ext.h)
    if query is not None:
        query.restype = ctypes.c_int
        if query():
            return True
    rocm = getattr(lib, "MPIX_Query_rocm_support", None)  # Open MPI built with ROCm (its mpi-ext.h)
    if rocm is not None:
        rocm.restype = ctypes.c_int
        if rocm():
            return True
    if query is not None or rocm is not None:
        return False
    gpu_query = getattr(lib, "MPIX_GPU_query_support", None)  # MPICH: (MPIX_GPU_SUPPORT_CUDA = 0, _HIP = 2, int *)
    if gpu_query is not None:
        gpu_query.restype = ctypes.c_int
        answers = []
        for kind in (0, 2):
            flag = ctypes.c_int(0)
            if gpu_query(ctypes.c_int(kind), ctypes.byref(flag)) == 0:
                answers.append(bool(flag.value))
        if answers:
            return any(answers)
    return None


def address_of(buf) -> int:
    """Raw address of a numpy array, torch tensor or cupy array (for the native loop)."""
    if buf is None:
        return 0
    if hasattr(buf, "data_ptr"):
        return int(buf.data_ptr())
    if hasattr(buf, "ctypes"):
        return int(buf.ctypes.data)
    return int(buf.data.ptr)  # cupy


class DevicePool:
    """Host slots for fill/verify and device slots the transport uses; see the module docstring."""

    def __init__(self, host: BufferPool, kind: str, buffer_kind: str, torch_dtype=None, staged: bool = False):
        self.host = host
        self.staged_through_host = staged and kind == "cuda"
        self.slots = host.slots
        self.kind = kind  # "cpu" or "cuda"
        self.buffer_kind = buffer_kind  # "numpy", "torch", "cupy"
        self._torch = None
        if buffer_kind == "numpy":
            self.device_slots = host.slots
        elif kind == "cpu":
            import torch

            from microbench.measure.backends.torch_dist import host_tensor

            self._torch = torch
            self.device_slots = [Buffers(*(host_tensor(torch, a) if a is not None else None
                                           for a in (s.send, s.recv, s.ack))) for s in host.slots]
        else:
            self.device_slots = [Buffers(*(self._device_array(a, torch_dtype) for a in (s.send, s.recv, s.ack)))
                                 for s in host.slots]

    @property
    def copies(self) -> bool:
        return self.kind == "cuda"

    def _device_array(self, host_array, torch_dtype):
        if host_array is None:
            return None
        if self.buffer_kind == "cupy":
            import cupy

            out = cupy.empty(host_array.shape, dtype=host_array.dtype if host_array.dtype.char != "E" else np.uint16)
            out.fill(0)
            return out
        import torch

        self._torch = torch
        return torch.zeros(host_array.size, dtype=torch_dtype, device="cuda")

    def _pairs(self, k: int):
        return [(h, d) for h, d in zip((self.slots[k].send, self.slots[k].recv, self.slots[k].ack),
                                       (self.device_slots[k].send, self.device_slots[k].recv, self.device_slots[k].ack))
                if h is not None]

    def push(self, k: int) -> None:
        """Host slot k -> device slot k (untimed), then synchronise."""
        if not self.copies:
            return
        for h, d in self._pairs(k):
            if self.buffer_kind == "cupy":
                d.set(h.view(np.uint16) if h.dtype.char == "E" else h)
            else:
                from microbench.measure.backends.torch_dist import host_tensor

                d.copy_(host_tensor(self._torch, h))
        self._sync()
        if self.staged_through_host:
            # the staged call must bring its input from the device, as an application's would: poison the host
            # copy so that a call that forgets to (or a check that reads it) sees wrong data
            for h, _ in staged_copies(self.slots[k], self.device_slots[k])[0]:
                h[...] = POISON

    def pull(self, k: int) -> None:
        """Device slot k -> host slot k (untimed)."""
        if not self.copies:
            return
        self._sync()
        for h, d in self._pairs(k):
            if self.buffer_kind == "cupy":
                host = d.get()
                h.view(np.uint8)[...] = host.view(np.uint8)
            else:
                from microbench.measure.backends.torch_dist import host_tensor

                host_tensor(self._torch, h).copy_(d.cpu())

    def staged(self, k: int, call):
        """``call`` on host slot k wrapped in the copies a host-only MPI needs (``staged_copies``), all inside
        the timed call (--stage-host)."""
        to_host, to_device = staged_copies(self.slots[k], self.device_slots[k])
        sync = self._sync

        if self.buffer_kind == "cupy":
            def run():
                for h, d in to_host:
                    h.view(np.uint8)[...] = d.get().view(np.uint8)
                call()
                for h, d in to_device:
                    d.set(h.view(np.uint16) if h.dtype.char == "E" else h)
                sync()
        else:
            from microbench.measure.backends.torch_dist import host_tensor

            torch = self._torch
            pairs_in = [(host_tensor(torch, h), d) for h, d in to_host]
            pairs_out = [(host_tensor(torch, h), d) for h, d in to_device]

            def run():
                for h, d in pairs_in:
                    h.copy_(d)
                call()
                for h, d in pairs_out:
                    d.copy_(h)
                sync()
        return run

    def _sync(self) -> None:
        if self.buffer_kind == "cupy":
            import cupy

            cupy.cuda.runtime.deviceSynchronize()
        elif self._torch is not None and self.kind == "cuda":
            self._torch.cuda.synchronize()

    def huge_page_bytes(self):
        return self.host.huge_page_bytes()

    def close(self) -> None:
        """Drop the slots and give their device memory back to the driver: the caching allocators (torch's,
        cupy's pool) would otherwise keep the largest size's pool reserved, out of reach of NCCL's own
        allocations (a later communicator, its runtime connections) and of the next preflight's free memory."""
        self.device_slots = []
        self.host.close()
        if self.kind == "cuda" and self.buffer_kind in ("torch", "cupy"):
            release_device_memory(self.buffer_kind)


def release_device_memory(buffer_kind: str) -> None:
    """Free the caching allocator's unused blocks (torch.cuda.empty_cache, or cupy's pool free_all_blocks)."""
    if buffer_kind == "cupy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    else:
        import torch

        torch.cuda.empty_cache()


def staged_copies(host: Buffers, device: Buffers) -> tuple[list, list]:
    """(device -> host copies before the call, host -> device copies after it), as (host, device) pairs.

    The operation's input goes to the host and its output comes back: the send buffer, then the receive
    buffer; in place the one (receive) buffer is both, and a send-only buffer (broadcast) comes back too."""
    send = [(host.send, device.send)] if host.send is not None else []
    recv = [(host.recv, device.recv)] if host.recv is not None else []
    return send or recv, recv or send


class DeviceFlush:
    """Writes a device buffer of ``nbytes`` (twice the L2) between iterations, untimed."""

    def __init__(self, nbytes: int, buffer_kind: str = "torch"):
        if buffer_kind == "cupy":
            import cupy

            self.buffer = cupy.empty(nbytes, dtype=cupy.uint8)
        else:
            import torch

            self.buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        self.nbytes = nbytes
        self.address = address_of(self.buffer)

    #: the C loop cannot write this buffer (it is device memory): see NativeLoop.run
    host_memory = False

    def __call__(self, iteration: int = 0) -> None:
        """Fill the buffer and wait for the fill: the barrier that follows must not let the timed call start
        while the device is still writing (a device fill is asynchronous)."""
        if hasattr(self.buffer, "fill_"):
            self.buffer.fill_(iteration & 0xFF)
            import torch

            torch.cuda.synchronize()
        else:
            import cupy

            self.buffer.fill(iteration & 0xFF)
            cupy.cuda.runtime.deviceSynchronize()

    def close(self) -> None:
        """Drop the buffer and give its memory back to the driver (it may be closed after the pool's own release,
        which would otherwise leave twice the cache reserved by the caching allocator)."""
        if self.buffer is None:
            return
        kind = "torch" if hasattr(self.buffer, "fill_") else "cupy"
        self.buffer = None
        release_device_memory(kind)


@dataclass(frozen=True)
class DeviceChoice:
    """What --device/--buffer resolved to on this rank."""

    kind: str  # cpu | cuda
    buffer: str  # numpy | torch | cupy
    index: int | None
    name: str | None
    count: int
    l2_bytes: int | None
    #: the GPU's identity (its UUID), so ranks that share a physical GPU can be counted
    uuid: str | None = None
    #: the GPU was made current before MPI_Init (UCX and Open MPI pick the NICs near it at init)
    selected_before_mpi_init: bool | None = None
    bus_id: str | None = None  #: the GPU's PCI bus id (domain:bus:device.function), where the library says
    runtime: str | None = None  #: "cuda" or "rocm" (a ROCm build of torch: HIP behind torch.cuda, RCCL behind NCCL)
    cache_from: str | None = None  #: where the cache size cold and --flush evict comes from (``device_cache_bytes``)


def device_uuid(buffer_kind: str, index: int) -> str | None:
    """The GPU's UUID from its properties (None where the library does not say)."""
    try:
        if buffer_kind == "cupy":
            import cupy

            raw = cupy.cuda.runtime.getDeviceProperties(index).get("uuid")
            return raw.hex() if isinstance(raw, bytes) else (str(raw) if raw else None)
        import torch

        value = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        return str(value) if value else None
    except Exception:  # noqa: BLE001 - informative only; the count-based guess is used instead
        return None


def device_bus_id(buffer_kind: str, index: int) -> str | None:
    """The GPU's PCI bus id, "0000:3b:00.0" (None where the library does not say)."""
    try:
        if buffer_kind == "cupy":
            import cupy

            return cupy.cuda.runtime.deviceGetPCIBusId(index).lower()
        import torch

        p = torch.cuda.get_device_properties(index)
        return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - informative only
        return None


def gpu_runtime(buffer_kind: str) -> str:
    """"rocm" where torch is a ROCm build (``torch.version.hip``) or cupy runs on HIP, else "cuda"."""
    try:
        if buffer_kind == "cupy":
            import cupy

            return "rocm" if cupy.cuda.runtime.is_hip else "cuda"
        import torch

        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    except Exception:  # noqa: BLE001
        return "cuda"


def rank_gpu(host: str, local_rank: int | None, device: "DeviceChoice", env: dict | None = None) -> dict:
    """One rank's GPU as the run record lists it (``device.ranks``): host, local rank, GPU index, UUID, PCI bus
    id, and the ``NCCL_HOSTID`` this rank runs under where one is set (NCCL then takes it for the host)."""
    env = os.environ if env is None else env
    mine = {"host": host, "local_rank": local_rank, "index": device.index, "uuid": device.uuid,
            "bus_id": device.bus_id}
    if env.get("NCCL_HOSTID"):
        mine["nccl_hostid"] = env["NCCL_HOSTID"]
    return mine


def refuse_shared_gpus(gpus: list[dict], library: str = "NCCL") -> None:
    """Raise one UsageError naming the ranks that share a physical GPU (``gpus``: every rank's ``rank_gpu``).

    For NCCL or RCCL, before any communicator exists: NCCL refuses two ranks of one communicator on one GPU of one
    host ("Duplicate GPU detected", raised while the communicator is made). The host is what NCCL takes for it:
    ``NCCL_HOSTID`` where set (ranks with different host ids on one GPU are allowed: each is a host of its own),
    else the host name. The GPU is told by UUID, else by PCI bus id (an unknown GPU matches no other)."""
    identities = [(g.get("nccl_hostid") or g["host"], g.get("uuid") or (f"bus id {g['bus_id']}" if g.get("bus_id")
                                                                        else None)) for g in gpus]
    shared = shared_gpus(identities)
    if shared:
        (host, gpu), ranks = next(iter(shared.items()))
        raise UsageError(f"ranks {', '.join(map(str, ranks))} share GPU {gpu} on {host}: {library} needs one GPU "
                         f"per rank (start as many ranks per node as GPUs, or give each rank its own with "
                         f"CUDA_VISIBLE_DEVICES)")


def shared_gpus(identities: list[tuple[str, str | None]]) -> dict[tuple[str, str], list[int]]:
    """The physical GPUs (host, UUID) that more than one rank uses, with those ranks (``identities``: every
    rank's (host, UUID) in rank order; an unknown UUID matches nothing)."""
    ranks: dict[tuple[str, str], list[int]] = {}
    for rank, (host, uuid) in enumerate(identities):
        if uuid:
            ranks.setdefault((host, uuid), []).append(rank)
    return {gpu: members for gpu, members in ranks.items() if len(members) > 1}


def ranks_sharing(identities: list[tuple[str, str]], mine: tuple[str, str]) -> int:
    """How many ranks use the same physical GPU as this one: equal (host, GPU identity) pairs."""
    return max(1, sum(1 for identity in identities if identity == mine))


def ranks_on_gpu(gpus: list[dict], mine: dict) -> int:
    """How many ranks use this rank's physical GPU, from every rank's ``{"host", "uuid", "bus_id", "index"}``.

    GPUs are told apart by UUID where every rank knows its UUID, else by PCI bus id, else by index on the host
    (processes that each see one GPU all have index 0 there: the index alone cannot tell their GPUs apart)."""
    field = next((f for f in ("uuid", "bus_id") if gpus and all(g.get(f) for g in gpus)), "index")
    return ranks_sharing([(g["host"], g.get(field)) for g in gpus], (mine["host"], mine.get(field)))

"""GPUs and their NVLinks, from NVML (the ``nvidia-ml-py`` package, ``pip install -e '.[gpu]'``).

``answers()`` asks NVML what ``gpu_links`` needs and keeps its answers as plain data (the same form a recorded
host keeps in ``nvml.json``), so a machine's answers can be recorded once and read back anywhere. Per GPU:
name, PCI bus id, PCIe generation and width (current and maximum), and per NVLink: whether it is active, its
version, the PCI bus id and kind (GPU or NVSwitch) of the far end, and the speed NVML reports (MB/s).

The NVLink peak of a GPU is its active links times the data rate per link and direction of their version:
NVIDIA states NVLink 1 at 160 GB/s over 4 links (P100), 2 at 300 GB/s over 6 (V100), 3 at 600 GB/s over 12
(A100), 4 at 900 GB/s over 18 (H100, H200), 5 at 1.8 TB/s over 18 (B200), both directions together
(https://www.nvidia.com/en-us/data-center/nvlink/): 20, 25, 25, 25 and 50 GB/s per link and direction. NVML's
reported speed is the signalling rate (26.562 GB/s per NVLink-4 link in ``nvidia-smi nvlink -s``), before the
protocol's overhead; it is recorded beside the peak, never used for it.
"""

from __future__ import annotations

import json
from pathlib import Path

#: NVLink version -> GB/s per link and direction (see the module's text for the source)
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
#: PCIe generation -> GB/s per lane and direction after line encoding (as links.PCIE_GENERATIONS)
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8,
                  6: 64 * 242 / 256 / 8}


def sysfs_bus_id(bus_id: str | None) -> str | None:
    """NVML's ``00000000:18:00.0`` as sysfs names it, ``0000:18:00.0``."""
    if not bus_id:
        return None
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    return text[-12:].lower() if len(text) >= 12 else text.lower()


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def answers() -> dict:
    """NVML's answers on this host (``{"about", "gpus", "notes"}``); no GPU, no driver or no nvidia-ml-py:
    no GPUs, and a note where an NVIDIA driver is present but NVML could not be asked."""
    driver_present = Path("/proc/driver/nvidia").exists()
    try:
        import pynvml
    except ImportError:
        note = ["NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py): NVLinks not read"]
        return {"about": None, "gpus": [], "notes": note if driver_present else []}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        note = [f"NVML: {exc}: NVLinks not read"]
        return {"about": None, "gpus": [], "notes": note if driver_present else []}
    try:
        about = f"NVML, driver {_text(pynvml.nvmlSystemGetDriverVersion())}"
        gpus = [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        return {"about": about, "gpus": gpus, "notes": []}
    except pynvml.NVMLError as exc:
        return {"about": None, "gpus": [], "notes": [f"NVML: {exc}: NVLinks not read"]}
    finally:
        pynvml.nvmlShutdown()


def _ask(call, *args):
    """One NVML call; None where the device does not support it."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _gpu(nvml, index: int) -> dict:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = _ask(nvml.nvmlDeviceGetPciInfo, h)
    gpu = {"index": index, "name": _text(nvml.nvmlDeviceGetName(h)), "uuid": _text(_ask(nvml.nvmlDeviceGetUUID, h)),
           "bus_id": _text(pci.busId) if pci else None,
           "pcie": {"generation": _ask(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "width": _ask(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "max_generation": _ask(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "max_width": _ask(nvml.nvmlDeviceGetMaxPcieLinkWidth, h)},
           "nvlinks": []}
    speed = None
    fields = _ask(nvml.nvmlDeviceGetFieldValues, h, [nvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])
    if fields and getattr(fields[0], "nvmlReturn", 1) == 0:
        speed = int(fields[0].value.uiVal)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _ask(nvml.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            break
        remote = _ask(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        kind = _ask(getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", lambda *_: None), h, link)
        gpu["nvlinks"].append({"link": link, "active": state == nvml.NVML_FEATURE_ENABLED,
                               "version": _ask(nvml.nvmlDeviceGetNvLinkVersion, h, link),
                               "remote_bus_id": _text(remote.busId) if remote else None,
                               "remote": {0: "gpu", 1: "ibmnpu", 2: "switch"}.get(kind, "unknown"),
                               "speed_mbytes": speed})
    return gpu


def recorded(path: Path) -> dict:
    """A recorded host's NVML answers (``nvml.json``), or none."""
    try:
        data = json.loads(path.read_text())
    except OSError:
        return {"about": None, "gpus": [], "notes": []}
    except ValueError as exc:
        return {"about": None, "gpus": [], "notes": [f"{path}: not JSON ({exc})"]}
    return data if isinstance(data, dict) else {"about": None, "gpus": [], "notes": [f"{path}: not an object"]}


def _pcie(answer: dict | None) -> dict | None:
    """PCIe from NVML: the maximum generation at the current width (an idle GPU trains its speed down)."""
    if not isinstance(answer, dict):
        return None
    gen = answer.get("max_generation") or answer.get("generation")
    width = answer.get("width") or answer.get("max_width")
    lane = PCIE_LANE_GBPS.get(gen)
    return {"generation": gen, "width": width, "max_width": answer.get("max_width"),
            "current_generation": answer.get("generation"),
            "gbps": round(lane * width, 3) if lane and width else None}


def nvlink_summary(links: list[dict]) -> dict | None:
    """Active NVLinks of a GPU: count, version, peak per direction (GB/s), what NVML reports, and far ends."""
    active = [link for link in links if isinstance(link, dict) and link.get("active")]
    if not active:
        return None
    versions = sorted({link.get("version") for link in active if isinstance(link.get("version"), int)})
    version = versions[0] if versions else None
    per_link = NVLINK_GBPS_PER_LINK.get(version)
    peers: dict[str, int] = {}
    for link in active:
        far = "switch" if link.get("remote") == "switch" else sysfs_bus_id(link.get("remote_bus_id")) or "unknown"
        peers[far] = peers.get(far, 0) + 1
    speeds = [link["speed_mbytes"] for link in active if isinstance(link.get("speed_mbytes"), (int, float))]
    return {"active_links": len(active), "version": version, "gbps_per_link": per_link,
            "gbps": per_link * len(active) if per_link else None,
            "nvml_gbps_per_link": round(min(speeds) / 1000, 3) if speeds else None, "peers": peers}


def gpu_links(answers_: dict) -> list[dict]:
    """Every GPU of NVML's answers with its PCIe link and NVLink summary."""
    out = []
    for gpu in answers_.get("gpus") or []:
        if not isinstance(gpu, dict):
            continue
        out.append({"index": gpu.get("index"), "name": gpu.get("name"), "bus_id": sysfs_bus_id(gpu.get("bus_id")),
                    "pcie": _pcie(gpu.get("pcie")), "nvlink": nvlink_summary(gpu.get("nvlinks") or [])})
    return out

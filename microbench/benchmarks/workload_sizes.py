"""Which microbench benchmark measures each workload collective, and the sizes a workload file asks for."""

from __future__ import annotations

import json
from pathlib import Path

from microbench.errors import UsageError

#: workload collective -> microbench benchmark. A send or recv is one one-way point-to-point message,
#: which the ``latency`` benchmark reports (half the ping-pong round trip).
BENCHMARK_FOR = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "alltoallv": "alltoallv",  # issue 42: priced on the curve of its split (workload.weighting.curve_name)
    "send": "latency",
    "recv": "latency",
}

MAPPING_RULE = ("collectives map to microbench benchmarks by name; send and recv map to latency (one one-way "
                "message: half the ping-pong round trip); an alltoallv to the alltoallv curve of its split pattern")


def _messages_of(doc, path: str) -> list:
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return doc["messages"]
    if isinstance(doc, dict) and isinstance(doc.get("sweep"), list):
        out = []
        for point in doc["sweep"]:
            if not isinstance(point, dict) or not isinstance(point.get("messages"), list):
                raise UsageError(f"{path}: a sweep point has no \"messages\" list")
            out += point["messages"]
        return out
    raise UsageError(f"{path}: not a workload file (no \"messages\" list; write one with microbench workload --json)")


def sizes_for_benchmarks(path: str) -> dict[str, list[int]]:
    """Per microbench benchmark, the sorted unique message sizes (bytes) a workload JSON file uses."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"cannot read workload file {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a JSON workload file ({exc})") from exc
    sizes: dict[str, set[int]] = {}
    for i, msg in enumerate(_messages_of(doc, path)):
        if not isinstance(msg, dict):
            raise UsageError(f"{path}: message {i} is not an object")
        collective, nbytes = msg.get("collective"), msg.get("bytes")
        if collective not in BENCHMARK_FOR:
            raise UsageError(f"{path}: message {i} has an unknown collective {collective!r}")
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise UsageError(f"{path}: message {i} has bytes {nbytes!r}, not a whole number of bytes >= 1")
        sizes.setdefault(BENCHMARK_FOR[collective], set()).add(nbytes)
    if not sizes:
        raise UsageError(f"{path}: the workload has no messages")
    return {bench: sorted(values) for bench, values in sorted(sizes.items())}

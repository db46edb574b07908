"""One iteration's calls, in order, each with its communicator kind and whether frameworks overlap it.

Built from the workload model (``microbench.workload.schemes.build``): the setup phase is left out, each
message is repeated ``count`` times (rounded half up to whole calls) in phase order. Data-parallel schemes issue
everything on the data-parallel group; Megatron-LM schemes issue send/recv on the pipeline group,
the gradient allreduces on the data-parallel group and the rest on the tensor-parallel group. Pipeline
send/recv counts are summed over the p stages in the model (Eq. 4), so one rank's share is count / p.
Within a phase the model lists calls by size, not in the framework's order (its totals are unaffected).
"""

from __future__ import annotations

from dataclasses import dataclass

from microbench.workload.distribution import DATA_PARALLEL_SCHEMES, Workload
from microbench.workload.schemes import build

#: (scheme, phase, collective) -> posted non-blocking and waited later, as the framework overlaps it.
OVERLAP_RULE = ("overlapped (posted non-blocking, waited at the end of the phase): DDP and Megatron-LM gradient "
                "allreduces (with backward), ZeRO-3's forward and backward allgathers (prefetch); all else blocking")


@dataclass(frozen=True)
class Call:
    """One collective call of one rank: ``bytes`` as ``Message.bytes``, on the group of kind ``group``."""

    collective: str
    bytes: int
    group: str
    phase: str
    overlapped: bool


def _group(workload: Workload, collective: str, phase: str) -> str:
    if workload.scheme in DATA_PARALLEL_SCHEMES:
        return "dp"
    if collective in ("send", "recv"):
        return "pp"
    return "dp" if phase == "gradients" else "tp"


def _overlapped(workload: Workload, collective: str, phase: str) -> bool:
    if workload.scheme == "zero3":
        return collective == "allgather" and phase in ("forward", "backward")
    return collective == "allreduce" and phase == "gradients"


def calls(workload: Workload) -> list[Call]:
    """The calls one rank issues in one iteration, in phase order (setup excluded)."""
    out: list[Call] = []
    for m in build(workload).messages:
        if m.phase == "setup":
            continue
        count = m.count / workload.pp if m.collective in ("send", "recv") else m.count
        out += [Call(m.collective, m.bytes, _group(workload, m.collective, m.phase), m.phase,
                     _overlapped(workload, m.collective, m.phase))] * int(count + 0.5)
    return out


def largest_bytes(schedule: list[Call]) -> int:
    """The buffer one pool needs (bytes): the largest message of the schedule (0 when empty)."""
    return max((c.bytes for c in schedule), default=0)

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
from typing import Union

from microbench.errors import UsageError
from microbench.workload.distribution import DATA_PARALLEL_SCHEMES, Workload
from microbench.workload.schemes import build

#: (scheme, phase, collective) -> posted non-blocking and waited later, as the framework overlaps it.
OVERLAP_RULE = ("overlapped (posted non-blocking, waited at the end of their compute segment): DDP and Megatron-LM "
                "gradient allreduces (with backward), ZeRO-3's forward and backward allgathers (prefetch); all else "
                "blocking")

#: Compute segments: which phases' calls run during the forward compute, during the backward compute, or after it.
SEGMENT_OF_PHASE = {"forward": "forward", "embedding": "forward", "lm_head": "forward", "loss": "forward",
                    "recompute": "backward", "backward": "backward", "backward_regather": "backward",
                    "gradients": "backward", "optimizer": "optimizer", "trace": "trace"}

#: Share of an iteration's compute in each segment: backward costs twice the forward (6 = 2 + 4 FLOP per
#: parameter and token); the optimizer step and a trace's single segment carry none and all of it.
COMPUTE_SHARE = {"forward": 1 / 3, "backward": 2 / 3, "optimizer": 0.0, "trace": 1.0}

COMPUTE_RULE = ("compute per iteration = 6 x params x tokens / (t x p) FLOP at --tflops; forward segment 1/3, "
                "backward (with the gradient calls) 2/3, optimizer none; a segment's compute is split into equal "
                "slices between its calls (k calls: k + 1 slices), run by the calibrated host kernel")


#: calls that are the other side of another call: a pipeline recv is the receive side of its send's shift, so it
#: issues nothing and costs nothing of its own
RECEIVE_TWINS = frozenset({"recv"})


@dataclass(frozen=True)
class Call:
    """One collective call of one rank: ``bytes`` as ``Message.bytes``, on the group of kind ``group``."""

    collective: str
    bytes: int
    group: str
    phase: str
    overlapped: bool

    @property
    def is_twin(self) -> bool:
        """A receive twin (``RECEIVE_TWINS``): its send's shift carries it."""
        return self.collective in RECEIVE_TWINS


@dataclass(frozen=True)
class Compute:
    """A slice of compute of ``seconds`` in compute segment ``segment``."""

    seconds: float
    segment: str


Step = Union[Call, Compute]


def segment_of(phase: str) -> str:
    """The compute segment a phase's calls run in (unknown phases: their own segment)."""
    return SEGMENT_OF_PHASE.get(phase, phase)


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
    sizes = {"dp": workload.dp, "tp": workload.tp, "pp": workload.pp}
    for m in build(workload).messages:
        if m.phase == "setup":
            continue
        group = _group(workload, m.collective, m.phase)
        if m.group_size is not None and m.group_size != sizes[group]:
            raise UsageError(f"--scheme {workload.scheme}: {m.collective} of {m.bytes} B in the {m.phase} phase runs "
                             f"in groups of {m.group_size}, not on the {group} group of {sizes[group]} ranks: the "
                             "replay builds only the tp, pp and dp groups")
        count = m.count / workload.pp if m.collective in ("send", "recv") else m.count
        out += [Call(m.collective, m.bytes, group, m.phase,
                     _overlapped(workload, m.collective, m.phase))] * int(count + 0.5)
    return out


def steps(schedule: list[Call], compute_s: float = 0.0) -> list[Step]:
    """The schedule with ``compute_s`` seconds of compute placed between its calls (see ``COMPUTE_RULE``).

    Segments come in the schedule's order; a segment with a compute share but no calls is one slice.
    With ``compute_s`` 0 the steps are the calls alone."""
    segments: dict[str, list[Call]] = {}
    for call in schedule:
        segments.setdefault(segment_of(call.phase), []).append(call)
    if compute_s > 0:
        for segment in ("forward", "backward"):
            if segment not in segments and "trace" not in segments:
                segments.setdefault(segment, [])
        order = {"forward": 0, "backward": 1, "optimizer": 2}
        segments = dict(sorted(segments.items(), key=lambda kv: order.get(kv[0], 3)))
    out: list[Step] = []
    for segment, seg_calls in segments.items():
        share = compute_s * COMPUTE_SHARE.get(segment, 0.0)
        if share <= 0:
            out += seg_calls
            continue
        piece = Compute(share / (len(seg_calls) + 1), segment)
        out.append(piece)
        for call in seg_calls:
            out += [call, piece]
    return out


def from_messages(messages, world: int) -> tuple[list[Call], list[str]]:
    """A trace's messages (``workload.messages.Message``, counts per iteration) as calls on the whole job.

    Every call runs blocking on the one group of all ranks (kind ``dp``), grouped by collective and size as
    the trace readers tally them (their order is not kept); notes say which messages were recorded in groups
    of another size and what was left out."""
    out: list[Call] = []
    other: dict[int, int] = {}
    setup = p2p = 0
    for m in messages:
        if m.phase == "setup":
            setup += 1
            continue
        if m.collective in ("send", "recv"):
            p2p += int(m.count + 0.5)
            continue
        repeat = int(m.count + 0.5)
        if m.group_size not in (None, world):
            other[m.group_size] = other.get(m.group_size, 0) + repeat
        out += [Call(m.collective, m.bytes, "dp", "trace", False)] * repeat
    notes = ["a trace's calls are replayed blocking, grouped by collective and size, on one communicator of all "
             "ranks (the tallied trace keeps no call order, overlap or group membership)"]
    if p2p:
        notes.append(f"{p2p} send/recv call(s) per iteration left out (a tallied trace does not name the peer)")
    if other:
        notes.append("calls recorded in groups of another size, replayed on all " f"{world} ranks: "
                     + ", ".join(f"{n} call(s) of group size {g}" for g, n in sorted(other.items())))
    if setup:
        notes.append(f"{setup} setup message(s) left out (once per training run, not per iteration)")
    return out, notes

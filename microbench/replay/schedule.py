"""One iteration's calls, in order, each with its communicator kind and whether frameworks overlap it.

Built from the workload model (``microbench.workload.schemes.build``): the setup phase is left out, each
message is repeated ``count`` times (rounded half up to whole calls) in phase order. Data-parallel schemes issue
everything on the data-parallel group; Megatron-LM schemes issue send/recv on the pipeline group,
the gradient allreduces on the data-parallel group and the rest on the tensor-parallel group; the Megatron-Core
schemes (moe, cp) name each message's group (its ``dimension``: tp, cp, ep, etp, tp_ep, dp, dp_cp, edp, pp).
Pipeline send/recv counts are summed over the p stages in the model (Eq. 4), so one rank's share is count / p;
a context-parallel ring's send/recv are per rank already. An all-to-all-v carries its split pattern.
Within a phase the model lists calls by size, not in the framework's order (its totals are unaffected).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from microbench.benchmarks.splits import SplitPattern
from microbench.benchmarks.splits import parse as parse_split
from microbench.errors import UsageError
from microbench.replay.layout import Layout
from microbench.workload.distribution import DATA_PARALLEL_SCHEMES, Workload
from microbench.workload.moe import transposed
from microbench.workload.schemes import build

#: (scheme, phase, collective) -> posted non-blocking and waited later, as the framework overlaps it.
OVERLAP_RULE = ("overlapped (posted non-blocking, waited at the end of their compute segment): DDP, Megatron-LM and "
                "Megatron-Core gradient allreduces (with backward; the experts' too), ZeRO-3's and FSDP2's forward "
                "and backward allgathers (prefetch); all else blocking (a context-parallel ring's send/recv too, "
                "which TransformerEngine overlaps with the previous step's attention)")

#: Compute segments: which phases' calls run during the forward compute, during the backward compute, or after it.
SEGMENT_OF_PHASE = {"forward": "forward", "embedding": "forward", "lm_head": "forward", "loss": "forward",
                    "recompute": "backward", "backward": "backward", "backward_regather": "backward",
                    "gradients": "backward", "expert_gradients": "backward", "optimizer": "optimizer",
                    "trace": "trace"}

#: Share of an iteration's compute in each segment: backward costs twice the forward (6 = 2 + 4 FLOP per
#: parameter and token); the optimizer step and a trace's single segment carry none and all of it.
COMPUTE_SHARE = {"forward": 1 / 3, "backward": 2 / 3, "optimizer": 0.0, "trace": 1.0}

COMPUTE_RULE = ("compute per iteration = 6 x params x tokens / (t x p x cp) FLOP at --tflops (a mixture of experts: "
                "its active parameters); forward segment 1/3, "
                "backward (with the gradient calls) 2/3, optimizer none; a segment's compute is split into equal "
                "slices between its calls (k calls: k + 1 slices), run by the calibrated host kernel")


#: calls that are the other side of another call: a pipeline recv is the receive side of its send's shift, so it
#: issues nothing and costs nothing of its own
RECEIVE_TWINS = frozenset({"recv"})


@dataclass(frozen=True)
class Call:
    """One collective call of one rank: ``bytes`` as ``Message.bytes``, on the group of kind ``group``; an
    all-to-all-v's ``splits`` (issue 42)."""

    collective: str
    bytes: int
    group: str
    phase: str
    overlapped: bool
    splits: SplitPattern | None = None

    @property
    def is_twin(self) -> bool:
        """A receive twin (``RECEIVE_TWINS``): its send's shift carries it."""
        return self.collective in RECEIVE_TWINS

    @property
    def key(self) -> tuple:
        """What tells distinct calls apart in the figures: (collective, group, bytes, split pattern or "")."""
        return (self.collective, self.group, self.bytes, self.splits.text if self.splits else "")


@dataclass(frozen=True)
class Compute:
    """A slice of compute of ``seconds`` in compute segment ``segment``."""

    seconds: float
    segment: str


Step = Union[Call, Compute]


def segment_of(phase: str) -> str:
    """The compute segment a phase's calls run in (unknown phases: their own segment)."""
    return SEGMENT_OF_PHASE.get(phase, phase)


def _group(workload: Workload, message) -> str:
    if message.dimension is not None:
        return message.dimension
    if workload.scheme in DATA_PARALLEL_SCHEMES:
        return "dp"
    if message.collective in ("send", "recv"):
        return "pp"
    return "dp" if message.phase == "gradients" else "tp"


def _overlapped(workload: Workload, collective: str, phase: str) -> bool:
    if workload.scheme in ("zero3", "fsdp2"):  # prefetched parameter gathers
        return collective == "allgather" and phase in ("forward", "backward")
    return collective == "allreduce" and phase in ("gradients", "expert_gradients")


def layout_of(workload: Workload) -> Layout:
    """The layout a workload runs on (Megatron-Core's order with its cp, ep and etp)."""
    experts = bool(workload.model.experts) and workload.scheme in ("moe", "cp")
    return Layout(workload.tp, workload.pp, workload.dp, workload.cp, workload.ep,
                  workload.expert_tp if experts else 1, experts)


def _patterns(workload: Workload) -> dict[str, SplitPattern]:
    """The split patterns a workload's all-to-all-v name, by their text: its routing and the transpose."""
    routing = workload.routing
    flipped = SplitPattern(routing.kind, routing.parameter, routing.rows, routing.name, not routing.transposed)
    assert flipped.text == transposed(routing.text)
    return {routing.text: routing, flipped.text: flipped}


def calls(workload: Workload) -> list[Call]:
    """The calls one rank issues in one iteration, in phase order (setup excluded)."""
    out: list[Call] = []
    layout = layout_of(workload)
    patterns = _patterns(workload)
    for m in build(workload).messages:
        if m.phase == "setup":
            continue
        group = _group(workload, m)
        pipeline = group == "pp" and m.collective in ("send", "recv")
        if group not in layout.kinds:
            raise UsageError(f"--scheme {workload.scheme}: {m.collective} of {m.bytes} B in the {m.phase} phase runs "
                             f"on the {group} group, which this layout does not build")
        # a pipeline send/recv pairs two stages (group size 2) of the pp group, whatever its size
        if m.group_size is not None and not pipeline and m.group_size != layout.size(group):
            raise UsageError(f"--scheme {workload.scheme}: {m.collective} of {m.bytes} B in the {m.phase} phase runs "
                             f"in groups of {m.group_size}, not on the {group} group of {layout.size(group)} ranks")
        count = m.count / workload.pp if pipeline else m.count
        out += [Call(m.collective, m.bytes, group, m.phase, _overlapped(workload, m.collective, m.phase),
                     patterns[m.splits] if m.splits else None)] * int(count + 0.5)
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
        split = parse_split(m.splits) if m.splits else None  # a traced all-to-all-v's pattern
        out += [Call(m.collective, m.bytes, "dp", "trace", False, split)] * repeat
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

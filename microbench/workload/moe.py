"""Mixture-of-experts layers as Megatron-Core's all-to-all token dispatcher runs them (issue 42).

Per MoE layer and microbatch, on one rank of the expert-parallel group (megatron/core/transformer/moe/
token_dispatcher.py, MoEAlltoAllTokenDispatcher; the same pattern as DeepSpeed-MoE, Rajbhandari et al. 2022):

- dropless (the default): the tokens-per-expert counts are all-gathered over the tp x ep group (``preprocess``:
  E int64 per rank), then the routed tokens go out in one all-to-all-v (``token_permutation``: each of the rank's
  T tokens once per chosen expert, k x T x h elements, split over the ep ranks by where the router sends them) and
  come back in a second (``token_unpermutation``, the combine: the transpose of the dispatch's split);
- with a capacity factor (drop and pad, ``moe_pad_expert_input_to_capacity``): every rank sends each expert
  exactly its capacity C = ceil(T k / E x factor) tokens (``moe_utils.get_capacity``), so both all-to-alls are
  uniform (blocks of E/ep x C x h) and no counts are exchanged;
- with expert tensor parallelism (etp > 1) the received tokens are all-gathered over the etp group before the
  experts and reduce-scattered after them (``gather_from_sequence_parallel_region`` / ``reduce_scatter_to_
  sequence_parallel_region`` on the expert tensor group);
- in backward each all-to-all runs again in the other direction (the dispatch's gradient goes back as a combine,
  the combine's as a dispatch), and the etp gather and scatter swap.

The split: ``Workload.routing`` (a ``benchmarks.splits`` pattern over the ep ranks; a file's histogram over the E
experts is folded onto ranks, E/ep consecutive experts each) scaled to the k T tokens each rank routes, in whole
tokens. T = b s / (cp tp): the rank's tokens after context and sequence parallelism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from microbench.workload.architectures import is_expert
from microbench.workload.distribution import Departure, Workload
from microbench.workload.messages import Message

COUNT_BYTES = 8  #: the tokens-per-expert counts are int64 (routing_map.sum(dim=0).long())

MOE_RULES = [
    "MoE (Megatron-Core 0.16 MoEAlltoAllTokenDispatcher): per MoE layer and microbatch, dropless: an allgather of "
    "the E int64 tokens-per-expert counts over the tp x ep group (preprocess), then the dispatch all-to-all-v of "
    "the k T routed tokens (T = b s/(cp tp) per rank) and a second of their k T routing probabilities, split over "
    "the ep ranks as --routing says, and the combine all-to-all-v of the tokens back (the transposed split); "
    "with --capacity-factor F (drop and pad) every rank sends each expert C = ceil(k T / E x F) tokens "
    "(moe_utils.get_capacity; uniform all-to-alls, no counts); with an expert tensor-parallel size etp > 1 the "
    "received tokens and probabilities are all-gathered over the expert tensor group before the experts and the "
    "output reduce-scattered after them; backward runs each all-to-all again in the other direction and swaps "
    "the gathers and scatters",
    "all-to-all-v sizes are what the busiest rank sends in all (the dispatch: every rank's k T tokens; the "
    "combine: the busiest expert rank's receive); a message's wire is what a rank sends to other ranks, the mean "
    "over the group, from the split in whole tokens",
    "experts: E/ep routed experts per rank, each split etp ways; their gradients are allreduced over the "
    "expert-data-parallel group (tp x cp x dp / (etp x ep) ranks) in Megatron-Core DDP's buckets, the dense "
    "parameters' over the data-parallel group with context parallelism (dp x cp ranks); the router and shared "
    "experts are dense parameters",
]


@dataclass(frozen=True)
class MoeLayer:
    """What one MoE layer of one microbatch sends, from one rank: tokens and bytes per call."""

    tokens: int  #: T, the rank's tokens entering the layer
    routed: int  #: k T, the token copies the rank routes (dispatch)
    dispatch: int  #: tokens the busiest rank dispatches (k T; drop and pad: the block to each peer)
    combine: int  #: tokens the busiest expert rank sends back (drop and pad: the block to each peer)
    off_rank: Fraction  #: tokens a rank sends to other ranks per all-to-all, the mean over the ep group
    capacity: int | None  #: tokens per expert with drop and pad, else None


def tokens_per_rank(w: Workload) -> int:
    """T: the tokens of one microbatch on one rank after context and sequence parallelism."""
    return w.micro_batch * w.model.seq // (w.cp * w.tp)


def layer(w: Workload) -> MoeLayer:
    """One MoE layer's all-to-all sizes (in tokens) for the workload's routing (or capacity)."""
    m, ep = w.model, w.ep
    tokens = tokens_per_rank(w)
    routed = m.top_k * tokens
    if w.capacity_factor is not None:
        capacity = math.ceil(routed / m.experts * w.capacity_factor)
        block = m.experts // ep * capacity  # tokens to each ep peer
        return MoeLayer(tokens, routed, block, block, Fraction(block * (ep - 1)), capacity)
    split = w.routing.matrix(routed, ep)  # tokens rank i routes to rank j
    return MoeLayer(tokens, routed, int(split.sum(axis=1).max()), int(split.sum(axis=0).max()),
                    Fraction(int(split.sum()) - int(split.trace()), ep), None)


def transposed(text: str) -> str:
    """The split pattern of a combine: its dispatch's pattern transposed (``benchmarks.splits``)."""
    return text[:-2] if text.endswith("/T") else text + "/T"


def _forward_phases(w: Workload) -> tuple[str, ...]:
    """The phases that run the forward: forward, and recompute when the forward runs again in backward."""
    return ("forward", "recompute") if w.full_recompute else ("forward",)


def _all_to_all(w: Workload, one: MoeLayer, tokens: int, per_token: int, outward: bool, count: int,
                phase: str) -> Message:
    """One all-to-all(v) of ``tokens`` (the busiest sender's; drop and pad: to each peer) of ``per_token`` bytes,
    outward (the dispatch's direction: the routing's split) or back (the transposed split)."""
    if w.capacity_factor is not None:
        return Message("alltoall", tokens * per_token, count, w.ep, phase, dimension="ep")
    split = w.routing.text if outward else transposed(w.routing.text)
    return Message("alltoallv", tokens * per_token, count, w.ep, phase, split, one.off_rank * per_token, "ep")


def messages(w: Workload, moe_layers: int) -> list[Message]:
    """The MoE calls of one rank for ``moe_layers`` MoE layers on its stage, every microbatch (Megatron-Core 0.16
    MoEAlltoAllTokenDispatcher: the tokens and their routing probabilities travel in separate all-to-alls)."""
    if not moe_layers:
        return []
    one, n = layer(w), moe_layers * w.microbatches
    ep, etp, e = w.ep, w.expert_tp, w.element_bytes
    token, prob = w.model.hidden * e, e  # bytes of a token's activations; of its routing probability
    out: list[Message] = []
    received = (one.routed if one.capacity is None else w.model.experts * one.capacity)  # tokens, the mean
    for phase in (*_forward_phases(w), "backward"):
        forward = phase != "backward"
        if forward and one.capacity is None and ep * etp > 1:  # preprocess: the tokens-per-expert counts
            out.append(Message("allgather", w.model.experts * COUNT_BYTES, n, ep * etp, phase,
                               dimension="ep" if etp == 1 else "tp_ep"))
        if ep > 1:  # forward: dispatch tokens and probabilities, combine; backward: their gradients
            out += [_all_to_all(w, one, one.dispatch, token, True, n, phase),
                    _all_to_all(w, one, one.combine, token, False, n, phase),
                    _all_to_all(w, one, one.dispatch if forward else one.combine, prob, forward, n, phase)]
        if etp > 1:  # gather the received tokens and probabilities; scatter the experts' output (backward: swapped)
            gather, scatter = ("allgather", "reduce_scatter") if forward else ("reduce_scatter", "allgather")
            out += [Message(gather, received * token * (etp if gather == "reduce_scatter" else 1), n, etp, phase,
                            dimension="etp"),
                    Message(gather, received * prob * (etp if gather == "reduce_scatter" else 1), n, etp, phase,
                            dimension="etp"),
                    Message(scatter, received * token * (etp if scatter == "reduce_scatter" else 1), n, etp, phase,
                            dimension="etp")]
    return out


def equation_bytes(w: Workload, moe_layers: int) -> Fraction:
    """Eq. MoE: per MoE layer and microbatch 2 all-to-alls of k T tokens of h elements in each forward (again with
    full recomputation) and 2 in backward, (ep-1)/ep of each leaving the rank, plus with etp > 1 an allgather and
    a reduce_scatter of the k T received tokens each time, (etp-1) x k T h each."""
    runs = len(_forward_phases(w)) + 1
    routed = w.model.top_k * tokens_per_rank(w) * w.model.hidden * w.element_bytes
    return moe_layers * w.microbatches * runs * (2 * Fraction(routed * (w.ep - 1), w.ep)
                                                 + 2 * routed * (w.expert_tp - 1))


def departures(w: Workload, moe_layers: int) -> list[Departure]:
    """Where the MoE calls differ from Eq. MoE: the counts' allgather, the probabilities' all-to-alls, whole
    tokens or padding to capacity."""
    if not moe_layers:
        return []
    one, n = layer(w), moe_layers * w.microbatches
    ep, etp, e, h = w.ep, w.expert_tp, w.element_bytes, w.model.hidden
    forwards = len(_forward_phases(w))
    ideal = Fraction(one.routed * (ep - 1), ep)  # tokens leaving a rank per all-to-all, in fractional tokens
    received = one.routed if one.capacity is None else w.model.experts * one.capacity
    out = []
    if one.capacity is None and ep * etp > 1:
        out.append(Departure(f"dropless routing all-gathers the {w.model.experts} int64 tokens-per-expert counts "
                             f"over the {ep * etp} tp x ep ranks before each dispatch",
                             n * forwards * Fraction(w.model.experts * COUNT_BYTES * (ep * etp - 1))))
    if ep > 1:
        out.append(Departure("the routing probabilities (one value per routed token, in the training dtype) travel "
                             "in an all-to-all of their own in each dispatch and its gradient",
                             n * (forwards + 1) * one.off_rank * e))
    if etp > 1:
        out.append(Departure("the expert tensor group gathers the routing probabilities with the tokens (and "
                             "scatters their gradients)", n * (forwards + 1) * received * e * (etp - 1)))
    if ep > 1 and one.off_rank != ideal:
        why = (f"each expert is padded to its capacity of {one.capacity} tokens ({w.model.experts} x "
               f"{one.capacity} slots for {one.routed} routed tokens)" if one.capacity is not None else
               f"the {w.routing.text} split of {one.routed} routed tokens is in whole tokens")
        out.append(Departure(why, 2 * n * (forwards + 1) * (one.off_rank - ideal) * h * e))
    if etp > 1 and one.capacity is not None:
        out.append(Departure("the expert tensor group gathers and scatters the padded capacity",
                             2 * n * (forwards + 1) * (received - one.routed) * h * e * (etp - 1)))
    return out


def expert_shard(tensors, w: Workload) -> list[int]:
    """Elements of the routed-expert tensors one rank holds: E/ep experts of each layer, split etp ways."""
    per_rank = w.model.experts // w.ep
    keep = []
    for t in tensors:
        if is_expert(t.name) and int(t.name.split(".moe.expert")[1].split(".")[0]) < per_rank:
            keep.append(t.numel // w.expert_tp)
    return keep

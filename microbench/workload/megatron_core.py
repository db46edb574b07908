"""Megatron-Core's 5D layouts: tensor (with sequence parallelism), context, expert, data and pipeline parallelism
(schemes ``moe`` and ``cp``, issue 42).

One rank of the first pipeline stage (its layers: the first L/p), per iteration of ``microbatches`` microbatches:

- tensor parallelism as Megatron-LM's sequence parallelism (Megatron-Core requires it with MoE), on b s/cp tokens:
  two communicating blocks per dense layer (attention, MLP), one per MoE layer (attention; the routed experts
  work on the rank's own tokens) and one more with shared experts (a tensor-parallel MLP);
- context parallelism (``context_parallel.py``) in every attention layer;
- the MoE layers' dispatch and combine (``moe.py``);
- pipeline send/recv of b s/cp tokens (Eq. 4 on s/cp), summed over the stages;
- gradients: the dense parameters' allreduce over dp x cp ranks and the experts' over the expert-data-parallel
  group, each in Megatron-Core DDP buckets of max(4e7, 1e6 dp) elements (``megatron_bucket_elements``); with the
  distributed optimizer a reduce_scatter per padded bucket and an allgather of each shard after the step (how
  Megatron-Core shards expert weights: over the expert-data-parallel group); the start-of-training broadcast of
  each parameter over the same groups.

Every message names its dimension (tp, cp, ep, etp, dp, edp, pp): the replay runs it on that group.
"""

from __future__ import annotations

import math
from fractions import Fraction

from microbench.workload import context_parallel, moe
from microbench.workload.architectures import is_expert, is_moe_layer
from microbench.workload.buckets import close_when_reached
from microbench.workload.distribution import Departure, Distribution, Workload, ceil_div, per_parameter_broadcasts
from microbench.workload.messages import Message
from microbench.workload.model import eq2_data_parallel, eq4_pipeline, parameter_tensors
from microbench.workload.model_parallel import _pipeline, _tensor_parallel, megatron_bucket_elements


def _blocks(w: Workload, layers: int) -> tuple[int, int]:
    """(tensor-parallel blocks, MoE layers) among the first stage's ``layers`` layers."""
    m = w.model
    moe_layers = sum(1 for i in range(layers) if is_moe_layer(m, i))
    return 2 * (layers - moe_layers) + moe_layers * (1 + (1 if m.shared_experts else 0)), moe_layers


def _buckets(sizes: list[int], group: int, e: int, phase: str, dimension: str, bucket: int) -> list[Message]:
    """Gradient buckets of ``sizes`` (elements, in the order gradients become ready), one allreduce each."""
    return [Message("allreduce", sum(sizes[i] for i in b) * e, 1, group, phase, dimension=dimension)
            for b in close_when_reached(sizes, [bucket])]


def sharded_buckets(sizes: list[int], group: int, bucket: int) -> list[int]:
    """Megatron-Core's buckets with the distributed optimizer (param_and_grad_buffer.py): tensors in the order
    gradients become ready, each starting on a multiple of 64 elements, a bucket closing once it holds ``bucket``
    elements and padded to a multiple of lcm(group, 128) so that it shards evenly; the buckets' padded elements."""
    divisor = math.lcm(group, 128)
    out, start, bucket_start, holding = [], 0, 0, False
    for n in sizes:
        start = ceil_div(start, 64) * 64
        end = start + n
        holding = True
        if end - bucket_start >= bucket:
            padded_end = ceil_div(end, divisor) * divisor
            out.append(padded_end - bucket_start)
            bucket_start = start = padded_end
            holding = False
        else:
            start = end
    if holding:
        padded_end = ceil_div(end, divisor) * divisor
        out.append(padded_end - bucket_start)
    return out


def _sharded(sizes: list[int], group: int, e: int, phase: str, dimension: str, bucket: int,
             what: str) -> tuple[list[Message], Departure | None]:
    """The distributed optimizer's calls for one buffer: per bucket a reduce_scatter of its gradients and, after the
    step, an allgather of each rank's shard of the updated parameters; the padding as a departure from Eq. 2."""
    buckets = sharded_buckets(sizes, group, bucket)
    messages = [Message("reduce_scatter", n * e, 1, group, phase, dimension=dimension) for n in buckets]
    messages += [Message("allgather", n // group * e, 1, group, "optimizer", dimension=dimension) for n in buckets]
    pad = sum(buckets) - sum(sizes)
    why = (f"the distributed optimizer pads {what}: each tensor to start on 64 elements, each bucket to a multiple "
           f"of lcm({group}, 128)")
    return messages, Departure(why, 2 * Fraction(pad * e * (group - 1), group)) if pad else None


def _setup(sizes: list[int], e: int, group: int, dimension: str) -> list[Message]:
    return [Message(m.collective, m.bytes, m.count, m.group_size, m.phase, dimension=dimension)
            for m in per_parameter_broadcasts(sizes, e, group)]


def build(w: Workload) -> Distribution:
    """moe and cp: every dimension's calls of one rank of the first stage (see the module)."""
    t, p, d, c, e = w.tp, w.pp, w.dp, w.cp, w.element_bytes
    b, s, h = w.micro_batch, w.model.seq, w.model.hidden
    layers = w.model.layers // p
    blocks, moe_layers = _blocks(w, layers)
    messages: list[Message] = []
    volume, terms, assumptions, departures = Fraction(0), [], [], []
    if t > 1:
        messages += _tensor_parallel(w, layers, True, blocks, s // c, w.full_recompute, "tp")
        runs = 3 if w.full_recompute else 2
        volume += Fraction((2 * blocks * runs + 2) * b * (s // c) * h * e * w.microbatches * (t - 1), t)
        terms.append("Eq. 5 (tensor, sequence-parallel) on b s/cp tokens and the stage's blocks")
        assumptions.append(
            f"tensor parallelism with sequence parallelism on b*s/cp tokens: {blocks} communicating blocks on the "
            "stage (2 per dense layer, 1 per MoE layer for its attention, 1 more with shared experts), each an "
            "allgather of b*s*h/(cp*t) and a reduce_scatter of b*s*h/cp in forward, "
            + ("again in recompute (full activation recomputation), " if w.full_recompute else "")
            + "and their conjugates in backward; the embedding's pair stands for Eq. 5's +2; lm_head, loss and "
            "backward_regather as the sp scheme lists them, outside the equation")
    if p > 1:
        messages += _pipeline(w, s // c, "pp")
        volume += eq4_pipeline(w.model, b, p, w.microbatches) * e / c
        terms.append("Eq. 4 on s/cp")
        assumptions.append("pipeline: one send and one recv of b*s*h/cp per microbatch at each of the p-1 stage "
                           "boundaries in forward and in backward, summed over the stages")
    if c > 1:
        messages += context_parallel.messages(w, layers)
        volume += context_parallel.equation_bytes(w, layers)
        terms.append(f"Eq. CP ({w.cp_comm})")
        assumptions.append(context_parallel.CP_RULES[w.cp_comm])
    if moe_layers and w.ep * w.expert_tp > 1:
        messages += moe.messages(w, moe_layers)
        volume += moe.equation_bytes(w, moe_layers)
        departures += moe.departures(w, moe_layers)
        terms.append("Eq. MoE")
        assumptions += moe.MOE_RULES
        assumptions.append(f"routing: {w.routing.text} over the {w.ep} expert-parallel ranks"
                           + (f" (capacity factor {w.capacity_factor:g}: drop and pad)"
                              if w.capacity_factor is not None else " (dropless)"))
    gradient_terms, gradient_messages, gradient_volume, gradient_departures = _gradients(w, layers)
    messages += gradient_messages
    volume += gradient_volume
    terms += gradient_terms
    departures += gradient_departures
    if w.microbatches > 1:
        assumptions.append(f"{w.microbatches} microbatches per iteration multiply the tensor, context, expert and "
                           "pipeline messages; gradients are reduced once per iteration")
    assumptions.append(
        "gradients: Megatron-Core DDP (overlap_grad_reduce) reduces the dense parameters of one first-stage rank over "
        f"the dp x cp group ({d * c} ranks) and its routed experts' over the expert-data-parallel group "
        f"({w.expert_dp} ranks), in buckets of max(4e7, 1e6 x dp) elements filled in reverse parameter order: "
        + ("with the distributed optimizer (--distributed-optimizer, ZeRO-1-like: each rank owns a shard of every "
           "bucket over its group) one reduce_scatter per bucket, and one allgather per bucket of the updated "
           "parameters after the step (phase optimizer; Megatron-Core may overlap it with the next forward)"
           if w.distributed_optimizer else "one allreduce per bucket")
        + "; setup: every parameter broadcast over the same groups at start")
    equation = " + ".join(terms) or "none (one rank, nothing to communicate)"
    return Distribution(w, equation, volume / e, volume, messages,
                        ("setup", "lm_head", "loss", "backward_regather"), departures, assumptions)


def _gradients(w: Workload, layers: int) -> tuple[list[str], list[Message], Fraction, list[Departure]]:
    """The dense and expert gradient buckets and setup broadcasts, their terms, volume (bytes) and departures."""
    t, p, d, c, e = w.tp, w.pp, w.dp, w.cp, w.element_bytes
    tensors = parameter_tensors(w.model, t, layers, first_stage=True, last_stage=(p == 1))
    dense = [x.numel for x in tensors if not is_expert(x.name)]
    experts = moe.expert_shard(tensors, w)
    bucket = megatron_bucket_elements(d)  # max(4e7, 1e6 x the dp group's size, context parallelism not counted)
    terms, messages, volume, departures = [], [], Fraction(0), []
    for sizes, size, group, phase, what in ((dense, d * c, "dp_cp" if c > 1 else "dp", "gradients", "the dense buffer"),
                                            (experts, w.expert_dp, "edp", "expert_gradients", "the experts' buffer")):
        if not sizes or size < 2:
            continue
        if w.distributed_optimizer:
            sharded, departure = _sharded(sizes[::-1], size, e, phase, group, bucket, what)
            messages += sharded
            departures += [departure] if departure else []
        else:
            messages += _buckets(sizes[::-1], size, e, phase, group, bucket)
        messages += _setup(sizes, e, size, group)
        volume += eq2_data_parallel(sum(sizes), size) * e
        terms.append("Eq. 2 on one rank's " + ("dense parameters over dp x cp" if phase == "gradients" else
                                               "experts over the expert-data-parallel group"))
    return terms, messages, volume, departures

"""Megatron-LM tensor, sequence and pipeline parallelism: how Eq. 4 and Eq. 5 are cut into calls.

Activations of one microbatch are b*s*h elements (A below). Tensor-parallel messages are per rank of
the tensor-parallel group; pipeline messages are summed over all stages (as Eq. 4); with --dp > 1
the data-parallel gradient allreduce of one rank's parameters is added (Eq. 2 applied to them).
"""

from __future__ import annotations

from microbench.workload.buckets import close_when_reached
from microbench.workload.distribution import Distribution, Workload, per_parameter_broadcasts
from microbench.workload.messages import Message
from microbench.workload.model import eq2_data_parallel, eq4_pipeline, eq5_tensor, parameter_tensors

LOSS_BYTES = 4  # the vocabulary-parallel cross entropy reduces fp32 values


def megatron_bucket_elements(dp: int) -> int:
    """Megatron-LM DDP's default bucket size with overlap_grad_reduce: max(4e7, 1e6 * dp) elements."""
    return max(40_000_000, 1_000_000 * dp)


def _tensor_parallel(w: Workload, layers: int, sequence_parallel: bool, blocks: int | None = None,
                     seq: int | None = None, recompute: bool = True, dimension: str | None = None) -> list[Message]:
    """Megatron-LM's tensor-parallel calls of one rank: ``blocks`` communicating blocks per microbatch on this
    stage (default two per layer: attention and MLP), activations of ``seq`` tokens (default s; s/cp with context
    parallelism), the forward run again in backward when ``recompute``; ``dimension`` labels each message."""
    t, m, e = w.tp, w.microbatches, w.element_bytes
    b, s, h = w.micro_batch, w.model.seq if seq is None else seq, w.model.hidden
    full = b * s * h * e            # an activation of the microbatch
    shard = full // t               # its sequence shard (sequence parallelism)
    per_layer = (2 * layers if blocks is None else blocks) * m  # communicating blocks of the stage
    phases = ("forward", "backward", "recompute") if recompute else ("forward", "backward")

    def msg(collective: str, size: int, count: int, phase: str) -> Message:
        return Message(collective, size, count, t, phase, dimension=dimension)

    loss = [msg("allreduce", b * s * LOSS_BYTES, 3 * m, "loss")]
    if not sequence_parallel:
        return loss + [msg("allreduce", full, per_layer, phase) for phase in phases] + [
            msg("allreduce", full, m, "embedding"),
            msg("allreduce", full, m, "lm_head"),
        ]
    out = loss
    for phase in phases:
        out += [msg("allgather", shard, per_layer, phase), msg("reduce_scatter", full, per_layer, phase)]
    return out + [
        msg("reduce_scatter", full, m, "embedding"), msg("allgather", shard, m, "embedding"),
        msg("allgather", shard, m, "lm_head"), msg("reduce_scatter", full, m, "lm_head"),
        msg("allgather", shard, per_layer + m, "backward_regather"),
    ]


def _pipeline(w: Workload, seq: int | None = None, dimension: str | None = None) -> list[Message]:
    count = (w.pp - 1) * w.microbatches
    size = w.micro_batch * (w.model.seq if seq is None else seq) * w.model.hidden * w.element_bytes
    return [Message(c, size, count, 2, phase, dimension=dimension)
            for phase in ("forward", "backward") for c in ("send", "recv")]


def megatron(w: Workload) -> Distribution:
    """tp, sp, pp and 3d as Megatron-LM runs them, plus data parallelism when --dp > 1."""
    t, p, d, e = w.tp, w.pp, w.dp, w.element_bytes
    layers = w.model.layers // p
    messages: list[Message] = []
    elements = 0
    terms = []
    assumptions = []
    if t > 1:
        sp = w.scheme == "sp"
        messages += _tensor_parallel(w, layers, sp)
        elements += eq5_tensor(w.model, w.micro_batch, t, layers, w.microbatches)
        terms.append("Eq. 5 with L/p layers" if p > 1 else "Eq. 5")
        assumptions.append(
            "Megatron-LM tensor parallelism, per microbatch and layer: 2 allreduces of b*s*h in forward (after "
            "attention and after the MLP), 2 in backward (the input gradients of the column-parallel layers), 2 "
            "again when full activation recomputation reruns the forward; the vocabulary-parallel embedding "
            "adds one allreduce of b*s*h in forward (Eq. 5's +2)")
        if sp:
            assumptions.append(
                "sequence parallelism replaces each of those allreduces by a reduce_scatter of b*s*h and an "
                "allgather of b*s*h/t (same wire volume, Korthikanti et al.): forward allgather before and "
                "reduce_scatter after each block, their conjugates in backward; the embedding's reduce_scatter "
                "in forward and its conjugate allgather in backward stand for Eq. 5's +2")
        assumptions.append(
            "outside Eq. 5, listed as phases of their own: lm_head (the output layer's input-gradient "
            + ("reduce_scatter, and its forward allgather" if sp else "allreduce in backward")
            + "), loss (3 allreduces of b*s fp32 values in the vocabulary-parallel cross entropy)"
            + (", backward_regather (sequence-parallel column-parallel layers gather their input again in "
               "backward to compute weight gradients: 2 per layer and the output layer)" if sp else ""))
    if p > 1:
        messages += _pipeline(w)
        elements += eq4_pipeline(w.model, w.micro_batch, p, w.microbatches)
        terms.append("Eq. 4")
        assumptions.append(
            "pipeline: per microbatch one send and one recv of b*s*h at each of the p-1 stage boundaries in "
            "forward (activations) and in backward (their gradients); the full b*s*h is sent (no scatter-gather "
            "across the tensor-parallel ranks); counts are summed over the stages")
    if d > 1:
        shard = parameter_tensors(w.model, t, layers, first_stage=True, last_stage=(p == 1))
        ready = [x.numel for x in reversed(shard)]
        buckets = close_when_reached(ready, [megatron_bucket_elements(d)])
        messages += [Message("allreduce", sum(ready[i] for i in b) * e, 1, d, "gradients") for b in buckets]
        messages += per_parameter_broadcasts([x.numel for x in shard], e, d)
        elements += eq2_data_parallel(sum(ready), d)
        terms.append("Eq. 2 on one rank's parameters")
        assumptions += [
            "data parallelism: the gradients of the first pipeline stage's tensor-parallel rank (it holds the "
            "embeddings; matrices and vocabulary split t ways, vectors replicated) are allreduced over d ranks "
            "in Megatron-LM DDP buckets with overlap_grad_reduce: max(4e7, 1e6*d) elements, filled in reverse "
            "parameter order, a bucket closing once it reaches that size (alignment padding ignored)",
            "setup: Megatron-LM broadcasts every parameter from the first data-parallel rank at start",
        ]
    if w.microbatches > 1:
        assumptions.append(f"{w.microbatches} pipeline microbatches per iteration multiply the tensor and "
                           "pipeline messages; gradients are reduced once per iteration")
    excluded = ("setup", "lm_head", "loss", "backward_regather")
    return Distribution(w, " + ".join(terms), elements, elements * e, messages, excluded, [], assumptions)

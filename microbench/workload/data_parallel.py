"""Data-parallel schemes: how PyTorch DDP and DeepSpeed ZeRO-1/2/3 and ZeRO++ cut Eq. 2 and Eq. 3 into calls.

Each builder returns a Distribution whose rules are stated in its assumptions. Gradients are
communicated in the training precision; parameters are listed in forward order and become ready
for reduction in reverse order.
"""

from __future__ import annotations

from fractions import Fraction

from microbench.workload.buckets import close_when_reached, flush_before_overflow
from microbench.workload.distribution import Departure, Distribution, Workload, ceil_div, per_parameter_broadcasts
from microbench.workload.messages import Message, total_wire
from microbench.workload.model import eq2_data_parallel, eq3_zero3, parameter_tensors

MiB = 1 << 20
DDP_FIRST_BUCKET_BYTES = 1 * MiB       # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_CAP_BYTES = 25 * MiB        # DistributedDataParallel(bucket_cap_mb=25)
DDP_BROADCAST_BUCKET_BYTES = 250 * MiB  # DistributedDataParallel.broadcast_bucket_size
ZERO_REDUCE_BUCKET_ELEMENTS = 500_000_000       # reduce_bucket_size 5e8
ZERO_PARTITION_ALIGNMENT = 2                     # nccl_start_alignment_factor: 4 bytes of 16-bit elements
ZERO3_PERSISTENCE_THRESHOLD = 100_000            # stage3_param_persistence_threshold 1e5
ZERO3_PREFETCH_BUCKET_ELEMENTS = 50_000_000      # stage3_prefetch_bucket_size 5e7
ZERO3_MAX_REUSE_DISTANCE = 1_000_000_000         # stage3_max_reuse_distance 1e9 (elements)
ZERO12_NORM_BYTES = 4                            # stage_1_and_2 get_grad_norm_direct: an fp32 scalar
ZERO3_NORM_BYTES = 8                             # stage3 get_grad_norm_direct: zero/utils.get_norm_dtype, fp64
ZEROPP_QUANT_GROUP = 8000                        # CUDAQuantizer.target_group_size (qwZ scales)
SCALE_BYTES = 4                                  # fp32 quantization scales

SETUP_DEEPSPEED = ("setup: the DeepSpeed engine broadcasts every parameter from rank 0 at start, one call per "
                   "parameter (under zero.Init partitioned weights may skip it)")


def _eq2(w: Workload, what: str, assumptions: list[str], messages: list[Message],
         departures: list[Departure] | None = None) -> Distribution:
    elements = eq2_data_parallel(w.params, w.dp)
    return Distribution(w, f"Eq. 2 ({what}): 2 * params * (d-1)/d", elements, elements * w.element_bytes,
                        messages, ("setup",), departures or [], assumptions)


def ddp(w: Workload) -> Distribution:
    """PyTorch DDP: gradient buckets in the order gradients become ready, one allreduce each."""
    d, e = w.dp, w.element_bytes
    tensors = parameter_tensors(w.model)
    ready = [t.numel * e for t in reversed(tensors)]
    buckets = close_when_reached(ready, [DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP_BYTES])
    messages = [Message("allreduce", sum(ready[i] for i in b), 1, d, "gradients") for b in buckets]
    forward = [t.numel * e for t in tensors]
    messages += [Message("broadcast", sum(forward[i] for i in g), 1, d, "setup")
                 for g in close_when_reached(forward, [DDP_BROADCAST_BUCKET_BYTES])]
    assumptions = [
        "PyTorch DDP after its first iteration (buckets rebuilt in the order gradients became ready, "
        "here the reverse of the forward order): a bucket closes once it holds at least its cap, the first "
        "at 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), the rest at bucket_cap_mb = 25 MiB; tensors are never "
        "split, so a bucket can exceed its cap; one allreduce per bucket per iteration (no gradient accumulation). "
        "The first iteration is not modelled: torch 2.13 starts with all gradients in one bucket "
        "(_BucketCapacityConfig.compute_bucket_size_limits without find_unused_parameters) and rebuilds after it",
        "setup: DDP's constructor broadcasts the module state from rank 0 with c10d's broadcast_coalesced, "
        "in forward order in groups of 250 MiB (broadcast_bucket_size) that close once they reach it "
        "(compute_bucket_assignment_by_size, as the gradient buckets)",
    ]
    return _eq2(w, "DDP", assumptions, messages)


def _zero12(w: Workload, stage: int) -> Distribution:
    """DeepSpeed ZeRO-1/2: one allreduce per gradient bucket, the norm, one allgather of the update."""
    d, e, params = w.dp, w.element_bytes, w.params
    tensors = parameter_tensors(w.model)
    padded = ceil_div(params, ZERO_PARTITION_ALIGNMENT * d) * ZERO_PARTITION_ALIGNMENT * d
    partition = padded // d
    order = list(range(len(tensors))) if stage == 1 else list(reversed(range(len(tensors))))
    sizes = [tensors[i].numel for i in order]
    messages = [Message("allreduce", sum(sizes[j] for j in bucket) * e, 1, d, "gradients")
                for bucket in flush_before_overflow(sizes, ZERO_REDUCE_BUCKET_ELEMENTS)]
    messages.append(Message("allreduce", ZERO12_NORM_BYTES, 1, d, "optimizer"))
    messages.append(Message("allgather", partition * e, 1, d, "optimizer"))
    messages += per_parameter_broadcasts([t.numel for t in tensors], e, d)
    order_text = "in parameter order after backward" if stage == 1 else "as gradients become ready in backward"
    assumptions = [
        f"DeepSpeed ZeRO-{stage} (checked against DeepSpeed 0.19.8): gradients are gathered {order_text} into "
        "buckets of reduce_bucket_size = 5e8 elements (a tensor that would overflow the bucket first sends it); "
        "with use_multi_rank_bucket_allreduce=True (the default since late 2023, PR #4695; "
        "stage_1_and_2.average_tensor -> allreduce_and_scatter) each bucket is allreduced whole, one allreduce of "
        "the bucket's size, and each rank keeps its slice; with it False each bucket is reduced to the ranks "
        "that own parts of it instead (one reduce per owner, Eq. 2's volume; not modelled)",
        "optimizer: the gradient norm (get_grad_norm_direct, computed even without clipping) is one allreduce of "
        "an fp32 scalar per parameter group; the updated parameters come back in one allgather per parameter "
        "group of each rank's partition (allgather_bucket_size only matters on torch without "
        "all_gather_into_tensor); one parameter group is modelled (real runs often have two, with and without "
        "weight decay)",
        SETUP_DEEPSPEED,
    ]
    factor = Fraction(e * (d - 1), d)
    departures = [
        Departure("each gradient bucket is allreduced whole (use_multi_rank_bucket_allreduce=True), not reduced "
                  "to its owners: params * (d-1)/d elements more than Eq. 2", params * factor),
        Departure("the gradient norm's allreduce (one fp32 scalar)", Fraction(2 * ZERO12_NORM_BYTES * (d - 1), d)),
    ]
    if padded != params:
        departures.append(Departure(
            f"the flat parameter group is padded from {params} to {padded} elements (a multiple of 2d, "
            "DeepSpeed's 4-byte alignment) and the allgather moves the padding",
            Fraction((padded - params) * e * (d - 1), d)))
    return _eq2(w, f"ZeRO-{stage}", assumptions, messages, departures)


def zero1(w: Workload) -> Distribution:
    return _zero12(w, 1)


def zero2(w: Workload) -> Distribution:
    return _zero12(w, 2)


def _persistent(numel: int) -> bool:
    return numel <= ZERO3_PERSISTENCE_THRESHOLD


ZERO3_FETCH_RULE = (
    "ZeRO-3 forward (checked against DeepSpeed 0.19.8, partitioned_param_coordinator.fetch_sub_module): after the "
    "first iteration has recorded the module trace, each fetch prefetches the next parameters of the trace until "
    "it holds stage3_prefetch_bucket_size = 5e7 elements and gathers them in one allgather "
    "(all_gather_coalesced: each rank's partitions of all of them); modelled as the non-persistent parameters in "
    "forward order cut into allgathers that close once they reach 5e7 elements (a model whose root module holds "
    "no parameter of its own, as GPT-NeoX's; stage3_max_live_parameters = 1e9 capping what is gathered at once "
    "is not modelled)")
ZERO3_REUSE_RULE = (
    "ZeRO-3 backward: after a module's forward its parameters are released unless they are used again within "
    "stage3_max_reuse_distance = 1e9 elements of the module trace (__params_to_release); a parameter's reuse "
    "distance is modelled as twice the elements after it in forward order (the rest of the forward, then the "
    "backward back to it): those within 1e9 stay gathered, the others are gathered again in backward, in "
    "backward order, coalesced as in forward")
ZERO3_PERSIST_RULE = (
    "parameters of at most stage3_param_persistence_threshold = 1e5 elements stay resident: not gathered in "
    "forward or backward, but gathered once after the optimizer step (one allgather each, tiny messages)")


def _reuse_elements(tensors) -> list[int]:
    """Per tensor, the trace elements between its forward use and its backward use (2 x the elements after it)."""
    after, out = 0, []
    for t in reversed(tensors):
        out.append(2 * after)
        after += t.numel
    return out[::-1]


def _coalesced_gathers(numels: list[int], d: int, e: int, phase: str) -> list[Message]:
    """Allgathers of partitions coalesced into prefetch buckets that close once they reach 5e7 elements."""
    return [Message("allgather", sum(ceil_div(numels[i], d) for i in bucket) * e, 1, d, phase)
            for bucket in close_when_reached(numels, [ZERO3_PREFETCH_BUCKET_ELEMENTS])]


def zero3(w: Workload) -> Distribution:
    """DeepSpeed ZeRO-3: coalesced prefetch allgathers, re-gathers beyond the reuse distance, reduce_scatter
    gradient buckets, the norm, and the persistent parameters gathered after the step."""
    d, e = w.dp, w.element_bytes
    tensors = parameter_tensors(w.model)
    reuse = _reuse_elements(tensors)
    gathered = [t.numel for t in tensors if not _persistent(t.numel)]
    regathered = [t.numel for t, r in zip(tensors, reuse) if not _persistent(t.numel) and r >= ZERO3_MAX_REUSE_DISTANCE]
    persistent = [t.numel for t in tensors if _persistent(t.numel)]
    messages = _coalesced_gathers(gathered, d, e, "forward") + _coalesced_gathers(regathered[::-1], d, e, "backward")
    ready = [t.numel for t in reversed(tensors)]
    for bucket in flush_before_overflow(ready, ZERO_REDUCE_BUCKET_ELEMENTS):
        messages.append(Message("reduce_scatter", d * sum(ceil_div(ready[i], d) for i in bucket) * e, 1, d,
                                "gradients"))
    messages.append(Message("allreduce", ZERO3_NORM_BYTES, 1, d, "optimizer"))
    messages += [Message("allgather", ceil_div(n, d) * e, 1, d, "optimizer") for n in persistent]
    messages += per_parameter_broadcasts([t.numel for t in tensors], e, d)
    factor = Fraction(e * (d - 1), d)
    pad = {n: ceil_div(n, d) * d - n for n in gathered + persistent}
    kept = sum(gathered) - sum(regathered)
    departures = [Departure(f"{len(persistent)} persistent parameters ({sum(persistent)} elements) are gathered "
                            "once after the step instead of in forward and backward", -sum(persistent) * factor),
                  Departure("the gradient norm's allreduce (one fp64 scalar)",
                            Fraction(2 * ZERO3_NORM_BYTES * (d - 1), d))]
    if kept:
        departures.append(Departure(f"{len(gathered) - len(regathered)} parameters ({kept} elements) stay gathered "
                                    "from forward to backward (within stage3_max_reuse_distance): not gathered again",
                                    -kept * factor))
    padding = (2 * sum(pad[n] for n in gathered) + sum(pad[n] for n in regathered)
               + 2 * sum(pad[n] for n in persistent))
    if padding:
        departures.append(Departure("each partitioned parameter is padded to a multiple of d elements",
                                    padding * factor))
    assumptions = [
        ZERO3_FETCH_RULE, ZERO3_REUSE_RULE, ZERO3_PERSIST_RULE,
        "gradients: buckets of reduce_bucket_size = 5e8 elements in the order gradients become ready, one "
        "reduce_scatter per bucket of the gradients each padded to a multiple of d (reduce_scatter_coalesced; "
        "torch builds with a coalesced reduce-scatter issue one call per tensor inside one NCCL group instead)",
        "optimizer: the gradient norm is one allreduce of an fp64 scalar per parameter group (stage3 "
        "get_grad_norm_direct, norms accumulated in zero/utils.get_norm_dtype)",
        SETUP_DEEPSPEED,
    ]
    elements = eq3_zero3(w.params, d)
    return Distribution(w, "Eq. 3 (ZeRO-3): 3 * params * (d-1)/d", elements, elements * e, messages,
                        ("setup",), departures, assumptions)


def zeropp(w: Workload) -> Distribution:
    """ZeRO++: qwZ int8 weight allgathers, hpZ node-local backward allgathers, qgZ int4 all-to-all gradients."""
    d, e, params = w.dp, w.element_bytes, w.params
    k = min(w.node_size, d)
    nodes = d // k
    tensors = parameter_tensors(w.model)
    messages: list[Message] = []
    persistent = [t for t in tensors if _persistent(t.numel)]
    gathered = [t for t in tensors if not _persistent(t.numel)]
    scale_messages: list[Message] = []
    for t in gathered:
        part = ceil_div(t.numel, d)
        scales = Message("allgather", ceil_div(part, ZEROPP_QUANT_GROUP) * SCALE_BYTES, 1, d, "forward")
        messages += [Message("allgather", part, 1, d, "forward"), scales,
                     Message("allgather", ceil_div(t.numel, k) * e, 1, k, "backward")]
        scale_messages.append(scales)
    fallback = []
    for t in reversed(tensors):
        n = t.numel
        if len(t.shape) == 2 and n % (2 * d) == 0:
            groups = max(t.shape[0], t.shape[1], d)
            intra_scales = Message("alltoall", ceil_div(groups * SCALE_BYTES, k), 1, k, "gradients")
            inter_scales = Message("alltoall", ceil_div(groups // k * SCALE_BYTES, nodes), 1, nodes, "gradients")
            messages += [Message("alltoall", n // (2 * k), 1, k, "gradients"), intra_scales,
                         Message("alltoall", n // (2 * d), 1, nodes, "gradients"), inter_scales]
            scale_messages += [intra_scales, inter_scales]
        else:
            fallback.append(n)
            messages.append(Message("reduce_scatter", ceil_div(n, d) * d * e, 1, d, "gradients"))
    messages += [Message("allgather", ceil_div(t.numel, d) * e, 1, d, "optimizer") for t in persistent]
    messages += per_parameter_broadcasts([t.numel for t in tensors], e, d)
    messages = [m for m in messages if m.group_size > 1]

    qgz_per_element = Fraction(k - 1, 2 * k) + Fraction(nodes - 1, 2 * k * nodes)
    equation_bytes = (Fraction(params * (d - 1), d) + Fraction(params * (k - 1) * e, k)
                      + params * qgz_per_element)
    pp_elems = sum(t.numel for t in persistent)
    departures = [
        Departure(f"{len(persistent)} persistent parameters ({pp_elems} elements) skip the forward and backward "
                  "gathers and are gathered unquantized once after the step",
                  pp_elems * (Fraction(e * (d - 1), d) - Fraction(d - 1, d) - Fraction(e * (k - 1), k))),
        Departure(f"{len(fallback)} gradients (vectors, or sizes not a multiple of 2d) fall back to reduce_scatter "
                  "in the training precision instead of the int4 all-to-all",
                  sum(fallback) * (Fraction(e * (d - 1), d) - qgz_per_element)),
        Departure("fp32 quantization scales travel beside the int8 weights and int4 gradients",
                  total_wire(scale_messages)),
    ]
    padding = (sum((ceil_div(t.numel, d) * d - t.numel) * Fraction(d - 1, d) for t in gathered)
               + sum((ceil_div(t.numel, k) * k - t.numel) * Fraction(e * (k - 1), k) for t in gathered)
               + sum((ceil_div(n, d) * d - n) * Fraction(e * (d - 1), d)
                     for n in [t.numel for t in persistent] + fallback))
    if padding:
        departures.append(Departure("partitions are padded to a multiple of the group size", padding))
    assumptions = [
        "ZeRO++ qwZ: forward weight allgathers in int8 (1 byte per element) per weight matrix as in ZeRO-3, each "
        "followed by an allgather of its fp32 scales, one per 8000 elements of the partition (CUDAQuantizer's "
        "target group size; the library adjusts the group count for divisibility)",
        f"ZeRO++ hpZ: backward allgathers in the training precision within a node from the secondary partition "
        f"(group of {k} = min(--node-size, d))",
        f"ZeRO++ qgZ (all_to_all_quant_reduce): per 2-D gradient whose size is a multiple of 2d, an int4 all-to-all "
        f"inside the node (group {k}) and one across nodes (group {nodes}), each followed by an all-to-all of fp32 "
        "scales (max(rows, cols, d) groups inside, that over the node size across); vectors and other gradients "
        "go through reduce_scatter, one per tensor",
        ZERO3_PERSIST_RULE, SETUP_DEEPSPEED,
    ]
    elements = eq3_zero3(params, d)
    return Distribution(w, "Eq. 3 with ZeRO++'s precisions and groups: params * [(d-1)/d * 1 B (qwZ) + "
                           "(k-1)/k * E (hpZ) + ((k-1)/(2k) + (N-1)/(2kN)) B (qgZ int4)], k ranks per node, "
                           "N nodes", elements, equation_bytes, messages, ("setup",), departures, assumptions)

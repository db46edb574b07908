"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``): how Eq. 3 is cut into calls, as torch 2.13 does it.

The wrapping modelled is the usual recipe: ``fully_shard`` on every transformer block, then on the root
(which keeps the embeddings, the final norm and the output head). Each wrapped module is one parameter
group: one all-gather and one reduce-scatter move all of its parameters at once.
"""

from __future__ import annotations

from fractions import Fraction

from microbench.workload.distribution import Departure, Distribution, Workload, ceil_div
from microbench.workload.messages import Message
from microbench.workload.model import Tensor, eq3_zero3, parameter_tensors

FSDP2_RULES = [
    "FSDP2 (torch 2.13, torch/distributed/fsdp/_fully_shard): fully_shard on each transformer block and on the "
    "root; each parameter is sharded on dim 0, padded to a multiple of d rows (_fsdp_common._get_dim0_padded_size, "
    "_chunk_with_empty), and a group's shards travel as one flat all-gather (_fsdp_collectives.foreach_all_gather: "
    "each rank's input is the sum of its padded shards)",
    "forward: the root's group is gathered first, then each block's; backward: each block is gathered again "
    "(reshard_after_forward defaults to True) but the root is not (_fsdp_state._lazy_init: the root does not "
    "reshard after forward)",
    "gradients: one reduce_scatter per group in backward (foreach_reduce: the input is the group's padded "
    "unsharded gradients, d times the all-gather input), the blocks in reverse order and the root last; the "
    "optimizer step works on the local shards (no call); no start-of-training broadcast (fully_shard does not "
    "synchronise module states: ranks must initialise alike)",
]


def _groups(w: Workload) -> tuple[list[Tensor], list[list[Tensor]]]:
    """The root's own parameters and each block's, in forward order."""
    tensors = parameter_tensors(w.model)
    blocks = [[t for t in tensors if t.name.startswith(f"layer{i}.")] for i in range(w.model.layers)]
    root = [t for t in tensors if not t.name.startswith("layer")]
    return root, blocks


def padded_shard(t: Tensor, d: int) -> int:
    """Elements of one rank's shard: dim 0 padded up to a multiple of d, split d ways."""
    rows, rest = t.shape[0], t.numel // t.shape[0]
    return ceil_div(rows, d) * rest


def fsdp2(w: Workload) -> Distribution:
    """FSDP2: per wrapped module one all-gather in forward (and in backward for blocks), one reduce_scatter."""
    d, e = w.dp, w.element_bytes
    root, blocks = _groups(w)
    shard = [sum(padded_shard(t, d) for t in g) for g in [root, *blocks]]
    root_shard, block_shards = shard[0], shard[1:]
    messages = [Message("allgather", root_shard * e, 1, d, "forward")]
    messages += [Message("allgather", s * e, 1, d, "forward") for s in block_shards]
    messages += [Message("allgather", s * e, 1, d, "backward") for s in reversed(block_shards)]
    messages += [Message("reduce_scatter", d * s * e, 1, d, "gradients") for s in [*reversed(block_shards), root_shard]]
    factor = Fraction(e * (d - 1), d)
    root_params = sum(t.numel for t in root)
    departures = [Departure(f"the root's {root_params} parameters are gathered once (the root is not resharded "
                            "after forward), not again in backward", -root_params * factor)]
    pad_root = d * root_shard - root_params
    pad_blocks = sum(d * s for s in block_shards) - sum(t.numel for g in blocks for t in g)
    if pad_root or pad_blocks:
        departures.append(Departure("each parameter's dim 0 is padded to a multiple of d rows",
                                    (2 * pad_root + 3 * pad_blocks) * factor))
    elements = eq3_zero3(w.params, d)
    return Distribution(w, "Eq. 3 (FSDP2): 3 * params * (d-1)/d", elements, elements * e, messages, ("setup",),
                        departures, list(FSDP2_RULES))

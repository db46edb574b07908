"""How frameworks pack tensors into one communication call: two packing rules, as the frameworks code them.

Each function takes tensor sizes in order (bytes or elements, as the rule counts them) and returns the
buckets as lists of indices into that order. No rule ever splits a tensor.
"""

from __future__ import annotations


def close_when_reached(sizes: list[int], limits: list[int]) -> list[list[int]]:
    """PyTorch DDP's compute_bucket_assignment_by_size (gradient buckets, and c10d's broadcast_coalesced of
    the module state at construction) and Megatron-LM's grad buffer.

    Tensors join the open bucket in order; the bucket closes as soon as it holds at least its limit.
    Limits are used in turn and the last one repeats (DDP: 1 MiB for the first bucket, then 25 MiB).
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i, size in enumerate(sizes):
        current.append(i)
        held += size
        if held >= limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(current)
            current, held = [], 0
    if current:
        buckets.append(current)
    return buckets


def flush_before_overflow(sizes: list[int], cap: int) -> list[list[int]]:
    """DeepSpeed ZeRO's gradient buckets (reduce_bucket_size).

    A tensor that would take the open bucket past ``cap`` first sends the bucket; a tensor larger than
    ``cap`` travels alone.
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i, size in enumerate(sizes):
        if current and held + size > cap:
            buckets.append(current)
            current, held = [], 0
        current.append(i)
        held += size
    if current:
        buckets.append(current)
    return buckets


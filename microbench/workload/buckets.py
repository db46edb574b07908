"""How frameworks pack tensors into one communication call: three packing rules, as the frameworks code them.

Each function takes tensor sizes in order (bytes or elements, as the rule counts them) and returns the
buckets as lists of indices into that order. No rule ever splits a tensor.
"""

from __future__ import annotations


def close_when_reached(sizes: list[int], limits: list[int]) -> list[list[int]]:
    """PyTorch DDP's compute_bucket_assignment_by_size and Megatron-LM's grad buffer.

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


def take_tensors(sizes: list[int], limit: int) -> list[list[int]]:
    """PyTorch's take_tensors, which _broadcast_coalesced uses: after adding a tensor, the group closes
    when its size plus that tensor's size reaches ``limit`` (the library's own test, kept as it is)."""
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i, size in enumerate(sizes):
        current.append(i)
        held += size
        if held + size >= limit:
            groups.append(current)
            current, held = [], 0
    if current:
        groups.append(current)
    return groups

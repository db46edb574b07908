"""PyTorch collectives as the profiler, the execution trace and PARAM record them, sized in microbench's terms.

Three records of one call, newest first:

- a ``record_param_comms`` op with the collective's metadata (torch/csrc/profiler/util.cpp saveNcclMeta:
  "Collective name", "In msg nelems", "dtype", "Group size"; in the execution trace the attributes
  collective_name, in_msg_nelems, dtype, pg_size). "In msg nelems" is the input: the buffer, each rank's
  all-gather contribution, the full reduce-scatter input (ProcessGroupNCCL records outputTensor.numel()
  x size), the whole all-to-all input (divided here by the group size); an ``all_to_allv`` (all_to_all_single
  with split sizes, ProcessGroupNCCL::alltoall_base) keeps its whole input as its size (what the rank sends in
  all) and its "In split size" (``in_split_size``), the rows sent to each peer, as its split pattern
  (``peer_sizes.pattern_of``);
- a ProcessGroup profiling annotation ``nccl:all_reduce`` (``gloo:``, ``ucc:``, ``mpi:``, ``xccl:`` alike)
  whose inputs are the collective's input tensors, with shapes and element types but no group size: the
  only record in PyTorch 2.0 and earlier;
- a symmetric-memory op ``symm_mem::multimem_all_reduce_`` (and its one-shot, two-shot and all-gather
  kin), recorded as an ordinary op with its input tensor and group name, no group size.
"""

from __future__ import annotations

import math
import re

from microbench.workload.traces.names import (
    NO_DATA,
    SYMMETRIC_MEMORY_OPS,
    TORCH_NO_DATA,
    TORCH_OPS,
    TORCH_TYPE_BYTES,
    UNCURVED,
    letters,
)
from microbench.workload.traces.peer_sizes import parse_sizes, pattern_of
from microbench.workload.traces.tally import TraceTally

#: a ProcessGroup profiling title: backend and op
ANNOTATION = re.compile(r"(?:nccl|gloo|ucc|mpi|xccl|hccl|cncl|fake):(\w+)$")
#: GPU kernels of symmetric-memory collectives (reported by name when no sized op is in the trace)
SYMMETRIC_KERNEL = re.compile(r"(multimem_all_reduce|multimem_one_shot|one_shot_all_reduce|two_shot_all_reduce"
                              r"|multimem_all_gather|multimem_reduce)\w*")
NO_GROUP = "all_to_all without a group size (its size is the whole buffer; pass --trace-group-size)"


def classify(tally: TraceTally, name: str, count: int = 1) -> str | None:
    """The collective a PyTorch name stands for, or None once why it is not priced is counted."""
    key = letters(name)
    if key in TORCH_NO_DATA:
        tally.skipped[NO_DATA] += count
        return None
    collective = TORCH_OPS.get(key)
    if collective is None:
        tally.uncurved[UNCURVED.get(key, name)] += count
    return collective


def add_sized(tally: TraceTally, rank: str, collective: str, nbytes: int, group, count: int = 1,
              splits: str | None = None) -> None:
    """A call whose input is ``nbytes``; all-to-all input is the whole buffer, so it needs the group size (an
    all-to-all-v's whole input is its size)."""
    group = group if isinstance(group, int) and not isinstance(group, bool) and group > 0 else None
    if collective == "alltoallv":
        tally.add(rank, collective, nbytes, group, count, splits)
        return
    if collective == "alltoall":
        if not group:
            tally.skipped[NO_GROUP] += count
            return
        nbytes //= group
    tally.add(rank, collective, nbytes, group, count)


def element_bytes(dtype) -> int | None:
    """Bytes per element of a type name: "Float", "c10::BFloat16", "Tensor(float)", "bfloat16"."""
    if not isinstance(dtype, str):
        return None
    name = dtype.lower()
    if name.startswith("tensor(") and name.endswith(")"):
        name = name[7:-1]
    return TORCH_TYPE_BYTES.get(name)


#: what ``split_pattern`` returns for an equal split: an empty list (all_to_all_single without split sizes) or the
#: same size for every peer; the call is an all-to-all of the block to each peer
EQUAL = "equal"


def split_pattern(in_split) -> str | None:
    """The split pattern of an all-to-all-v's recorded per-peer sizes: ``EQUAL`` for an equal split, None for a
    list cut short or unreadable."""
    if in_split in ("[]", []):
        return EQUAL
    sizes = parse_sizes(in_split)
    if sizes is None:
        return None
    return EQUAL if min(sizes) == max(sizes) else pattern_of(sizes)


def add_metadata_call(tally: TraceTally, rank: str, name, in_elems, dtype, group, count: int = 1,
                      splits: str | None = None) -> None:
    """A record_param_comms call: its collective name, input elements, element type and group size (and an
    all-to-all-v's split pattern, ``split_pattern`` of its "In split size")."""
    if not isinstance(name, str):
        tally.unreadable += count
        return
    collective = classify(tally, name, count)
    if collective is None:
        return
    size = element_bytes(dtype)
    if size is None or not isinstance(in_elems, int) or isinstance(in_elems, bool) or in_elems < 0:
        tally.unreadable += count
        return
    if collective == "alltoallv" and splits == EQUAL:  # no split sizes: an equal split, an all-to-all
        collective, splits = "alltoall", None
    elif collective == "alltoallv" and splits is None:
        tally.note("all_to_allv calls whose per-peer sizes were cut short or unreadable are tallied as split "
                   "unknown and priced as uniform")
    add_sized(tally, rank, collective, in_elems * size, group, count, None if splits == EQUAL else splits)


def _tensor_type(dtype) -> bool:
    """Tensor element types are caffe2 TypeMeta names ("float", "c10::Half") or "Tensor(...)"; other
    arguments carry IValue kinds ("Int", "String", "GenericList")."""
    return isinstance(dtype, str) and (dtype[:1].islower() or dtype.startswith(("c10::", "Tensor(")))


def tensor_bytes(shapes, types) -> int | None:
    """Bytes of the tensors among an op's inputs (shapes [[1024], [2, 8]], types ["float", "Int"]); None
    when a tensor's element type is unknown or its shape is not a list of whole numbers."""
    if not isinstance(shapes, list) or not isinstance(types, list):
        return None
    total = 0
    for shape, dtype in zip(shapes, types):
        if not _tensor_type(dtype):
            continue
        size = element_bytes(dtype)
        if size is None or not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            return None
        total += math.prod(shape) * size
    return total


def add_annotation_call(tally: TraceTally, rank: str, op: str, shapes, types, group, count: int = 1) -> None:
    """A ProcessGroup annotation (``nccl:<op>``): its input tensors are the message."""
    collective = classify(tally, op, count)
    if collective is None:
        return
    nbytes = tensor_bytes(shapes, types)
    if nbytes is None:
        tally.unreadable += count
        return
    add_sized(tally, rank, collective, nbytes, group, count)


def add_symmetric_call(tally: TraceTally, rank: str, name: str, shapes, types, group, count: int = 1) -> None:
    """A ``symm_mem::<op>`` op: the collective it performs, sized by its input tensor."""
    op = name.split("::", 1)[-1]
    known = SYMMETRIC_MEMORY_OPS.get(op)
    if known is None:
        tally.uncurved[f"symm_mem::{op}"] += count
        return
    collective, index = known
    if not isinstance(shapes, list) or not isinstance(types, list) or len(shapes) <= index or len(types) <= index:
        tally.unreadable += count
        return
    nbytes = tensor_bytes([shapes[index]], [types[index]])
    if nbytes is None:
        tally.unreadable += count
        return
    tally.note("symmetric-memory ops (symm_mem::*) are counted as the collective they perform")
    add_sized(tally, rank, collective, nbytes, group, count)

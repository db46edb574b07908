"""Names as traces print them: element types (bytes per element) and collective names (microbench's names).

Every table says where its names come from; a name not in a table is reported, never guessed.
"""

from __future__ import annotations

from microbench.workload.messages import COLLECTIVES

#: ncclDataType_t codes (nccl.h; RCCL's rccl.h uses the same codes) -> bytes per element
NCCL_TYPE_CODES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}

#: ncclDatatypeToString() names (NCCL 2.24+ profiler events; RCCL spells the fp8 types ncclFp8E4M3/E5M2),
#: lower case -> bytes per element
NCCL_TYPE_NAMES = {
    "ncclint8": 1, "ncclchar": 1, "nccluint8": 1, "ncclint32": 4, "ncclint": 4,
    "nccluint32": 4, "ncclint64": 8, "nccluint64": 8, "ncclfloat16": 2, "ncclhalf": 2,
    "ncclfloat32": 4, "ncclfloat": 4, "ncclfloat64": 8, "nccldouble": 8, "ncclbfloat16": 2,
    "ncclfloat8e4m3": 1, "ncclfloat8e5m2": 1, "ncclfp8e4m3": 1, "ncclfp8e5m2": 1,
}

#: PyTorch element type names, lower case -> bytes: c10::toString(ScalarType) ("Float", "BFloat16": the
#: profiler's "dtype" and the execution trace's dtype attribute), caffe2::TypeMeta names ("float",
#: "c10::BFloat16", "long int": the profiler's "Input type" and the execution trace's "Tensor(...)" types),
#: and PARAM's names ("float32", "bfloat16").
TORCH_TYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "complexhalf": 4, "complexfloat": 8, "complexdouble": 16,
    "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1,
    "short unsigned int": 2, "unsigned int": 4, "long unsigned int": 8,
    "c10::complex<c10::half>": 4, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2fnuz": 1,
    "c10::float8_e8m0fnu": 1,
}

#: what a call is left out for when it moves no data
NO_DATA = "no data (barrier, wait, init)"


def letters(name: str) -> str:
    """The letters of a name, lower case: "all_gather_into_tensor" and "AllGather" compare alike."""
    return "".join(ch for ch in name.lower() if ch.isalpha())


#: letters of NCCL/RCCL operation names (enqueue.cc opName, ncclFuncToString) -> collective; the
#: profiler example of NCCL 2.23 prefixes them with "nccl". NCCL 2.28's AlltoAll and RCCL's AllToAllPivot
#: (its ncclAllToAll for large blocks; smaller ones are logged as grouped Send/Recv) count per peer.
NCCL_OPS = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
            "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce", "send": "send", "recv": "recv",
            "alltoall": "alltoall", "alltoallpivot": "alltoall"}

#: letters of PyTorch collective names ("Collective name", ProcessGroup profiling titles "nccl:all_reduce",
#: execution-trace collective_name) and PARAM "comms" values -> collective
TORCH_OPS = {
    "allreduce": "allreduce", "allreducecoalesced": "allreduce",
    "allgather": "allgather", "allgatherbase": "allgather", "allgatherintotensorcoalesced": "allgather",
    "allgathercoalesced": "allgather", "allgatherintotensor": "allgather",
    "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensorcoalesced": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "broadcast": "broadcast", "broadcastoop": "broadcast", "reduce": "reduce", "reduceoop": "reduce",
    "alltoall": "alltoall", "alltoallv": "alltoallv", "alltoallbase": "alltoall", "alltoallsingle": "alltoall",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "recvanysource": "recv",
}
TORCH_NO_DATA = {"wait", "barrier", "monitoredbarrier", "init", "coalesced", "batchisendirecv", "startcoalescing",
                 "endcoalescing", ""}

#: DeepSpeed comms-logger op names (deepspeed/comm/comm.py) -> collective
DEEPSPEED_OPS = {
    "all_reduce": "allreduce", "all_reduce_coalesced": "allreduce", "inference_all_reduce": "allreduce",
    "all_gather": "allgather", "all_gather_into_tensor": "allgather", "all_gather_base": "allgather",
    "allgather_fn": "allgather", "all_gather_coalesced": "allgather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_fn": "reduce_scatter",
    "reduce_scatter_coalesced": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "all_to_all_single": "alltoall", "all_to_all": "alltoall",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv",
}
DEEPSPEED_NO_DATA = {"barrier", "monitored_barrier", "log_summary_barrier"}

#: letters of collectives the traces name that microbench has no curve for: counted by name, not priced
UNCURVED = {"gather": "gather", "scatter": "scatter", "allgatherv": "allgatherv",
            "reducescatterv": "reducescatterv", "sendrecv": "sendrecv"}

#: PyTorch symmetric-memory ops (torch/csrc/distributed/c10d/symm_mem, namespace symm_mem) that perform a
#: collective microbench measures: op name -> (collective, index of the input whose size is the message)
SYMMETRIC_MEMORY_OPS = {
    "multimem_all_reduce_": ("allreduce", 0), "multimem_one_shot_all_reduce": ("allreduce", 0),
    "multimem_one_shot_all_reduce_out": ("allreduce", 0), "one_shot_all_reduce": ("allreduce", 0),
    "one_shot_all_reduce_out": ("allreduce", 0), "one_shot_all_reduce_copy": ("allreduce", 1),
    "one_shot_all_reduce_copy_out": ("allreduce", 1), "two_shot_all_reduce_": ("allreduce", 0),
    "two_shot_all_reduce_out": ("allreduce", 0), "multimem_all_gather_out": ("allgather", 0),
    "multimem_one_shot_reduce_out": ("reduce", 0),
}


def curved(collective: str) -> bool:
    """Whether microbench measures (and the workload model prices) this collective."""
    return collective in COLLECTIVES

"""Which real framework each scheme follows, the version its rules were read from, and how they were checked.

A scheme name alone does not say whose behaviour it means (ZeRO-3 as DeepSpeed cuts it is not FSDP2); each
modelled distribution states its framework in its assumptions. ``checked`` names the real runs that the
scheme's messages were compared with (docs/frameworks.md, ``scripts/bench_frameworks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    """The framework a scheme follows: its name, the version read, the sources, and how it was checked."""

    name: str
    version: str
    sources: str
    checked: str


FRAMEWORKS: dict[str, Framework] = {
    "ddp": Framework("PyTorch DistributedDataParallel", "torch 2.13",
                     "torch/nn/parallel/distributed.py (_BucketCapacityConfig), c10d reducer.hpp "
                     "(kDefaultFirstBucketBytes, kDefaultBucketBytesCap)",
                     "real 2- and 4-rank gloo jobs, profiled (docs/frameworks.md)"),
    "fsdp2": Framework("PyTorch FSDP2 (fully_shard)", "torch 2.13",
                       "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, _fsdp_state.py, _fsdp_common.py",
                       "real 2- and 4-rank gloo jobs, profiled (docs/frameworks.md)"),
    "zero1": Framework("DeepSpeed ZeRO stage 1", "deepspeed 0.19.8",
                       "deepspeed/runtime/zero/stage_1_and_2.py, deepspeed/runtime/zero/config.py",
                       "real 2- and 4-rank jobs on the CPU accelerator (gloo), comms logger and profiler"),
    "zero2": Framework("DeepSpeed ZeRO stage 2", "deepspeed 0.19.8",
                       "deepspeed/runtime/zero/stage_1_and_2.py, deepspeed/runtime/zero/config.py",
                       "real 2- and 4-rank jobs on the CPU accelerator (gloo), comms logger and profiler"),
    "zero3": Framework("DeepSpeed ZeRO stage 3", "deepspeed 0.19.8",
                       "deepspeed/runtime/zero/stage3.py, partitioned_param_coordinator.py, partition_parameters.py",
                       "real 2- and 4-rank jobs on the CPU accelerator (gloo) of a model under 5e7 elements; the "
                       "prefetch buckets and re-gathers of larger models are not checked against a run"),
    "zeropp": Framework("DeepSpeed ZeRO++", "deepspeed 0.16", "deepspeed/runtime/zero/stage3.py (qwZ, hpZ, qgZ)",
                        "not checked against a run"),
    "tp": Framework("Megatron-LM tensor parallelism", "Megatron-LM core", "megatron/core/tensor_parallel",
                    "its layout as torch 2.13's DTensor parallelize_module runs it (column/row-parallel blocks, "
                    "vocabulary-parallel embedding, loss_parallel), 2 and 4 gloo ranks, without recomputation; "
                    "Megatron-LM itself not run"),
    "sp": Framework("Megatron-LM sequence parallelism", "Megatron-LM core", "megatron/core/tensor_parallel",
                    "not checked against a run"),
    "pp": Framework("Megatron-LM pipeline parallelism", "Megatron-LM core", "megatron/core/pipeline_parallel",
                    "its send/recv as torch 2.13's torch.distributed.pipelining (GPipe) runs them, 2 and 4 gloo "
                    "ranks; Megatron-LM itself not run"),
    "3d": Framework("Megatron-LM tensor, pipeline and data parallelism", "Megatron-LM core",
                    "megatron/core/tensor_parallel, pipeline_parallel, distributed", "not checked against a run"),
    # issue 42: sources read from the megatron-core 0.16.1 wheel and TransformerEngine's main branch (2.9+)
    "moe": Framework("Megatron-Core mixture of experts (expert parallelism, all-to-all token dispatcher), with "
                     "tensor, context, pipeline and data parallelism", "megatron-core 0.16.1",
                     "megatron/core/transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher), moe_utils.py "
                     "(get_capacity), megatron/core/parallel_state.py (RankGenerator, expert groups), "
                     "megatron/core/distributed/distributed_data_parallel.py (expert buffers)",
                     "not checked against a run; the all-to-all-v calls are replayed on real groups (docs/replay.md)"),
    "cp": Framework("Megatron-Core context parallelism (TransformerEngine attention), with tensor, expert, "
                    "pipeline and data parallelism", "megatron-core 0.16.1, TransformerEngine 2.9+",
                    "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
                    "(AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndQKVOA2A, flash_attn_p2p_communicate, "
                    "flash_attn_a2a_communicate), megatron/core/parallel_state.py",
                    "not checked against a run; the ring send/recv and all-to-alls are replayed on real groups"),
}


def provenance(scheme: str) -> str:
    """One line for a distribution's assumptions: whose behaviour the scheme follows and how it was checked."""
    f = FRAMEWORKS[scheme]
    return f"scheme {scheme} follows {f.name} ({f.version}; {f.sources}); checked: {f.checked}"

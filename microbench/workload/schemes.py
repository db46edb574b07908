"""Build the message distribution of a workload: one builder per scheme, common assumptions added."""

from __future__ import annotations

from typing import Callable

from microbench.workload import data_parallel, fsdp, megatron_core, model_parallel
from microbench.workload.distribution import COUNT_RULE, Distribution, Workload
from microbench.workload.frameworks import provenance
from microbench.workload.messages import WIRE_RULES, merge

BUILDERS: dict[str, Callable[[Workload], Distribution]] = {
    "ddp": data_parallel.ddp,
    "fsdp2": fsdp.fsdp2,
    "zero1": data_parallel.zero1,
    "zero2": data_parallel.zero2,
    "zero3": data_parallel.zero3,
    "zeropp": data_parallel.zeropp,
    "tp": model_parallel.megatron,
    "sp": model_parallel.megatron,
    "pp": model_parallel.megatron,
    "3d": model_parallel.megatron,
    "moe": megatron_core.build,  # issue 42
    "cp": megatron_core.build,  # issue 42
}


def build(workload: Workload) -> Distribution:
    """The validated workload's distribution, its messages merged and its assumptions complete."""
    workload.validate()
    dist = BUILDERS[workload.scheme](workload)
    dist.messages = merge(dist.messages)
    dist.assumptions = [
        (f"params: the sum of the model's tensors ({workload.model.describe()})" if workload.model.family != "gpt-neox"
         else
         "params per Eq. 1 (untied input and output embeddings, learned positions); each layer's 8h are modelled "
         "as eight h-element vectors beside the four weight matrices" if workload.model.biases == "eq1" else
         "params per Eq. 1 with a real GPT layer's vectors (untied embeddings, learned positions): 12h^2 + 13h per "
         "layer, the QKV bias 3h and the MLP-in bias 4h (split t ways with tensor parallelism) beside six "
         "h-element vectors"),
        provenance(workload.scheme),
        f"messages are in {workload.dtype} ({workload.element_bytes} bytes per element) unless stated",
        COUNT_RULE,
        WIRE_RULES,
        *dist.assumptions,
    ]
    return dist

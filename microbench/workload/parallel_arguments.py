"""The command-line options of modern shapes and of expert and context parallelism (issue 42), shared by
``workload`` and ``replay``: what they are, and the model and workload fields they give."""

from __future__ import annotations

from microbench.benchmarks import splits
from microbench.errors import UsageError
from microbench.workload.distribution import CP_COMMS

#: the largest value of each new option (as workload's SHAPE_BOUNDS)
BOUNDS = {"kv_heads": 1 << 16, "ffn": 1 << 22, "experts": 1 << 16, "top_k": 1 << 16, "expert_ffn": 1 << 22,
          "shared_experts": 1 << 10, "dense_layers": 10_000, "moe_every": 10_000, "cp": 1 << 20, "ep": 1 << 20,
          "etp": 1 << 20}
SHAPE_FIELDS = ("kv_heads", "ffn", "experts", "top_k", "expert_ffn", "shared_experts", "dense_layers", "moe_every")


def add_shape_arguments(g) -> None:
    """A custom Llama-style or mixture-of-experts model (with --hidden --layers --heads)."""
    g.add_argument("--family", choices=("gpt-neox", "llama"),
                   help="layer family of a custom model: gpt-neox (Eq. 1, default) or llama (RMSNorm, RoPE, SwiGLU, "
                        "grouped-query attention, no biases; needed by the options below)")
    g.add_argument("--kv-heads", type=int, metavar="N", help="key-value heads (grouped-query attention)")
    g.add_argument("--ffn", type=int, metavar="F", help="the dense MLP's hidden size (default 4h)")
    g.add_argument("--experts", type=int, metavar="E", help="routed experts per MoE layer")
    g.add_argument("--top-k", type=int, metavar="K", help="experts each token is routed to")
    g.add_argument("--expert-ffn", type=int, metavar="F", help="each expert's hidden size (default --ffn)")
    g.add_argument("--shared-experts", type=int, metavar="N", help="experts every token passes through")
    g.add_argument("--dense-layers", type=int, metavar="N", help="the first N layers keep a dense MLP")
    g.add_argument("--moe-every", type=int, metavar="N",
                   help="after them, every N-th layer is MoE and the others dense (Megatron-Core's moe_layer_freq)")


def add_parallel_arguments(g) -> None:
    """Context and expert parallelism (schemes cp and moe) and their options."""
    g.add_argument("--cp", type=int, default=1, metavar="C", help="context-parallel size (default 1)")
    g.add_argument("--cp-comm", choices=CP_COMMS, default="p2p",
                   help="context parallelism's communication, as Megatron-Core's cp_comm_type: p2p (ring "
                        "attention, default) or a2a (Ulysses)")
    g.add_argument("--ep", type=int, default=1, metavar="E", help="expert-parallel size (default 1)")
    g.add_argument("--etp", type=int, metavar="T", help="expert tensor-parallel size (default --tp, as Megatron-Core)")
    g.add_argument("--routing", metavar="PATTERN", default="uniform",
                   help="how routed tokens spread over the expert-parallel ranks, as run alltoallv --splits: "
                        "uniform (default), zipf:S, hot:K, or file:PATH (a router's histogram over the experts)")
    g.add_argument("--capacity-factor", type=float, metavar="F",
                   help="drop and pad each expert to F x its fair share of tokens (uniform all-to-alls); "
                        "default dropless (all-to-all-v)")
    g.add_argument("--distributed-optimizer", action="store_true",
                   help="Megatron-Core's distributed optimizer: gradients reduce-scattered per bucket and the updated "
                        "parameters all-gathered (each rank owns a shard; experts' over the expert data-parallel group)")
    g.add_argument("--recompute", choices=("full", "none"),
                   help="full activation recomputation (default: full for tp, sp, pp, 3d as Eq. 5; none for moe, cp)")


def check_bounds(args) -> None:
    for name, bound in BOUNDS.items():
        value = getattr(args, name, None)
        if value is not None and not 0 <= value <= bound:
            raise UsageError(f"--{name.replace('_', '-')} {value} is not between 0 and {bound}")


def shape_fields(args) -> dict:
    """The Model fields the shape options give (empty when none is given)."""
    given = {name: getattr(args, name) for name in SHAPE_FIELDS if getattr(args, name, None) is not None}
    family = getattr(args, "family", None)
    if given and family not in (None, "llama"):
        raise UsageError(f"--{next(iter(given)).replace('_', '-')} needs --family llama")
    if given or family == "llama":
        given["family"] = "llama"
    return given


def workload_fields(args) -> dict:
    """The Workload fields of expert and context parallelism."""
    recompute = getattr(args, "recompute", None)
    return {"cp": args.cp, "ep": args.ep, "etp": args.etp, "cp_comm": args.cp_comm,
            "capacity_factor": args.capacity_factor, "routing": splits.parse(args.routing),
            "recompute": None if recompute is None else recompute == "full",
            "distributed_optimizer": bool(getattr(args, "distributed_optimizer", False))}

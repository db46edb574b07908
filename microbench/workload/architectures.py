"""Decoder shapes after GPT-NeoX (issue 42): Llama-style layers (RMSNorm, RoPE, SwiGLU, grouped-query attention,
no biases), DeepSeek's multi-head latent attention, and mixture-of-experts MLPs, as parameter tensors.

``layer_tensors`` lists one layer's tensors as one tensor-parallel rank holds them (``t`` ways, Megatron-Core's
split: column-parallel layers split their output rows, row-parallel ones their input columns, norms, the router and
MLA's down-projections replicated), with a layer's experts as whole tensors named ``...moe.expert{j}.*`` so that
the expert-parallel schemes can take them apart (``is_expert``). Expert weights are never split by ``t``: experts
have their own tensor-parallel size (``etp``, workload/moe.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from microbench.workload.tensors import Tensor

# ``m`` below is a ``workload.model.Model`` (not imported: model.py builds on this module)


@dataclass(frozen=True)
class LatentAttention:
    """DeepSeek-V2/V3 multi-head latent attention (MLA): the query and key-value compression ranks and the
    per-head dimensions (DeepSeek-V3 technical report, arXiv 2412.19437, section 2.1.1 and 4.2)."""

    q_rank: int  #: d'_c, the query compression dimension (1536 in V3)
    kv_rank: int  #: d_c, the key-value compression dimension (512)
    rope_dim: int  #: d^R_h, the decoupled RoPE key/query dimension per head (64)
    nope_dim: int  #: the per-head query/key dimension without RoPE (128)
    v_dim: int  #: the per-head value dimension (128)


def is_expert(tensor_name: str) -> bool:
    """Whether a tensor is a routed expert's weight (reduced over the expert-data-parallel group)."""
    return ".moe.expert" in tensor_name


def is_moe_layer(m: "Model", index: int) -> bool:
    """Whether layer ``index`` (0-based) has a mixture-of-experts MLP: after the first ``dense_layers``, every
    ``moe_every``-th layer (Megatron-Core's moe_layer_freq N: layer i is MoE when i % N == 0)."""
    return m.experts > 0 and index >= m.dense_layers and (index - m.dense_layers) % m.moe_every == 0


def _swiglu(prefix: str, h: int, ffn: int, t: int) -> list[Tensor]:
    return [Tensor(prefix + "gate.weight", (ffn // t, h)), Tensor(prefix + "up.weight", (ffn // t, h)),
            Tensor(prefix + "down.weight", (h, ffn // t))]


def attention_tensors(m: "Model", p: str, t: int) -> list[Tensor]:
    """One layer's attention as a tensor-parallel rank holds it."""
    h, heads = m.hidden, m.heads
    if m.mla is None:
        hd = h // heads
        kv = m.kv_heads or heads
        return [Tensor(p + "attn.q.weight", (heads * hd // t, h)), Tensor(p + "attn.k.weight", (kv * hd // t, h)),
                Tensor(p + "attn.v.weight", (kv * hd // t, h)), Tensor(p + "attn.o.weight", (h, heads * hd // t))]
    a = m.mla
    return [Tensor(p + "attn.q_down.weight", (a.q_rank, h)), Tensor(p + "attn.q_norm.weight", (a.q_rank,)),
            Tensor(p + "attn.q_up.weight", (heads * (a.nope_dim + a.rope_dim) // t, a.q_rank)),
            Tensor(p + "attn.kv_down.weight", (a.kv_rank + a.rope_dim, h)),
            Tensor(p + "attn.kv_norm.weight", (a.kv_rank,)),
            Tensor(p + "attn.kv_up.weight", (heads * (a.nope_dim + a.v_dim) // t, a.kv_rank)),
            Tensor(p + "attn.o.weight", (h, heads * a.v_dim // t))]


def layer_tensors(m: "Model", index: int, t: int) -> list[Tensor]:
    """Layer ``index``'s tensors in forward order: norm, attention, norm, then its dense MLP or its MoE block
    (router, routed experts whole, shared experts split ``t`` ways as a dense MLP)."""
    h, p = m.hidden, f"layer{index}."
    out = [Tensor(p + "attn_norm.weight", (h,)), *attention_tensors(m, p, t), Tensor(p + "mlp_norm.weight", (h,))]
    if not is_moe_layer(m, index):
        return out + _swiglu(p + "mlp.", h, m.ffn_hidden, t)
    out.append(Tensor(p + "moe.router.weight", (m.experts, h)))
    for j in range(m.experts):
        out += _swiglu(f"{p}moe.expert{j}.", h, m.expert_ffn_hidden, 1)
    if m.shared_experts:
        out += _swiglu(p + "moe.shared.", h, m.shared_experts * m.expert_ffn_hidden, t)
    return out

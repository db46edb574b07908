"""Context parallelism: the attention's messages when the sequence is split cp ways (issue 42).

Two ways, as Megatron-Core's ``cp_comm_type`` names them and TransformerEngine runs them
(transformer_engine/pytorch/attention: AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndQKVOA2A):

- ``p2p``, ring attention (Liu et al. 2023, arXiv 2310.01889): each rank keeps its queries and passes its key-value
  chunk around the ring of cp ranks, sending to the next and receiving from the previous rank at each step
  (``flash_attn_p2p_communicate``: one batched isend/irecv of K and V packed together). Forward: cp - 1 steps per
  layer. Backward: cp steps, the first passing K, V, the middle ones K, V with the dK, dV accumulated so far
  (twice the bytes), the last dK, dV alone, so both travel cp - 1 hops;
- ``a2a``, DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509): all-to-alls turn the sequence-split
  q, k and v into head-split ones before the attention and the output back after it (``flash_attn_a2a_
  communicate``: one ``all_to_all_single`` per tensor); backward the same four in reverse, for their gradients.

Per token and tensor-parallel rank, a key-value pair holds ``kv_pair_elements`` (GQA: 2 x kv heads x head
dimension; MLA: heads x (nope + rope) for K and heads x v for V, as Megatron-Core's MLA attends on the
up-projected keys and values), a query ``query_elements`` and the attention's output ``output_elements``.
"""

from __future__ import annotations

from fractions import Fraction

from microbench.workload.distribution import Workload
from microbench.workload.messages import Message
from microbench.workload.model import Model

CP_RULES = {
    "p2p": "context parallelism p2p (ring attention; TransformerEngine AttnFuncWithCPAndKVP2P): per layer and "
           "microbatch, cp-1 sends (and their recvs) of the rank's K,V chunk of b*s/cp tokens to the next rank of "
           "the cp ring in forward; in backward cp sends: K,V, then (cp-2) of K,V with dK,dV (twice the bytes), "
           "then dK,dV; each chunk is two load-balanced halves of the sequence (s a multiple of 2 cp)",
    "a2a": "context parallelism a2a (DeepSpeed-Ulysses; TransformerEngine AttnFuncWithCPAndQKVOA2A): per layer and "
           "microbatch, all-to-alls of q, k and v before the attention and of its output after it (the block to "
           "each peer: the rank's b*s/cp tokens of the tensor over cp), the same four for the gradients in "
           "backward",
}


def head_dim(m: Model) -> int:
    return m.hidden // m.heads


def key_elements(m: Model, tp: int) -> int:
    """Elements of one token's K on one tensor-parallel rank."""
    return (m.heads * (m.mla.nope_dim + m.mla.rope_dim) if m.mla else (m.kv_heads or m.heads) * head_dim(m)) // tp


def value_elements(m: Model, tp: int) -> int:
    """Elements of one token's V on one tensor-parallel rank."""
    return (m.heads * m.mla.v_dim if m.mla else (m.kv_heads or m.heads) * head_dim(m)) // tp


def kv_pair_elements(m: Model, tp: int) -> int:
    """Elements of one token's K and V on one tensor-parallel rank."""
    return key_elements(m, tp) + value_elements(m, tp)


def query_elements(m: Model, tp: int) -> int:
    return (m.heads * (m.mla.nope_dim + m.mla.rope_dim) if m.mla else m.heads * head_dim(m)) // tp


def output_elements(m: Model, tp: int) -> int:
    return (m.heads * m.mla.v_dim if m.mla else m.heads * head_dim(m)) // tp


def _tokens(w: Workload) -> int:
    """The rank's tokens of one microbatch: b s / cp (every tensor-parallel rank holds all of them in attention)."""
    return w.micro_batch * w.model.seq // w.cp


def messages(w: Workload, layers: int) -> list[Message]:
    """The context-parallel calls of one rank for ``layers`` attention layers, every microbatch."""
    c, e, m = w.cp, w.element_bytes, w.model
    if c < 2:
        return []
    n = layers * w.microbatches
    tokens = _tokens(w)
    forwards = ("forward", "recompute") if w.full_recompute else ("forward",)
    if w.cp_comm == "p2p":
        kv = tokens * kv_pair_elements(m, w.tp) * e
        sends = [*((kv, c - 1, phase) for phase in forwards), (kv, 2, "backward"), (2 * kv, c - 2, "backward")]
        return [Message(what, size, count * n, c, phase, dimension="cp")
                for size, count, phase in sends if count for what in ("send", "recv")]
    per_token = (query_elements(m, w.tp), key_elements(m, w.tp), value_elements(m, w.tp), output_elements(m, w.tp))
    blocks = [tokens * x * e // c for x in per_token]
    return [Message("alltoall", block, n, c, phase, dimension="cp")
            for phase in (*forwards, "backward") for block in blocks]


def equation_bytes(w: Workload, layers: int) -> Fraction:
    """Eq. CP. p2p: 3 (cp-1) K,V chunks of b s/cp tokens per layer and microbatch (cp-1 in forward, 2 (cp-1) in
    backward, K,V and dK,dV; cp-1 more with full recomputation). a2a: q, k, v and the output of b s/cp tokens
    twice (forward and backward; three times with full recomputation), (cp-1)/cp of each leaving the rank."""
    c, e, m = w.cp, w.element_bytes, w.model
    if c < 2:
        return Fraction(0)
    n, tokens, r = layers * w.microbatches, _tokens(w), int(w.full_recompute)
    if w.cp_comm == "p2p":
        return Fraction(n * (3 + r) * (c - 1) * tokens * kv_pair_elements(m, w.tp) * e)
    per_token = query_elements(m, w.tp) + kv_pair_elements(m, w.tp) + output_elements(m, w.tp)
    return Fraction(n * (2 + r) * tokens * per_token * e * (c - 1), c)

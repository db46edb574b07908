"""A small GPT-style decoder whose parameters are exactly the workload model's (``parameter_tensors``).

Same tensors, same shapes, same registration order as ``microbench.workload.model.parameter_tensors`` with
``biases="full"`` (a real layer's QKV bias of 3h and MLP-in bias of 4h): learned word and position
embeddings, L pre-norm blocks (causal self-attention, a 4h GELU MLP), a final layer norm and an untied
output head. The order matters: DDP buckets, FSDP2 all-gathers and ZeRO partitions follow it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from microbench.workload.model import Model


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the heads are counted from the projection's width: a tensor-parallel rank holds heads / t of them
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.add_module("in", nn.Linear(hidden, 4 * hidden))
        self.out = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(getattr(self, "in")(x)))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embeddings(nn.Module):
    def __init__(self, vocab: int, seq: int, hidden: int):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq, hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.word(tokens) + self.position(positions)


class GPT(nn.Module):
    """Token ids (b, s) in, next-token logits (b, s, V) out."""

    def __init__(self, m: Model):
        super().__init__()
        self.embed = Embeddings(m.vocab, m.seq, m.hidden)
        self.layers = nn.ModuleList(Block(m.hidden, m.heads) for _ in range(m.layers))
        self.final_ln = nn.LayerNorm(m.hidden)
        self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.final_ln(x))


def loss_of(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy over all b x s positions (the tokens rolled by one: the last position predicts
    the first token, so every position has a target and the loss covers b*s, as Megatron-LM's does)."""
    return F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, dims=1).flatten())


def batch(m: Model, micro_batch: int, seed: int) -> torch.Tensor:
    """Random token ids (b, s), the same on every call with the same seed."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, m.vocab, (micro_batch, m.seq), generator=gen)

"""The transformer model and the communication-volume equations of Anthony et al. (2024), Eq. 1-5.

Variables as in the paper: a heads, b micro-batch, h hidden, L layers, s sequence, V vocabulary,
d data-parallel size, t tensor-parallel size, p pipeline size. Volumes are in elements per rank per
iteration (Eq. 4: summed over all pipeline stages) and are exact fractions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from microbench.errors import UsageError
from microbench.workload.architectures import LatentAttention, is_expert, is_moe_layer, layer_tensors
from microbench.workload.tensors import Tensor

#: GPT-NeoX configurations used in the paper: name -> (layers, hidden, heads).
PRESETS: dict[str, tuple[int, int, int]] = {
    "19M": (6, 512, 8),
    "125M": (12, 768, 12),
    "1.3B": (24, 2048, 16),
    "13B": (40, 5120, 40),
}
DEFAULT_SEQ = 2048
DEFAULT_VOCAB = 50304  # GPT-NeoX's 50277 tokens padded

#: How a layer's bias and norm vectors are counted: "eq1" as the paper's Eq. 1 (eight h-element vectors per
#: layer, replicated under tensor parallelism); "full" as a real GPT layer has them (QKV bias 3h, MLP-in bias
#: 4h: 13h per layer; the column-parallel biases split t ways under tensor parallelism, as Megatron-LM's
#: ColumnParallelLinear and torch's ColwiseParallel split them).
BIAS_LAYOUTS = ("eq1", "full")
#: layer families: GPT-NeoX as the paper counts it (Eq. 1), or Llama-style (RMSNorm, RoPE, SwiGLU, grouped-query or
#: latent attention, no biases, optional mixture-of-experts MLPs; workload/architectures.py)
FAMILIES = ("gpt-neox", "llama")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer with untied input and output embeddings."""

    hidden: int
    layers: int
    heads: int
    seq: int = DEFAULT_SEQ
    vocab: int = DEFAULT_VOCAB
    name: str | None = None
    biases: str = "eq1"  #: one of BIAS_LAYOUTS
    # ---- issue 42: Llama-style and mixture-of-experts shapes (the defaults are the paper's GPT-NeoX)
    family: str = "gpt-neox"  #: one of FAMILIES
    kv_heads: int | None = None  #: grouped-query attention's key-value heads (None: as many as --heads)
    ffn: int | None = None  #: the dense MLP's hidden size (None: 4h)
    experts: int = 0  #: routed experts per MoE layer (0: a dense model)
    top_k: int = 0  #: experts each token is routed to
    expert_ffn: int | None = None  #: each expert's hidden size (None: the dense MLP's)
    shared_experts: int = 0  #: experts every token passes through (DeepSeek's shared experts)
    dense_layers: int = 0  #: the first layers keep a dense MLP (DeepSeek-V3: 3)
    moe_every: int = 1  #: after them, every moe_every-th layer is MoE, the others dense (Megatron-Core moe_layer_freq)
    mla: LatentAttention | None = None  #: DeepSeek's multi-head latent attention instead of grouped-query
    source: str | None = None  #: where a preset's shape was published

    def __post_init__(self):
        if self.biases not in BIAS_LAYOUTS:
            raise UsageError(f"unknown bias layout {self.biases!r}: choose from {', '.join(BIAS_LAYOUTS)}")
        for field in ("hidden", "layers", "heads", "seq", "vocab"):
            if getattr(self, field) < 1:
                raise UsageError(f"--{field} must be a positive whole number, not {getattr(self, field)}")
        if self.hidden % self.heads:
            raise UsageError(f"--hidden ({self.hidden}) must be a multiple of --heads ({self.heads})")
        if self.family not in FAMILIES:
            raise UsageError(f"unknown model family {self.family!r}: choose from {', '.join(FAMILIES)}")
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise UsageError(f"--kv-heads ({self.kv_heads}) must divide --heads ({self.heads})")
        if self.experts < 0 or (self.experts and not 1 <= self.top_k <= self.experts):
            raise UsageError(f"--top-k ({self.top_k}) must be between 1 and --experts ({self.experts})")
        if self.moe_every < 1:
            raise UsageError(f"--moe-every must be at least 1 (got {self.moe_every})")
        if not 0 <= self.dense_layers <= self.layers:
            raise UsageError(f"--dense-layers ({self.dense_layers}) must be between 0 and --layers ({self.layers})")
        if self.family == "gpt-neox" and (self.experts or self.mla or self.kv_heads or self.ffn):
            raise UsageError("GPT-NeoX layers (Eq. 1) have no experts, latent or grouped-query attention or other "
                             "MLP size: use the llama family")

    @property
    def ffn_hidden(self) -> int:
        """The dense MLP's hidden size."""
        return self.ffn or 4 * self.hidden

    @property
    def expert_ffn_hidden(self) -> int:
        """One expert's hidden size."""
        return self.expert_ffn or self.ffn_hidden

    def describe(self) -> str:
        dims = f"L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq}, V={self.vocab}"
        if self.family != "gpt-neox":
            attention = "MLA" if self.mla else f"GQA {self.kv_heads or self.heads} kv heads"
            dims += f", {attention}, SwiGLU ffn {self.ffn_hidden}"
            if self.experts:
                dims += (f", MoE {self.experts} experts top-{self.top_k} ffn {self.expert_ffn_hidden}"
                         + (f" + {self.shared_experts} shared" if self.shared_experts else "")
                         + (f", first {self.dense_layers} layers dense" if self.dense_layers else "")
                         + (f", MoE every {self.moe_every} layers" if self.moe_every > 1 else ""))
            return f"{self.name or 'custom model'} ({dims})" + (f"; shape from {self.source}" if self.source else "")
        if self.biases == "full":
            dims += ", full biases: 13h vectors per layer"
        return f"{self.name} GPT-NeoX ({dims})" if self.name else f"custom model ({dims})"


#: Published shapes of models trained since (issue 42), each with its source (docs/workload.md); the sequence length
#: is the published pre-training context (Llama 3: 8192, Mixtral: 32768, DeepSeek-V3: 4096).
LLAMA3_SOURCE = ("Llama Team, The Llama 3 Herd of Models, arXiv 2407.21783, Table 3; "
                 "meta-llama/Meta-Llama-3-{size} config.json")
MODERN_PRESETS: dict[str, Model] = {
    # 32 layers, model dimension 4096, FFN 14336, 32 heads, 8 key/value heads, vocabulary 128,000 (128256)
    "llama3-8b": Model(4096, 32, 32, 8192, 128256, "llama3-8b", family="llama", kv_heads=8, ffn=14336,
                       source=LLAMA3_SOURCE.format(size="8B")),
    # 80 layers, 8192, FFN 28672, 64 heads, 8 key/value heads
    "llama3-70b": Model(8192, 80, 64, 8192, 128256, "llama3-70b", family="llama", kv_heads=8, ffn=28672,
                        source=LLAMA3_SOURCE.format(size="70B")),
    # dim 4096, n_layers 32, head_dim 128, hidden_dim 14336, n_heads 32, n_kv_heads 8, context 32768,
    # vocab 32000, num_experts 8, top_k_experts 2
    "mixtral-8x7b": Model(4096, 32, 32, 32768, 32000, "mixtral-8x7b", family="llama", kv_heads=8, ffn=14336,
                          experts=8, top_k=2, source="Jiang et al., Mixtral of Experts, arXiv 2401.04088, Table 1"),
    # 61 layers, hidden 7168, 128 heads of 128 (+64 RoPE), d_c 512, d'_c 1536, the first three layers dense
    # (FFN 18432), then 1 shared + 256 routed experts of 2048, 8 activated; vocabulary 129280 (config.json)
    "deepseek-v3": Model(7168, 61, 128, 4096, 129280, "deepseek-v3", family="llama", ffn=18432, experts=256,
                         top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3,
                         mla=LatentAttention(q_rank=1536, kv_rank=512, rope_dim=64, nope_dim=128, v_dim=128),
                         source="DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv 2412.19437, sections 2.1 and 4.2; "
                                "deepseek-ai/DeepSeek-V3 config.json"),
}
#: every --model name
MODEL_NAMES = (*PRESETS, *MODERN_PRESETS)


def preset(name: str, seq: int | None = None, vocab: int | None = None) -> Model:
    """One of the paper's GPT-NeoX models or a published modern shape, optionally with another sequence length
    or vocabulary."""
    if name in MODERN_PRESETS:
        found = MODERN_PRESETS[name]
        return replace(found, seq=found.seq if seq is None else seq, vocab=found.vocab if vocab is None else vocab)
    if name not in PRESETS:
        raise UsageError(f"unknown model {name!r}: choose from {', '.join(MODEL_NAMES)} or give --hidden --layers "
                         f"--heads")
    layers, hidden, heads = PRESETS[name]
    return Model(hidden, layers, heads, DEFAULT_SEQ if seq is None else seq,
                 DEFAULT_VOCAB if vocab is None else vocab, name)


def layer_vectors(m: Model) -> int:
    """Elements of one layer's bias and norm vectors, in units of h: 8 (Eq. 1) or 13 (a real GPT layer)."""
    return 13 if m.biases == "full" else 8


def parameter_count(m: Model) -> int:
    """Eq. 1: params = 2Vh + sh + L(12h^2 + 8h) + 2h (untied embeddings, learned positions); with
    ``biases="full"`` each layer has its real 13h of vectors instead of 8h. A Llama-family model: the sum of its
    tensors (untied embeddings, RoPE: no position table, one final RMSNorm)."""
    if m.family != "gpt-neox":
        return sum(t.numel for t in parameter_tensors(m))
    h = m.hidden
    return 2 * m.vocab * h + m.seq * h + m.layers * (12 * h * h + layer_vectors(m) * h) + 2 * h


def parameter_tensors(m: Model, tp: int = 1, layers: int | None = None,
                      first_stage: bool = True, last_stage: bool = True) -> list[Tensor]:
    """The parameters one rank holds, in forward order, so that the whole model sums to Eq. 1.

    Per layer: four weight matrices (QKV 3h x h, attention output h x h, MLP in 4h x h, MLP out h x 4h)
    and eight h-element vectors (Eq. 1's 8h: two layer norms' weight and bias, four biases). With
    tensor parallelism ``tp`` the matrices and the vocabulary are split ``tp`` ways and the vectors are
    replicated (Megatron-LM); ``layers`` is the number of layers on this pipeline stage. With
    ``biases="full"`` the QKV bias has 3h elements and the MLP-in bias 4h, both split ``tp`` ways.
    """
    if m.family != "gpt-neox":
        return _llama_tensors(m, tp, layers, first_stage, last_stage)
    h, t = m.hidden, tp
    qkv_bias, mlp_bias = ((3 * h // t,), (4 * h // t,)) if m.biases == "full" else ((h,), (h,))
    n_layers = m.layers if layers is None else layers
    out: list[Tensor] = []
    if first_stage:
        out += [Tensor("embed.word", (m.vocab // t, h)), Tensor("embed.position", (m.seq, h))]
    for i in range(n_layers):
        p = f"layer{i}."
        out += [Tensor(p + "ln1.weight", (h,)), Tensor(p + "ln1.bias", (h,)),
                Tensor(p + "attn.qkv.weight", (3 * h // t, h)), Tensor(p + "attn.qkv.bias", qkv_bias),
                Tensor(p + "attn.out.weight", (h, h // t)), Tensor(p + "attn.out.bias", (h,)),
                Tensor(p + "ln2.weight", (h,)), Tensor(p + "ln2.bias", (h,)),
                Tensor(p + "mlp.in.weight", (4 * h // t, h)), Tensor(p + "mlp.in.bias", mlp_bias),
                Tensor(p + "mlp.out.weight", (h, 4 * h // t)), Tensor(p + "mlp.out.bias", (h,))]
    if last_stage:
        out += [Tensor("final_ln.weight", (h,)), Tensor("final_ln.bias", (h,)),
                Tensor("lm_head.weight", (m.vocab // t, h))]
    return out


def _llama_tensors(m: Model, tp: int, layers: int | None, first_stage: bool, last_stage: bool) -> list[Tensor]:
    """A Llama-family rank's tensors (workload/architectures.py): the word embedding, its layers (the first
    ``layers``, or all), the final RMSNorm and the output layer (untied), matrices and vocabulary split ``tp`` ways."""
    out = [Tensor("embed.word", (m.vocab // tp, m.hidden))] if first_stage else []
    for i in range(m.layers if layers is None else layers):
        out += layer_tensors(m, i, tp)
    if last_stage:
        out += [Tensor("final_norm.weight", (m.hidden,)), Tensor("lm_head.weight", (m.vocab // tp, m.hidden))]
    return out


def active_parameter_count(m: Model) -> int:
    """Parameters one token passes through: every tensor but the routed experts, plus top-k experts per MoE layer
    (the compute of a mixture-of-experts model; every parameter of a dense one)."""
    tensors = parameter_tensors(m)
    dense = sum(x.numel for x in tensors if not is_expert(x.name))
    per_expert = 3 * m.hidden * m.expert_ffn_hidden if m.experts else 0
    moe_layers = sum(1 for i in range(m.layers) if is_moe_layer(m, i))
    return dense + moe_layers * m.top_k * per_expert


# ------------------------------------------------------------------------------ Eq. 2-5 (elements)
def eq2_data_parallel(params: int, d: int) -> Fraction:
    """Eq. 2 (DDP, ZeRO-1, ZeRO-2): 2 * params * (d-1)/d elements per rank per iteration."""
    return Fraction(2 * params * (d - 1), d)


def eq3_zero3(params: int, d: int) -> Fraction:
    """Eq. 3 (ZeRO-3): 3 * params * (d-1)/d elements per rank per iteration."""
    return Fraction(3 * params * (d - 1), d)


def eq4_pipeline(m: Model, b: int, p: int, microbatches: int = 1) -> Fraction:
    """Eq. 4: 2bsh(p-1) elements per microbatch, summed over all stages."""
    return Fraction(2 * b * m.seq * m.hidden * (p - 1) * microbatches)


def eq5_tensor(m: Model, b: int, t: int, layers: int | None = None, microbatches: int = 1) -> Fraction:
    """Eq. 5: (12L + 2) * bsh * (t-1)/t elements per rank per microbatch (L/p layers in 3D)."""
    n_layers = m.layers if layers is None else layers
    return Fraction((12 * n_layers + 2) * b * m.seq * m.hidden * (t - 1) * microbatches, t)

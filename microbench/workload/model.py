"""The transformer model and the communication-volume equations of Anthony et al. (2024), Eq. 1-5.

Variables as in the paper: a heads, b micro-batch, h hidden, L layers, s sequence, V vocabulary,
d data-parallel size, t tensor-parallel size, p pipeline size. Volumes are in elements per rank per
iteration (Eq. 4: summed over all pipeline stages) and are exact fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from microbench.errors import UsageError

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

    def __post_init__(self):
        if self.biases not in BIAS_LAYOUTS:
            raise UsageError(f"unknown bias layout {self.biases!r}: choose from {', '.join(BIAS_LAYOUTS)}")
        for field in ("hidden", "layers", "heads", "seq", "vocab"):
            if getattr(self, field) < 1:
                raise UsageError(f"--{field} must be a positive whole number, not {getattr(self, field)}")
        if self.hidden % self.heads:
            raise UsageError(f"--hidden ({self.hidden}) must be a multiple of --heads ({self.heads})")

    def describe(self) -> str:
        dims = f"L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq}, V={self.vocab}"
        if self.biases == "full":
            dims += ", full biases: 13h vectors per layer"
        return f"{self.name} GPT-NeoX ({dims})" if self.name else f"custom model ({dims})"


def preset(name: str, seq: int | None = None, vocab: int | None = None) -> Model:
    """One of the paper's GPT-NeoX models, optionally with another sequence length or vocabulary."""
    if name not in PRESETS:
        raise UsageError(f"unknown model {name!r}: choose from {', '.join(PRESETS)} or give --hidden --layers --heads")
    layers, hidden, heads = PRESETS[name]
    return Model(hidden, layers, heads, DEFAULT_SEQ if seq is None else seq,
                 DEFAULT_VOCAB if vocab is None else vocab, name)


def layer_vectors(m: Model) -> int:
    """Elements of one layer's bias and norm vectors, in units of h: 8 (Eq. 1) or 13 (a real GPT layer)."""
    return 13 if m.biases == "full" else 8


def parameter_count(m: Model) -> int:
    """Eq. 1: params = 2Vh + sh + L(12h^2 + 8h) + 2h (untied embeddings, learned positions); with
    ``biases="full"`` each layer has its real 13h of vectors instead of 8h."""
    h = m.hidden
    return 2 * m.vocab * h + m.seq * h + m.layers * (12 * h * h + layer_vectors(m) * h) + 2 * h


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor: its name and shape (rows, cols) or (n,) for vectors."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


def parameter_tensors(m: Model, tp: int = 1, layers: int | None = None,
                      first_stage: bool = True, last_stage: bool = True) -> list[Tensor]:
    """The parameters one rank holds, in forward order, so that the whole model sums to Eq. 1.

    Per layer: four weight matrices (QKV 3h x h, attention output h x h, MLP in 4h x h, MLP out h x 4h)
    and eight h-element vectors (Eq. 1's 8h: two layer norms' weight and bias, four biases). With
    tensor parallelism ``tp`` the matrices and the vocabulary are split ``tp`` ways and the vectors are
    replicated (Megatron-LM); ``layers`` is the number of layers on this pipeline stage. With
    ``biases="full"`` the QKV bias has 3h elements and the MLP-in bias 4h, both split ``tp`` ways.
    """
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

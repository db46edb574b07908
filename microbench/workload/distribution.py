"""A workload (model, scheme, parallel sizes) and the message distribution built for it.

A distribution carries the messages, the equation's volume for the scheme, the phases the equation
leaves out, and every named departure of the messages from the equation, so that
``wire(messages in the equation's phases) == equation + sum(departures)`` holds exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from microbench.benchmarks.dtypes import get_dtype
from microbench.benchmarks.splits import UNIFORM, SplitPattern
from microbench.errors import UsageError
from microbench.workload.messages import Message, total_wire
from microbench.workload.model import Model, parameter_count

#: Training precisions (names as microbench.benchmarks.dtypes knows them).
TRAINING_DTYPES = ("bf16", "fp16", "fp32")

DATA_PARALLEL_SCHEMES = ("ddp", "fsdp2", "zero1", "zero2", "zero3", "zeropp")
MODEL_PARALLEL_SCHEMES = ("tp", "sp", "pp", "3d")
#: issue 42: Megatron-Core's expert (moe) and context (cp) parallelism, with tp, pp and dp: 4D and 5D layouts
MEGATRON_CORE_SCHEMES = ("moe", "cp")
SCHEMES = DATA_PARALLEL_SCHEMES + MODEL_PARALLEL_SCHEMES + MEGATRON_CORE_SCHEMES
#: context parallelism's communication (Megatron-Core's cp_comm_type): p2p (ring attention), a2a (Ulysses)
CP_COMMS = ("p2p", "a2a")

COUNT_RULE = ("count is calls per iteration made by one rank of the group; pipeline send/recv counts are "
              "summed over all p stages, as Eq. 4 sums its volume; setup counts are per training run")


@dataclass(frozen=True)
class Workload:
    """What is trained and how: the model, the scheme and its parallel sizes, the batch and the precision."""

    model: Model
    scheme: str
    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch: int = 4
    microbatches: int = 1
    dtype: str = "bf16"
    node_size: int = 8  #: ranks per node: ZeRO++'s hpZ partition and qgZ intra-node all-to-all group
    # ---- issue 42: expert and context parallelism (schemes moe and cp)
    cp: int = 1  #: context-parallel size (the sequence split cp ways)
    ep: int = 1  #: expert-parallel size (the experts split ep ways)
    etp: int | None = None  #: expert tensor-parallel size (each expert split etp ways; None: --tp, Megatron-Core's)
    capacity_factor: float | None = None  #: None: dropless routing (all-to-all-v); else drop and pad to capacity
    routing: SplitPattern = UNIFORM  #: how routed tokens spread over the expert-parallel ranks (--routing)
    cp_comm: str = "p2p"  #: one of CP_COMMS
    recompute: bool | None = None  #: full activation recomputation (None: tp, sp, pp, 3d yes; moe, cp no)
    distributed_optimizer: bool = False  #: Megatron-Core's distributed optimizer (moe, cp): sharded buckets

    @property
    def full_recompute(self) -> bool:
        """Whether the forward is run again in backward (Eq. 5 assumes so; Megatron-Core MoE runs seldom do)."""
        return self.recompute if self.recompute is not None else self.scheme not in MEGATRON_CORE_SCHEMES

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel size (Megatron-Core: --tp unless set)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """The expert-data-parallel size: tp x cp x dp ranks per stage over etp x ep (Megatron-Core)."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def element_bytes(self) -> int:
        return get_dtype(self.dtype).itemsize

    @property
    def params(self) -> int:
        return parameter_count(self.model)

    def validate(self) -> None:
        """Raise UsageError for a combination no framework runs."""
        s, m = self.scheme, self.model
        if s not in SCHEMES:
            raise UsageError(f"unknown scheme {s!r}: choose from {', '.join(SCHEMES)}")
        if self.dtype not in TRAINING_DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}: choose from {', '.join(TRAINING_DTYPES)}")
        for name in ("dp", "tp", "pp", "micro_batch", "microbatches", "node_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        if s in DATA_PARALLEL_SCHEMES:
            if self.dp < 2:
                raise UsageError(f"--scheme {s} needs --dp of at least 2 (the data-parallel size)")
            if self.tp != 1 or self.pp != 1:
                raise UsageError(f"--scheme {s} models pure data parallelism: leave --tp and --pp at 1 "
                                 "(use --scheme 3d for tensor and pipeline parallelism)")
            if self.microbatches != 1:
                raise UsageError("--microbatches counts pipeline microbatches: it applies to tp, sp, pp and 3d")
        for name in ("cp", "ep", "etp"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UsageError(f"--{name} must be at least 1, not {getattr(self, name)}")
        if s in MEGATRON_CORE_SCHEMES:
            self._validate_megatron_core()
        elif (self.cp, self.ep, self.etp) != (1, 1, None) or self.capacity_factor is not None \
                or self.routing != UNIFORM or self.distributed_optimizer:
            raise UsageError("--cp, --ep, --etp, --capacity-factor, --routing and --distributed-optimizer apply to "
                             "--scheme moe and cp")
        if s in ("tp", "sp") and (self.tp < 2 or self.pp != 1):
            raise UsageError(f"--scheme {s} needs --tp of at least 2 and --pp 1 (use --scheme 3d for both)")
        if s == "pp" and (self.pp < 2 or self.tp != 1):
            raise UsageError("--scheme pp needs --pp of at least 2 and --tp 1 (use --scheme 3d for both)")
        if s == "3d" and (self.tp < 2 or self.pp < 2):
            raise UsageError("--scheme 3d needs --tp and --pp of at least 2 (--dp adds data parallelism)")
        if m.hidden % self.tp or m.heads % self.tp or m.vocab % self.tp:
            raise UsageError(f"--tp {self.tp} must divide --hidden ({m.hidden}), --heads ({m.heads}) "
                             f"and --vocab ({m.vocab})")
        if m.layers % self.pp:
            raise UsageError(f"--pp {self.pp} must divide --layers ({m.layers})")
        if s == "zeropp" and self.dp > self.node_size and self.dp % self.node_size:
            raise UsageError(f"--dp ({self.dp}) must be a multiple of --node-size ({self.node_size}) for zeropp")


    def _validate_megatron_core(self) -> None:
        """moe and cp: what Megatron-Core (and TransformerEngine's context-parallel attention) accept."""
        m, s = self.model, self.scheme
        if s == "moe" and not m.experts:
            raise UsageError("--scheme moe needs a mixture-of-experts model (--model mixtral-8x7b, deepseek-v3, or "
                             "--experts N --top-k K)")
        if s == "cp" and self.cp < 2:
            raise UsageError("--scheme cp needs --cp of at least 2 (the context-parallel size)")
        if not m.experts and (self.ep != 1 or self.etp is not None):
            raise UsageError("--ep and --etp apply to a mixture-of-experts model")
        if m.experts and m.experts % self.ep:
            raise UsageError(f"--ep {self.ep} must divide the experts ({m.experts})")
        etp = self.expert_tp
        if (self.tp * self.cp * self.dp) % (etp * self.ep):
            raise UsageError(f"--etp {etp} x --ep {self.ep} must divide --tp {self.tp} x --cp {self.cp} x "
                             f"--dp {self.dp} (Megatron-Core carves the expert groups out of those ranks)")
        if m.experts and m.expert_ffn_hidden % etp:
            raise UsageError(f"--etp {etp} must divide the experts' hidden size ({m.expert_ffn_hidden})")
        if self.cp_comm not in CP_COMMS:
            raise UsageError(f"unknown --cp-comm {self.cp_comm!r}: choose from {', '.join(CP_COMMS)}")
        chunks = 2 * self.cp if self.cp > 1 and self.cp_comm == "p2p" else self.cp
        if m.seq % (chunks * self.tp):
            raise UsageError(f"--seq ({m.seq}) must be a multiple of {chunks * self.tp} (the sequence is cut into "
                             f"{'2 x cp load-balanced chunks' if chunks != self.cp else 'cp chunks'}, each split "
                             f"over tp ranks by sequence parallelism)")
        if self.cp > 1 and self.cp_comm == "a2a":
            kv = m.kv_heads or m.heads
            if (m.heads // self.tp) % self.cp or (m.mla is None and (kv // self.tp) % self.cp):
                raise UsageError(f"--cp-comm a2a (Ulysses) splits the attention heads of each tp rank cp ways: "
                                 f"--cp {self.cp} must divide {m.heads // self.tp} query heads"
                                 + (f" and {kv // self.tp} key-value heads" if m.mla is None else ""))
        if m.kv_heads and m.kv_heads % self.tp:
            raise UsageError(f"--tp {self.tp} must divide the key-value heads ({m.kv_heads})")
        if self.capacity_factor is not None and not 0 < self.capacity_factor <= 1e3:
            raise UsageError(f"--capacity-factor must be a positive number up to 1000 (got {self.capacity_factor})")
        self.routing.check_ranks(self.ep)


@dataclass
class Departure:
    """A named, signed difference (bytes per rank per iteration) between the messages and the equation."""

    reason: str
    bytes: Fraction


@dataclass
class Distribution:
    """The messages of one workload, with the equation they are checked against."""

    workload: Workload
    equation: str
    volume_elements: Fraction
    volume_bytes: Fraction
    messages: list[Message]
    excluded_phases: tuple[str, ...] = ("setup",)
    departures: list[Departure] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def check(self) -> dict:
        """Wire bytes of the messages against the equation: residual is 0 when every difference is named."""
        phases = {m.phase for m in self.messages}
        in_equation = phases - set(self.excluded_phases)
        messages = total_wire(self.messages, in_equation)
        departures = sum((d.bytes for d in self.departures), Fraction(0))
        return {
            "message_bytes": messages,
            "equation_bytes": self.volume_bytes,
            "departures": [{"reason": d.reason, "bytes": d.bytes} for d in self.departures],
            "excluded_phases": {p: total_wire(self.messages, [p]) for p in self.excluded_phases if p in phases},
            "residual_bytes": messages - self.volume_bytes - departures,
        }


def parallel_dimension(message: Message, scheme: str) -> str:
    """The parallel dimension a modelled message belongs to: "dp" (data), "tp" (tensor) or "pp" (pipeline).

    Data-parallel schemes only have "dp"; the Megatron-LM builder puts its data-parallel gradient reduction
    (and its setup broadcast) in the ``gradients`` and ``setup`` phases and its pipeline traffic in send/recv.
    The Megatron-Core schemes (moe, cp) name each message's dimension (tp, cp, ep, etp, dp, edp, pp).
    """
    if message.dimension is not None:
        return message.dimension
    if scheme in DATA_PARALLEL_SCHEMES or message.phase in ("gradients", "setup"):
        return "dp"
    return "pp" if message.collective in ("send", "recv") else "tp"


def per_parameter_broadcasts(sizes: list[int], element_bytes: int, group: int) -> list[Message]:
    """Start-of-training broadcast of every parameter from rank 0, one call each (DeepSpeed, Megatron-LM)."""
    return [Message("broadcast", n * element_bytes, 1, group, "setup") for n in sizes]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)

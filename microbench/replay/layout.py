"""Which ranks form each communicator of a job: Megatron-Core's rank order (``parallel_state.RankGenerator``).

Dense layers: order tp-cp-dp-pp (``initialize_model_parallel(order="tp-cp-ep-dp-pp")`` with ep 1), tensor-parallel
ranks fastest and pipeline stages slowest:

    rank = tp_index + tp * (cp_index + cp * (dp_index + dp * pp_index))

Experts: the same order over etp-ep-edp-pp (a second generator of the same world, expert tensor-parallel size etp,
expert-parallel size ep, expert-data-parallel size edp = tp cp dp / (etp ep)):

    rank = etp_index + etp * (ep_index + ep * (edp_index + edp * pp_index))

A group of a kind holds the ranks that differ only along its dimensions, in increasing order (the ring of a
context-parallel group runs in that order). Kinds: tp, cp, dp, pp, dp_cp (the data-parallel group with context
parallelism, where dense gradients are reduced), and for experts ep, etp, edp and tp_ep (etp x ep, where the
dropless dispatcher gathers its token counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from microbench.errors import UsageError

#: the dimensions of every kind of group, and the generator (dense or expert) that makes it
DENSE_KINDS = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "pp": ("pp",), "dp_cp": ("cp", "dp")}
EXPERT_KINDS = {"ep": ("ep",), "etp": ("etp",), "edp": ("edp",), "tp_ep": ("etp", "ep")}
KINDS = tuple(DENSE_KINDS) + tuple(EXPERT_KINDS)


@dataclass(frozen=True)
class Layout:
    """Parallel sizes of one job; ``world`` = tp * cp * dp * pp ranks (etp * ep * edp * pp for the experts)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    experts: bool = False  #: the model has experts: its expert groups are built even at ep = etp = 1

    def __post_init__(self):
        if (self.tp * self.cp * self.dp) % (self.etp * self.ep):
            raise UsageError(f"--etp {self.etp} x --ep {self.ep} must divide --tp {self.tp} x --cp {self.cp} x "
                             f"--dp {self.dp}")

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def edp(self) -> int:
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds a job of this layout uses: tp, pp and dp always, cp and dp_cp with context parallelism, the
        expert kinds with expert (tensor) parallelism."""
        out = ["tp", "pp", "dp"]
        if self.cp > 1:
            out += ["cp", "dp_cp"]
        if self.experts or self.ep * self.etp > 1:
            out += list(EXPERT_KINDS)
        return tuple(out)

    def check(self, world_size: int) -> None:
        """Raise UsageError unless the layout fills exactly ``world_size`` ranks."""
        if self.world != world_size:
            parts = " x ".join(f"--{k} {getattr(self, k)}" for k in ("tp", "pp", "dp", "cp")
                               if k != "cp" or self.cp > 1)
            raise UsageError(f"{parts} = {self.world} ranks, but the job has {world_size}")

    def _dims(self, kind: str) -> list[tuple[str, int]]:
        """The generator's (dimension, size), fastest first, that makes groups of ``kind``."""
        if kind in EXPERT_KINDS:
            return [("etp", self.etp), ("ep", self.ep), ("edp", self.edp), ("pp", self.pp)]
        return [("tp", self.tp), ("cp", self.cp), ("dp", self.dp), ("pp", self.pp)]

    def coordinates(self, rank: int, expert: bool = False) -> dict[str, int]:
        """This rank's index along each dimension of the dense generator (or the expert one)."""
        out, rest = {}, rank
        for name, size in self._dims("ep" if expert else "tp"):
            out[name] = rest % size
            rest //= size
        return out

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of one kind, each as its ranks in increasing order."""
        if kind not in KINDS:
            raise ValueError(f"unknown group kind {kind!r}")
        dims = self._dims(kind)
        inside = (DENSE_KINDS | EXPERT_KINDS)[kind]
        strides, stride = {}, 1
        for name, size in dims:
            strides[name] = stride
            stride *= size
        outer = [(n, s) for n, s in dims if n not in inside]
        inner = [(n, s) for n, s in dims if n in inside]
        out = []
        for fixed in product(*(range(s) for _, s in outer)):
            base = sum(i * strides[n] for (n, _), i in zip(outer, fixed))
            ranks = sorted(base + sum(i * strides[n] for (n, _), i in zip(inner, idx))
                           for idx in product(*(range(s) for _, s in inner)))
            out.append(tuple(ranks))
        return sorted(out)

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The ranks of ``rank``'s group of one kind."""
        return next(g for g in self.groups(kind) if rank in g)

    def size(self, kind: str) -> int:
        """Ranks in a group of ``kind``."""
        return len(self.groups(kind)[0])

"""Which ranks form each communicator of a Megatron-LM layout: rank order TP fastest, then PP, then DP.

rank = dp_index * (tp * pp) + pp_index * tp + tp_index, so a tensor-parallel group is ``tp`` consecutive
ranks, a pipeline group strides by ``tp`` and a data-parallel group strides by ``tp * pp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from microbench.errors import UsageError

KINDS = ("tp", "pp", "dp")


@dataclass(frozen=True)
class Layout:
    """Parallel sizes of one job; ``world`` = tp * pp * dp ranks."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def check(self, world_size: int) -> None:
        """Raise UsageError unless the layout fills exactly ``world_size`` ranks."""
        if self.world != world_size:
            raise UsageError(f"--tp {self.tp} x --pp {self.pp} x --dp {self.dp} = {self.world} ranks, "
                             f"but the job has {world_size}")

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along each dimension."""
        return {"tp": rank % self.tp, "pp": rank // self.tp % self.pp, "dp": rank // (self.tp * self.pp)}

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of one kind (``tp``, ``pp`` or ``dp``), each as its ranks in increasing order."""
        if kind not in KINDS:
            raise ValueError(f"unknown group kind {kind!r}")
        seen: dict[tuple, list[int]] = {}
        for rank in range(self.world):
            c = self.coordinates(rank)
            key = tuple(v for k, v in c.items() if k != kind)
            seen.setdefault(key, []).append(rank)
        return [tuple(g) for g in seen.values()]

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The ranks of ``rank``'s group of one kind."""
        return next(g for g in self.groups(kind) if rank in g)

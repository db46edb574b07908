"""One parameter tensor: its name and shape (the leaf every model description builds on)."""

from __future__ import annotations

from dataclasses import dataclass


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

"""Element types the benchmarks move and reduce."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

from microbench.errors import UsageError


@dataclass(frozen=True)
class DType:
    """An element type: its name, size in bytes, numpy type (``numpy``: None where numpy has none)."""

    name: str
    itemsize: int
    #: Largest integer every value up to which the type holds exactly (sums in --check stay below it).
    exact_int_limit: int

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy type; bfloat16's is looked up the first time it is asked for (ml_dtypes is imported then)."""
        return _numpy_dtype(self.name)


@functools.cache
def _numpy_dtype(name: str) -> np.dtype | None:
    import numpy as np

    if name != "bfloat16":
        return np.dtype(name)
    try:  # numpy has no bfloat16; ml_dtypes (installed with the torch extra) provides one
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 4, 2**24),
        DType("float64", 8, 2**53),
        DType("float16", 2, 2**11),
        DType("bfloat16", 2, 2**8),
        DType("int32", 4, 2**31 - 1),
        DType("int64", 8, 2**63 - 1),
        DType("int8", 1, 127),
        DType("uint8", 1, 255),
    )
}

_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "bf16": "bfloat16", "fp16": "float16",
            "fp32": "float32", "fp64": "float64", "int": "int32", "char": "int8", "byte": "uint8"}

OPS = ("sum", "max", "min")


def get_dtype(name: str) -> DType:
    """Look up an element type by name or common alias (float, double, bf16, char, byte)."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}: choose from {', '.join(DTYPES)}")
    return DTYPES[key]

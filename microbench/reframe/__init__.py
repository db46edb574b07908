"""ReFrame tests for microbench, in the style of ReFrame's OSU tests (hpctestlib.microbenchmarks.mpi.osu).

``microbench_benchmark`` (microbench.reframe.benchmark) is the test class, parameterised by benchmark,
sizes, backend and ranks; ``microbench/reframe/checks.py`` registers it as the ready-made test
``microbench_run`` for ``reframe -c``. Site tests subclass it:

```python
import reframe as rfm
from microbench.reframe import microbench_benchmark

@rfm.simple_test
class site_allreduce(microbench_benchmark):
    benchmark = parameter(["allreduce"])
    ranks = parameter([2, 64])
    reference_files = ["refs.json"]   # microbench check --spec site.toml --emit-reframe-references daint:mc
```

The spec-to-references conversion (microbench.gate.reframe_references) and the record verdicts
(microbench.reframe.verdicts) do not need ReFrame; only the test class does, and it is imported on
first use, so ``import microbench.gate.reframe_references`` works without ReFrame installed.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "microbench_benchmark":
        from microbench.reframe.benchmark import microbench_benchmark

        return microbench_benchmark
    raise AttributeError(f"module 'microbench.reframe' has no attribute {name!r}")


__all__ = ["microbench_benchmark"]

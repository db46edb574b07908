"""Ready-made ReFrame test: ``reframe -c $(python -c 'import microbench.reframe.checks as m; print(m.__file__)') -r``.

Every benchmark at the default sweep (8 B to 1 MiB) on 2 ranks over MPI; narrow it with ReFrame's
``-n '%benchmark=allreduce'`` and set variables with ``-S`` (e.g. ``-S reference_files=refs.json``).
"""

import reframe as rfm

from microbench.reframe.benchmark import microbench_benchmark


@rfm.simple_test
class microbench_run(microbench_benchmark):
    """microbench_benchmark as it is, registered for ``reframe -c``."""

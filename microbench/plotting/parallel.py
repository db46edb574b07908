"""Drawing figures side by side in forked worker processes: matplotlib's layout and rendering are most of
``plot``'s time on a large folder (about 0.2 s a figure), and figures do not depend on each other.

The jobs (zero-argument callables, each writing one figure and returning its path or None) are left in
this module for the workers, forked after they are made, to run by their index: nothing but the index and
the path crosses between the processes, and the table the jobs draw from is shared, not copied. Fork is
used only where it is safe (this process runs one thread); ``$MICROBENCH_DRAW_WORKERS=1`` draws in the
command's own process. An error in a worker (a figure that cannot be written, a warning made an error)
is raised in the command as it would be without workers.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Callable

from microbench.cluster.facts import fork_workers

MAX_WORKERS = 4
PARALLEL_FROM = 4  #: figures to draw that start the workers

_jobs: list[Callable[[], Path | None]] = []


def draw_workers(jobs: int) -> int:
    """Worker processes for ``jobs`` figures: ``$MICROBENCH_DRAW_WORKERS``, else the CPUs this process may
    use (at most ``MAX_WORKERS``); 1 for a few figures or where fork is not available or not safe."""
    chosen = fork_workers("MICROBENCH_DRAW_WORKERS", MAX_WORKERS)
    return 1 if jobs < PARALLEL_FROM else min(chosen, jobs)


def _run(index: int) -> Path | None:
    return _jobs[index]()


def draw_all(jobs: list[Callable[[], Path | None]]) -> list[Path]:
    """Run every job (in order of the results), in workers where ``draw_workers`` says; the paths written."""
    workers = draw_workers(len(jobs))
    if workers == 1:
        return [p for p in (job() for job in jobs) if p is not None]
    import matplotlib.figure  # noqa: F401  (imported once, before the fork: the workers share it)

    _jobs[:] = jobs
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            done = pool.map(_run, range(len(jobs)), chunksize=1)
    finally:
        _jobs.clear()
    return [p for p in done if p is not None]

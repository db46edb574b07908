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
import os
import threading
from pathlib import Path
from typing import Callable

from microbench.errors import UsageError

MAX_WORKERS = 4
PARALLEL_FROM = 4  #: figures to draw that start the workers

_jobs: list[Callable[[], Path | None]] = []


def draw_workers(jobs: int) -> int:
    """Worker processes for ``jobs`` figures: ``$MICROBENCH_DRAW_WORKERS``, else the CPUs this process may
    use (at most ``MAX_WORKERS``); 1 for a few figures or where fork is not available or not safe."""
    text = os.environ.get("MICROBENCH_DRAW_WORKERS", "").strip()
    if text:
        try:
            chosen = int(text)
        except ValueError:
            chosen = 0
        if chosen < 1:
            raise UsageError(f"MICROBENCH_DRAW_WORKERS={text!r}: expected a whole number of at least 1")
    else:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        chosen = min(cpus, MAX_WORKERS)
    if jobs < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods() \
            or threading.active_count() > 1:
        return 1
    return min(chosen, jobs)


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

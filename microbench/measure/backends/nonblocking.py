"""A non-blocking collective as the loops see it: post it, test it, wait for it.

A backend's non-blocking primitive (iallreduce, ...) returns a ``NonBlocking``: ``post()`` starts the
collective and returns its handle (an mpi4py Request, a torch.distributed Work); ``test(handle)`` asks
whether it completed (MPI_Test, ``is_completed()``); ``wait(handle)`` waits for it (MPI_Wait,
``work.wait()``, which on CUDA makes the current stream wait for the collective's stream). Calling it runs
post then wait back to back: one t_pure iteration for any timed loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class NonBlocking:
    post: Callable[[], Any]
    test: Callable[[Any], bool]
    wait: Callable[[Any], None]

    def __call__(self) -> None:
        self.wait(self.post())

    def parts(self) -> tuple[Callable, Callable, Callable]:
        return self.post, self.test, self.wait

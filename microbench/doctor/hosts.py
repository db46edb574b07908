"""The nodes a launch should reach, read from the launcher's command line: Open MPI's and MPICH's ``--host`` /
``-H`` / ``-hosts`` and host files, srun's ``-w`` / ``--nodelist`` (Slurm's host lists, ``node[01-04,07]``), and
``--hosts`` of the doctor itself. Layer 1 names the ones where no process started."""

from __future__ import annotations

import os
import re

from microbench.errors import UsageError

HOST_OPTIONS = ("--host", "-H", "-host", "-hosts", "--hosts")
HOSTFILE_OPTIONS = ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f", "--default-hostfile")
NODELIST_OPTIONS = ("-w", "--nodelist")
MAX_HOSTS = 1 << 20


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list syntax: ``n[01-03,7],login`` -> n01 n02 n03 n7 login (one bracket group a name)."""
    out: list[str] = []
    for item in _split_top(text):
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", item)
        if not m:
            if "[" in item or "]" in item:
                raise UsageError(f"host list {text!r}: cannot read {item!r}")
            if item:
                out.append(item)
            continue
        head, ranges, tail = m.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise UsageError(f"host list {text!r}: cannot read {part!r}")
            width = len(lo)
            for k in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{k:0{width}d}{tail}")
                if len(out) > MAX_HOSTS:
                    raise UsageError(f"host list {text!r}: more than {MAX_HOSTS} hosts")
    return out


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return [p for p in parts if p]


def from_hostfile(path: str) -> list[str]:
    """Hosts of an Open MPI / MPICH host file (``host slots=N``, ``host:N``; comments and blank lines skipped)."""
    out = []
    try:
        with open(os.path.expanduser(path)) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    out.append(line.split()[0].split(":")[0])
    except OSError as exc:
        raise UsageError(f"host file {path}: {exc.strerror or exc}") from exc
    return out


def from_command(command: list[str]) -> list[str]:
    """The hosts a launcher command names (empty when it names none: the resource manager decides)."""
    found: list[str] = []
    for k, word in enumerate(command):
        value = None
        option, eq, inline = word.partition("=")
        if eq and option in HOST_OPTIONS + HOSTFILE_OPTIONS + NODELIST_OPTIONS:
            word, value = option, inline
        elif word in HOST_OPTIONS + HOSTFILE_OPTIONS + NODELIST_OPTIONS and k + 1 < len(command):
            value = command[k + 1]
        if value is None:
            continue
        if word in HOSTFILE_OPTIONS:
            found += from_hostfile(value)
        elif word in NODELIST_OPTIONS:
            found += expand_hostlist(value)
        else:
            found += [h.split(":")[0] for h in _split_top(value)]
    return list(dict.fromkeys(found))

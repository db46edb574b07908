"""Which runs a gate tool reads: the host set, backend and MPI library asked for, and notes on the rest.

A results folder may hold runs from several machines, backends and MPI builds (and other tools' files).
``--hosts``, ``--backend`` and ``--mpi`` keep the runs that match; every tool says how many runs it left
out and why. Without them every run is read, and a tool notes when the runs it read mix host sets or
MPI libraries, since their numbers then describe different systems.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field


def add_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("which runs (a folder may hold several machines' and tools' results)")
    group.add_argument("--hosts", metavar="H1,H2",
                       help="only runs on exactly this set of hosts (the run line's hosts)")
    group.add_argument("--backend", metavar="NAME", help="only runs of this backend (mpi or torch)")
    group.add_argument("--mpi", metavar="TEXT",
                       help="only runs whose MPI library version contains TEXT (case-insensitive), "
                            "e.g. 'Open MPI v5.0' or MPICH")


def host_set(meta: dict) -> tuple[str, ...]:
    """The sorted hosts of a run line (empty when it names none)."""
    hosts = meta.get("hosts")
    return tuple(sorted(map(str, hosts))) if isinstance(hosts, list) else ()


def mpi_text(meta: dict) -> str:
    """The MPI library version's first line, or '' when the run line has none."""
    mpi = meta.get("mpi")
    text = mpi.get("library_version") if isinstance(mpi, dict) else None
    return text.splitlines()[0].strip() if isinstance(text, str) and text else ""


@dataclass
class Selection:
    hosts: tuple[str, ...] | None = None
    backend: str | None = None
    mpi: str | None = None
    skipped: Counter = field(default_factory=Counter)  #: reason -> runs left out

    @classmethod
    def from_args(cls, args) -> "Selection":
        hosts = getattr(args, "hosts", None)
        return cls(hosts=tuple(sorted(h.strip() for h in hosts.split(",") if h.strip())) if hosts else None,
                   backend=getattr(args, "backend", None), mpi=getattr(args, "mpi", None))

    def admits(self, meta: dict) -> bool:
        """Whether a run (its run line) is read; a run left out is counted under its reason. A run without
        a readable run line is outside any selection (its hosts, backend and MPI are unknown)."""
        if (not meta or meta.get("orphan")) and self.describe():
            self.skipped["without a readable run line"] += 1
            return False
        if self.hosts is not None and host_set(meta) != self.hosts:
            self.skipped[f"on hosts {','.join(host_set(meta)) or '(none named)'}"] += 1
            return False
        if self.backend is not None and meta.get("backend") != self.backend:
            self.skipped[f"with backend {meta.get('backend')}"] += 1
            return False
        if self.mpi is not None and self.mpi.lower() not in mpi_text(meta).lower():
            self.skipped[f"with MPI {mpi_text(meta) or '(none)'}"] += 1
            return False
        return True

    def describe(self) -> str:
        parts = [f"hosts {','.join(self.hosts)}" if self.hosts is not None else "",
                 f"backend {self.backend}" if self.backend else "", f"MPI ~ {self.mpi!r}" if self.mpi else ""]
        return ", ".join(p for p in parts if p)

    def notes(self) -> list[str]:
        if not self.skipped:
            return []
        total = sum(self.skipped.values())
        reasons = "; ".join(f"{n} {why}" for why, n in self.skipped.most_common(6))
        return [f"skipped {total} run(s) outside the selection ({self.describe()}): {reasons}"]


def mixture_notes(metas: list[dict]) -> list[str]:
    """Notes when the runs read span several host sets or MPI libraries (no selection narrowed them)."""
    out = []
    for what, of, option in (("host sets", lambda m: ",".join(host_set(m)) or "(none named)", "--hosts"),
                             ("MPI libraries", lambda m: mpi_text(m) or "(none)", "--mpi")):
        seen = Counter(of(m) for m in metas)
        if len(seen) > 1:
            shown = "; ".join(f"{name} ({n} runs)" for name, n in seen.most_common(4))
            out.append(f"the runs span {len(seen)} {what}: {shown}; {option} picks one")
    return out

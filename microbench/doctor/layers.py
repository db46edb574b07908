"""The layers the doctor walks, bottom-up, and what one layer's verdict holds.

Each layer is one module with two sides: ``collect`` runs on every rank when the coordinator says ``go`` (facts,
or the layer's own exchanges) and ``judge`` runs on the coordinator over every rank's report. The coordinator
stops at the first layer that fails; a rank that does not finish a layer in time is named from the others'
reports (``coordinator.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["pass", "fail", "skipped", "not_run"]


@dataclass(frozen=True)
class Layer:
    number: int
    name: str  #: as ``--skip`` and the record name it
    title: str  #: what passing it means
    next: str  #: what to check next when it fails (a judge may say something more precise)


LAYERS = (
    Layer(1, "launch", "the launcher starts a process on every node",
          "the launcher's own message; that every node is up and reachable from the launch host (ssh, the "
          "resource manager's daemon), and that the command exists on every node at the same path"),
    Layer(2, "software", "every rank runs the same software",
          "the environment modules, virtual environment or container of the nodes named: they must load the "
          "same microbench, Python, MPI and torch"),
    Layer(3, "mpi", "MPI initialises, a barrier completes, every node pair exchanges 8 bytes",
          "MPI's wire-up between the nodes named: the interfaces MPI may use (OMPI_MCA_btl_tcp_if_include, "
          "UCX_NET_DEVICES, FI_PROVIDER), a firewall between them, and that the launcher matches the MPI library"),
    Layer(4, "network", "the network the libraries will use is up, the one expected, and the rendezvous is reachable",
          "the interfaces named (ip addr on the node), GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, the firewall "
          "between the nodes named and the rendezvous port"),
    Layer(5, "placement", "no two ranks share a core or a GPU",
          "the launcher's binding (mpirun --bind-to, srun --cpu-bind, --gpus-per-task) and CUDA_VISIBLE_DEVICES"),
    Layer(6, "torch", "torch.distributed initialises on the chosen backend and a tiny collective completes",
          "the backend's own log (NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG=DETAIL) on the ranks named"),
    Layer(7, "bandwidth", "no node pair far below the rest in a short bandwidth round",
          "the links of the nodes named (cables, port speed, error counters), then microbench run pairs on them"),
)
BY_NAME = {layer.name: layer for layer in LAYERS}
BY_NUMBER = {layer.number: layer for layer in LAYERS}
FAR_BELOW = 10.0  #: a node pair (or node) is far below the rest under a tenth of the median's bandwidth


@dataclass
class Finding:
    """One thing wrong (or noted) at a layer: where, and what."""

    what: str
    host: str | None = None
    ranks: list[int] = field(default_factory=list)
    note: bool = False  #: said, but not a failure

    def as_record(self) -> dict:
        return {"what": self.what, "host": self.host, "ranks": self.ranks, "note": self.note}


@dataclass
class LayerResult:
    layer: Layer
    status: Status
    summary: str
    findings: list[Finding] = field(default_factory=list)
    seconds: float | None = None
    next: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.note]

    def as_record(self) -> dict:
        return {"layer": self.layer.number, "name": self.layer.name, "status": self.status,
                "seconds": None if self.seconds is None else round(self.seconds, 3), "summary": self.summary,
                "next": self.next, "findings": [f.as_record() for f in self.findings], "details": self.details}


def verdict(summary: str, findings: list[Finding], layer: Layer, **kw) -> LayerResult:
    """pass when no finding is a failure, else fail with the layer's next step (unless ``next`` is given)."""
    failed = any(not f.note for f in findings)
    nxt = kw.pop("next", None)
    return LayerResult(layer, "fail" if failed else "pass", summary, findings,
                       next=(nxt or layer.next) if failed else None, **kw)


def parse_skip(text: str | None) -> set[str]:
    """``--skip torch,bandwidth`` (names or numbers) -> layer names; layers 1 and 2 cannot be skipped."""
    from microbench.errors import UsageError

    out: set[str] = set()
    for word in (text or "").split(","):
        word = word.strip()
        if not word:
            continue
        layer = BY_NUMBER.get(int(word)) if word.isdigit() else BY_NAME.get(word)
        if layer is None:
            raise UsageError(f"--skip {word!r}: choose from {', '.join(l.name for l in LAYERS)} (or 3 to 7)")
        if layer.number <= 2:
            raise UsageError(f"--skip {word}: layers 1 and 2 (launch, software) are what every other layer stands on")
        out.add(layer.name)
    return out


def hosts_phrase(by_host: dict[str, list[int]], limit: int = 6) -> str:
    """``node2 (rank 2), node3 (ranks 3, 7)``: hosts and their ranks, the first ``limit`` of them."""
    parts = []
    for host, ranks in list(by_host.items())[:limit]:
        parts.append(f"{host} ({ranks_phrase(ranks)})")
    more = len(by_host) - limit
    return ", ".join(parts) + (f" and {more} more node(s)" if more > 0 else "")


def ranks_phrase(ranks: list[int], limit: int = 8) -> str:
    ranks = sorted(ranks)
    shown = ", ".join(str(r) for r in ranks[:limit]) + (f", ... ({len(ranks)} in all)" if len(ranks) > limit else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"

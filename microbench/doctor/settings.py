"""The doctor's settings from its command line, checked once: the same on the parent, every rank and the
coordinator rank 0 forks."""

from __future__ import annotations

from dataclasses import dataclass, field

from microbench.doctor.layers import parse_skip
from microbench.errors import UsageError
from microbench.units import parse_size

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_LAUNCH_TIMEOUT_S = 120.0


@dataclass
class Settings:
    """What the coordinator needs of the command line."""

    timeout: float
    launch_timeout: float
    skip: set = field(default_factory=set)
    store_port: int | None = None
    iface: str | None = None
    size: int = 1 << 20
    torch_backend: str = "auto"
    argv: list = field(default_factory=list)
    out: str | None = None
    json: bool = False

    @property
    def pair_timeout(self) -> float:
        """How long a rank waits for 8 bytes from a partner (layer 3) before it reports the pair."""
        return max(1.0, self.timeout / 4)

    @property
    def behind_after(self) -> float:
        """Seconds without a move after which ranks behind the others (fewer steps taken in the layer) are named."""
        return max(1.0, self.timeout / 3)

    @property
    def transfer_timeout(self) -> float:
        """How long a rank waits for one layer-7 exchange (a slow link is measured, not cut short)."""
        return max(1.0, self.timeout / 2)


def settings_of(args) -> Settings:
    """The checked settings (the same on the parent, the ranks and rank 0's coordinator)."""
    for name in ("timeout", "launch_timeout"):
        value = getattr(args, name)
        if not value > 0 or value > 86400:
            raise UsageError(f"--{name.replace('_', '-')} {value:g}: expected seconds above 0 (at most a day)")
    if args.store_port is not None and not 0 < args.store_port < 65536:
        raise UsageError(f"--store-port {args.store_port}: expected 1 to 65535")
    size = parse_size(args.size) if isinstance(args.size, str) else int(args.size)
    if not 1 <= size <= 1 << 30:
        raise UsageError(f"--size {args.size}: expected 1 B to 1 GiB")
    args._skip = parse_skip(args.skip)
    if getattr(args, "coordinator", None):
        from microbench.doctor.rendezvous import parse_coordinator

        parse_coordinator(args.coordinator)  # HOST[,HOST...]:PORT, refused in one line before any rank starts
    return Settings(timeout=args.timeout, launch_timeout=args.launch_timeout, skip=args._skip,
                    store_port=args.store_port, iface=args.iface, size=size, torch_backend=args.torch_backend,
                    argv=list(getattr(args, "_argv", ["doctor"])), out=args.out, json=args.json)

"""microbench's cache folder: the compiled loops and the answers remembered between launches (``mpicc -show``,
the MPI the ``--np`` parent launches with). ``$MICROBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/microbench``, else
``~/.cache/microbench``. Everything in it can be deleted at any time: it is made again on the next launch."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The folder (not created here)."""
    base = os.environ.get("MICROBENCH_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "microbench" if xdg else Path.home() / ".cache" / "microbench"


def remember(name: str, text: str) -> None:
    """Keep ``text`` under ``name``, atomically (a rename); a folder this user cannot write keeps nothing."""
    path = cache_dir() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass


def recall(name: str) -> str | None:
    """What ``remember`` kept under ``name``, or None (one open and one read)."""
    try:
        fd = os.open(cache_dir() / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)

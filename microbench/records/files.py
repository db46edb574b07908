"""Finding results files: the one way every reader (``records.reader``, ``microbench.results``) does it.

A file named on the command line is read as it is. Below a folder named, every ``*.jsonl`` that is a regular file is
read, once (by device and inode); anything else with that name (a FIFO, a device, a folder, a dangling link) is
skipped with a note. Links to folders are followed, each folder at most once (by device and inode), so links that
loop back (``a -> .``, ``b -> .``) end the walk instead of multiplying it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from microbench.errors import UsageError


def results_files(items: Iterable[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    """(the files to read, in order: each named file, then each folder's files sorted; notes on what was skipped)."""
    out: list[Path] = []
    notes: list[str] = []
    seen: set[tuple[int, int]] = set()
    for item in items:
        p = Path(item)
        if p.is_dir():
            found, skipped = _walk(p)
            notes += skipped
        elif p.exists():
            found = [p]
        else:
            raise UsageError(f"no such results file: {p}")
        for f in found:
            try:
                st = f.stat()
            except OSError as exc:
                raise UsageError(f"cannot read {f}: {exc.strerror or exc}") from None
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                out.append(f)
    return out, notes


def _walk(top: Path) -> tuple[list[Path], list[str]]:
    """The regular ``*.jsonl`` files below ``top`` (links followed, each folder once) and notes on the rest."""
    files, notes, visited = [], [], set()
    for root, dirs, names in os.walk(top, followlinks=True):
        try:
            st = os.stat(root)
        except OSError:
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in visited:  # reached again through a link: its files are already listed
            dirs[:] = []
            continue
        visited.add((st.st_dev, st.st_ino))
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if d.endswith(".jsonl")]:
            if not name.endswith(".jsonl"):
                continue
            path = Path(root) / name
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                notes.append(f"skipped {path}: {exc.strerror or exc}")
                continue
            if stat.S_ISREG(mode):
                files.append(path)
            else:
                notes.append(f"skipped {path}: not a regular file ({_kind(mode)})")
    return sorted(files), notes


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"

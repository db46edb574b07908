"""Finding and opening results files: the one way every reader (``records.reader``, ``results.scan``) does it.

A file named on the command line is read as given. Below a folder, only regular files named ``*.jsonl``
are read: a FIFO, a device, a socket or a folder named ``x.jsonl`` is skipped with a note (opening a FIFO
blocks; a link to ``/dev/zero`` never ends). Links to folders are followed at most once: each folder is
entered once by its (device, inode), so links to ``.`` or ``..`` cannot make the walk loop. Each file is read
once (by device and inode) and at most ``max_file_bytes()`` bytes of it (``$MICROBENCH_MAX_FILE_BYTES``,
default 4 GiB); a larger file is a UsageError naming it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from microbench.errors import UsageError

DEFAULT_MAX_FILE_BYTES = 4 << 30
BOM = b"\xef\xbb\xbf"  #: a UTF-8 byte-order mark (a file saved by some editors starts with it)


def max_file_bytes() -> int:
    """The largest results file a reader reads (bytes): ``$MICROBENCH_MAX_FILE_BYTES`` or 4 GiB."""
    text = os.environ.get("MICROBENCH_MAX_FILE_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_FILE_BYTES
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"MICROBENCH_MAX_FILE_BYTES={text[:40]!r}: expected a whole number of bytes, at least 1")
    return int(text)


def find_jsonl(items: Iterable[str | os.PathLike], skipped: list[str] | None = None) -> list[Path]:
    """Files named, and every regular ``*.jsonl`` file below folders named (sorted per folder); each file once.

    What was passed over below a folder (not a regular file, unreadable) is appended to ``skipped`` as
    'PATH (why)'. A name that does not exist is a UsageError.
    """
    skipped = skipped if skipped is not None else []
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for item in items:
        p = Path(item)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise UsageError(f"no such results file: {p}") from None
        except OSError as exc:
            raise UsageError(f"cannot read {p}: {exc.strerror or exc}") from None
        found = _walk(p, st, skipped) if stat.S_ISDIR(st.st_mode) else [(p, st)]
        for f, fst in found:
            if (fst.st_dev, fst.st_ino) not in seen:
                seen.add((fst.st_dev, fst.st_ino))
                out.append(f)
    return out


def _walk(top: Path, top_stat: os.stat_result, skipped: list[str]) -> list[tuple[Path, os.stat_result]]:
    """Regular ``*.jsonl`` files below ``top`` with their stat; every folder entered once by (device, inode)."""
    entered = {(top_stat.st_dev, top_stat.st_ino)}
    stack = [top]
    out: list[tuple[Path, os.stat_result]] = []
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(f"{folder} ({exc.strerror or exc})")
            continue
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError as exc:
                if entry.name.endswith(".jsonl"):
                    skipped.append(f"{path} ({exc.strerror or exc})")
                continue
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) not in entered:
                    entered.add((st.st_dev, st.st_ino))
                    subfolders.append(path)
                elif entry.name.endswith(".jsonl"):
                    skipped.append(f"{path} (a folder)")
            elif entry.name.endswith(".jsonl"):
                if stat.S_ISREG(st.st_mode):
                    out.append((path, st))
                else:
                    skipped.append(f"{path} (not a regular file)")
        stack.extend(reversed(subfolders))
    out.sort(key=lambda item: item[0])
    return out


def read_capped(path: Path, limit: int | None = None) -> bytes:
    """A file's bytes (a leading UTF-8 byte-order mark removed); UsageError naming it when it cannot be read
    or holds more than ``limit`` (default ``max_file_bytes()``) bytes."""
    limit = max_file_bytes() if limit is None else limit
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageError(f"{path}: larger than {limit} bytes, the most a results file may hold "
                         "(MICROBENCH_MAX_FILE_BYTES sets it)")
    return data[len(BOM):] if data.startswith(BOM) else data

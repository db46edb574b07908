"""Writing an output file (a figure, a page) so that nothing planted in the output folder is followed.

The content goes to a new temporary file in the target's folder (created exclusively, so never through a link),
which ``os.replace`` then puts on the name: a reader never sees half a file, and a hard link planted on the name
is replaced, not written through. A name that is a symbolic link, or anything but a regular file (a device, a
FIFO, a folder), is refused; with ``folder``, a target whose folder resolves (links followed) outside it too.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from microbench.errors import UsageError, printable


def _umask() -> int:
    """This process's umask, read without changing it where Linux says it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def inside(folder: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``path``, after checking that it resolves (links followed) to a place inside ``folder``."""
    base, target = Path(folder).resolve(), Path(path).resolve()
    if not target.is_relative_to(base):
        raise UsageError(f"refusing to write {printable(str(path))}: it is outside the output folder "
                         f"{printable(str(folder))}")
    return Path(path)


def check_target(path: str | os.PathLike, folder: str | os.PathLike | None = None, what: str = "") -> Path:
    """``path`` if it may be written: not a symbolic link, a regular file if it exists, and with ``folder``, in a
    folder inside it. Raises UsageError naming the path (after ``what``, e.g. ``"the report to "``)."""
    p = Path(path)
    shown = what + printable(str(p))
    if folder is not None and p.parent.exists():
        inside(folder, p.parent)
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return p
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise UsageError(f"refusing to write {shown}: it is a symbolic link (remove it, or name another file)")
    if stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {shown}: it is a directory")
    if not stat.S_ISREG(mode):
        raise UsageError(f"cannot write {shown}: it is not a regular file")
    return p


def write_output(path: str | os.PathLike, write: Callable[[BinaryIO], None],
                 folder: str | os.PathLike | None = None, what: str = "") -> Path:
    """Call ``write(file)`` on a new temporary file beside ``path`` and put it on ``path`` (folders created);
    ``check_target`` first. Any OSError is one UsageError naming ``path``; no temporary file is left behind."""
    p = Path(path)
    shown = what + printable(str(p))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror or exc}") from None
    check_target(p, folder, what)
    try:
        fd, temporary = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name[:80]}.", suffix=".part")
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temporary, p)
    except OSError as exc:
        _remove(temporary)
        raise UsageError(f"cannot write {shown}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(temporary)
        raise
    return p


def write_text(path: str | os.PathLike, text: str, folder: str | os.PathLike | None = None, what: str = "") -> Path:
    """``write_output`` of ``text`` as UTF-8."""
    return write_output(path, lambda f: f.write(text.encode()), folder, what)


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass

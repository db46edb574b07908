"""Finding and opening results files: the one way every verb does it (``records.reader`` and ``results.scan``
call this module; no other module opens a results file, and ``tests/test_layers.py`` holds them to it).

- **Finding.** A file named on the command line is read as given (it must be a regular file). Below a folder,
  only regular files named ``*.jsonl`` are read: a FIFO, a device, a socket or a folder named ``x.jsonl`` is
  skipped with a note (opening a FIFO blocks; a link to ``/dev/zero`` never ends). A link below the folder is
  followed only when its target lies inside the folder named: a link to ``/`` or to another user's files is
  skipped with a note. Each folder is entered once and each file read once, by (device, inode), so links to
  ``.`` or ``..`` cannot make the walk loop.
- **Knowing a file before reading it.** Each file found is a ``ResultsFile``: its path and the stat taken
  when it was found. Its ``stamp`` (size, modification and change time in ns, inode, device) is what tells a
  changed file: a file replaced by another of the same size and modification time (``tar``, ``cp -p``) still
  has a new change time, which nobody can set. On opening, the file must still be that file and a regular one,
  and its size is checked against the cap (``max_file_bytes()``: ``$MICROBENCH_MAX_FILE_BYTES``, default 4 GiB)
  before a byte is read: a sparse file of terabytes costs nothing to refuse.
- **Bounded memory.** A file is read in chunks of whole lines (``chunks``); a line longer than
  ``MAX_LINE_BYTES`` is skipped up to its end without being held, and noted. Memory is a chunk and a line,
  whatever the file's size.
- **Names that are not UTF-8** (a tarball from a Latin-1 system) are kept as the OS gives them; they print
  escaped (``errors.printable``) and index keys use their bytes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from microbench.errors import UsageError, printable

DEFAULT_MAX_FILE_BYTES = 4 << 30
MAX_LINE_BYTES = 64 << 20  #: the longest line read (a pairs matrix of 2,000 hosts is about 40 MB)
CHUNK_BYTES = 16 << 20  #: bytes read at a time
BOM = b"\xef\xbb\xbf"  #: a UTF-8 byte-order mark (a file saved by some editors starts with it)
_LIMIT_MAX = 1 << 62


def max_file_bytes() -> int:
    """The largest results file a reader reads (bytes): ``$MICROBENCH_MAX_FILE_BYTES`` or 4 GiB."""
    text = os.environ.get("MICROBENCH_MAX_FILE_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_FILE_BYTES
    if not text.isdigit() or len(text) > 40 or int(text) < 1:
        raise UsageError(f"MICROBENCH_MAX_FILE_BYTES={printable(text[:40])!r}: expected a whole number of bytes, "
                         "at least 1")
    return min(int(text), _LIMIT_MAX)


@dataclass(frozen=True)
class ResultsFile:
    """A results file as found: its path and what its stat said then."""

    path: Path
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: Path, st: os.stat_result) -> "ResultsFile":
        return cls(path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    @property
    def stamp(self) -> list[int]:
        """What identifies this version of the file: size, mtime and ctime (ns), inode, device."""
        return [self.size, self.mtime_ns, self.ctime_ns, self.inode, self.device]

    def __str__(self) -> str:
        return str(self.path)


def find_results(items: Iterable[str | os.PathLike], skipped: list[str] | None = None) -> list[ResultsFile]:
    """Files named, and every regular ``*.jsonl`` file below folders named (sorted per folder); each file once.

    What was passed over below a folder (not a regular file, a link leaving the folder, unreadable) is appended
    to ``skipped`` as 'PATH (why)'. A name that does not exist, or a named file that is not a regular file, is a
    UsageError."""
    skipped = skipped if skipped is not None else []
    out: list[ResultsFile] = []
    seen: set[tuple[int, int]] = set()
    for item in items:
        p = Path(item)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise UsageError(f"no such results file: {printable(str(p))}") from None
        except OSError as exc:
            raise UsageError(f"cannot read {printable(str(p))}: {exc.strerror or exc}") from None
        if stat.S_ISDIR(st.st_mode):
            found = _walk(p, st, skipped)
        elif stat.S_ISREG(st.st_mode):
            found = [ResultsFile.of(p, st)]
        else:
            raise UsageError(f"{printable(str(p))}: not a regular file (a FIFO, device or socket is not read)")
        for f in found:
            if (f.device, f.inode) not in seen:
                seen.add((f.device, f.inode))
                out.append(f)
    return out


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _walk(top: Path, top_stat: os.stat_result, skipped: list[str]) -> list[ResultsFile]:
    """Regular ``*.jsonl`` files below ``top``; every folder entered once by (device, inode); links followed
    only to targets inside ``top``."""
    real_top = os.path.realpath(top)
    entered = {(top_stat.st_dev, top_stat.st_ino)}
    stack = [top]
    out: list[ResultsFile] = []
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(f"{printable(str(folder))} ({exc.strerror or exc})")
            continue
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            wanted = entry.name.endswith(".jsonl")
            try:
                if entry.is_symlink() and not _inside(os.path.realpath(path), real_top):
                    if wanted or entry.is_dir(follow_symlinks=True):
                        skipped.append(f"{printable(str(path))} (a link that leaves the folder)")
                    continue
                st = entry.stat(follow_symlinks=True)
            except OSError as exc:
                if wanted:
                    skipped.append(f"{printable(str(path))} ({exc.strerror or exc})")
                continue
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) not in entered:
                    entered.add((st.st_dev, st.st_ino))
                    subfolders.append(path)
                elif wanted:
                    skipped.append(f"{printable(str(path))} (a folder)")
            elif wanted:
                if stat.S_ISREG(st.st_mode):
                    out.append(ResultsFile.of(path, st))
                else:
                    skipped.append(f"{printable(str(path))} (not a regular file)")
        stack.extend(reversed(subfolders))
    out.sort(key=lambda f: os.fsencode(f.path))
    return out


def as_results_file(path: str | os.PathLike | ResultsFile) -> ResultsFile:
    """A path taken as a results file (its stat now)."""
    if isinstance(path, ResultsFile):
        return path
    found = find_results([path])
    return found[0]


@dataclass
class Chunk:
    """Whole lines of a file: ``data`` starts at line ``first_line`` (from 1); ``long_lines`` are the numbers
    of the lines (within this stretch of the file) skipped for being longer than ``MAX_LINE_BYTES``."""

    first_line: int
    data: bytes
    long_lines: list[int]


def _open_checked(f: ResultsFile, limit: int) -> int:
    """An open descriptor of ``f``, checked: still the file found, a regular file, at most ``limit`` bytes."""
    shown = printable(str(f.path))
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UsageError(f"cannot read {shown}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "not a regular file"
    elif (st.st_dev, st.st_ino) != (f.device, f.inode):
        problem = "replaced while it was being read; read it again"
    elif st.st_size > limit:
        problem = (f"{st.st_size} bytes: larger than a results file may be ({limit} bytes; "
                   "MICROBENCH_MAX_FILE_BYTES sets it)")
    if problem:
        os.close(fd)
        raise UsageError(f"{shown}: {problem}")
    return fd


def chunks(f: ResultsFile, limit: int | None = None, size: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """The file's lines, a stretch of whole lines at a time (a leading byte-order mark removed; the last line
    may lack its newline). Reading stops at ``limit`` bytes (default ``max_file_bytes()``): a file that grows
    past it while being read is a UsageError naming it."""
    limit = max_file_bytes() if limit is None else limit
    fd = _open_checked(f, limit)
    try:
        yield from _stretches(fd, f, limit, size)
    finally:
        os.close(fd)


def _stretches(fd: int, f: ResultsFile, limit: int, size: int) -> Iterator[Chunk]:
    pending = b""
    line = 1  #: the number of the first line of ``pending``
    skipping = False  #: inside an over-long line, discarding it up to its newline
    long_lines: list[int] = []
    total = 0
    first = True
    while True:
        data = os.read(fd, size)
        if not data:
            break
        total += len(data)
        if total > limit:
            raise UsageError(f"{printable(str(f.path))}: grew past {limit} bytes while being read")
        if first:
            first = False
            if data.startswith(BOM):
                data = data[len(BOM):]
        if skipping:
            cut = data.find(b"\n")
            if cut < 0:
                continue
            data, skipping = data[cut + 1:], False
            line += 1
        buf = pending + data if pending else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > MAX_LINE_BYTES:
                long_lines.append(line)
                pending, skipping = b"", True
            else:
                pending = buf
            continue
        whole, pending = buf[:cut + 1], buf[cut + 1:]
        if len(pending) > MAX_LINE_BYTES:
            long_lines.append(line + whole.count(b"\n"))
            pending, skipping = b"", True
        yield Chunk(line, whole, long_lines)
        line += whole.count(b"\n")
        long_lines = []
    if pending or long_lines:
        yield Chunk(line, pending, long_lines)


def lines(f: ResultsFile, limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line of the file that is not blank; an over-long line comes as
    (number, b"") so that the caller can note it."""
    for chunk in chunks(f, limit):
        for number in chunk.long_lines:
            yield number, b""
        for number, text in enumerate(chunk.data.split(b"\n"), chunk.first_line):
            if text.strip():
                yield number, text


def read_small(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """A small input file (a spec, a workload JSON) whole: it must be a regular file of at most ``limit``
    bytes, checked before reading (a leading byte-order mark removed)."""
    p = Path(path)
    shown = printable(str(p))
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UsageError(f"no such {what}: {shown}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {shown}: not a regular file")
    f = ResultsFile.of(p, st)
    fd = _open_checked(f, limit) if st.st_size <= limit else None
    if fd is None:
        raise UsageError(f"{what} {shown}: {st.st_size} bytes, more than a {what} may hold ({limit} bytes)")
    try:
        data = b""
        while len(data) <= limit:
            block = os.read(fd, limit + 1 - len(data))
            if not block:
                break
            data += block
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UsageError(f"{what} {shown}: more than a {what} may hold ({limit} bytes)")
    return data[len(BOM):] if data.startswith(BOM) else data

"""A cache of decoded files: each JSONL file's ``FilePart`` kept as msgpack, rebuilt when the file changes.

The JSONL files stay the system of record; the index is only a faster way to read them again. One entry
per results file, named by a hash of the file's absolute path, holds the part and the file's stamp (size,
modification time in ns, inode, device) taken before the file was read. An entry is used only while the
file's stamp is still the same: a nightly job appending a run changes the size, so the file is decoded
again and its entry rewritten. Entries are written to a temporary name and renamed into place, so a
reader never sees half an entry; an unreadable or foreign entry is ignored and rewritten.

Where: ``$MICROBENCH_INDEX`` (a folder), else ``$XDG_CACHE_HOME/microbench/index`` (``~/.cache/...``);
``MICROBENCH_INDEX=off`` reads the JSONL files every time. A folder that cannot be written to is
skipped silently: the tools then read the JSONL files, as they would without an index.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import msgspec

from microbench.gate.keys import KEY_FIELDS
from microbench.gate.parts import FilePart, PartMaker
from microbench.gate.scan import ScanNotes, decode_file
from microbench.records import SCHEMA_VERSION

FORMAT = 4  #: the entry layout; entries of another layout, schema or set of key fields are never read
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(FilePart)


def index_dir() -> Path | None:
    """The folder holding the entries, or None when the index is off."""
    chosen = os.environ.get("MICROBENCH_INDEX")
    if chosen is not None and chosen.strip().lower() in ("off", "0", "no", "none", ""):
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "microbench" / "index"


def stamp_of(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def entry_path(folder: Path, path: Path) -> Path:
    name = f"{FORMAT}:{SCHEMA_VERSION}:{','.join(KEY_FIELDS)}:{os.path.abspath(path)}"
    return folder / f"{hashlib.sha1(name.encode()).hexdigest()}.mbx"


class PartReader:
    """Parts of files, from the index where it is current, else decoded (and the index refreshed)."""

    def __init__(self, notes: ScanNotes):
        self.notes = notes
        self.maker = PartMaker()
        self.folder = index_dir()
        self.writable = self.folder is not None

    def read(self, path: Path) -> FilePart:
        stamp = stamp_of(path)
        entry = entry_path(self.folder, path) if self.folder else None
        part = self._cached(entry, stamp) if entry else None
        if part is None:
            part = self.maker.make(decode_file(path), stamp)
            if entry and self.writable:
                self._store(entry, part)
        else:
            self.notes.cached += 1
        self.notes.add(path, part.bad_lines, part.foreign, stamp[0])
        return part

    @staticmethod
    def _cached(entry: Path, stamp: list[int]) -> FilePart | None:
        try:
            part = _DECODER.decode(entry.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
        return part if part.stamp == stamp else None

    def _store(self, entry: Path, part: FilePart) -> None:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".part-")
            with os.fdopen(fd, "wb") as f:
                f.write(_ENCODER.encode(part))
            os.replace(tmp, entry)
        except OSError:
            self.writable = False  # a read-only or full cache folder: read the JSONL files from now on

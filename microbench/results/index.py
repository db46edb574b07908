"""A cache of decoded files: each JSONL file's ``FilePart`` kept as msgpack, rebuilt when the file changes.

The JSONL files stay the system of record; the index is only a faster way to read them again. One entry
per results file, named by a hash of the file's absolute path (its bytes, so names that are not UTF-8 work), holds
the part and the file's stamp (size, modification and change times in ns, inode, device) taken when the file was
found. An entry is used only while the file's stamp is still the same: a nightly job appending a run changes the
size, and a file replaced by another of the same size and modification time (``tar``, ``cp -p``, which set the
modification time from the sender) has a new change time, which nobody can set; either way the file is decoded
again and its entry rewritten. Entries are written to a temporary name and renamed into place, so a
reader never sees half an entry; an unreadable or foreign entry is ignored and rewritten.

Where: ``$MICROBENCH_INDEX`` (a folder), else ``$XDG_CACHE_HOME/microbench/index`` (``~/.cache/...``);
``MICROBENCH_INDEX=off`` reads the JSONL files every time. A folder that cannot be written to is
skipped silently: the tools then read the JSONL files, as they would without an index. A folder that other
users may write to (writable by group or others, or owned by another user) is not
used, with a note: an entry planted there would stand in for a file's results.

Decoding is the cold read's cost (seconds of CPU per GB of JSONL even with msgspec skipping what it does
not need, then the part is built and written; docs/results-at-scale.md has the figures). When ``PARALLEL_FROM`` or more files are left to read and one
is not in the index, files not in the index are decoded by worker processes (one per CPU this process may
run on, at most ``MAX_WORKERS``; ``$MICROBENCH_READ_WORKERS`` sets the number, 1 reads in this process), a
few files ahead of the one being merged, and merged in order; a nightly read (one new file) never starts
them. Workers are forked, so only where fork is safe: this process runs one thread. Where files are decoded
in the tool's own process, their entries are written by one thread beside it (creating and renaming a file
is a large share of a small file's read, and the thread does it while the next file is decoded).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import tempfile
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import msgspec

from microbench.cluster.facts import fork_workers
from microbench.records import SCHEMA_VERSION
from microbench.records.files import ResultsFile
from microbench.results.keys import KEY_FIELDS
from microbench.results.parts import NUMBERS, FilePart, PartMaker
from microbench.results.scan import RUN_PATHS, ScanNotes, decode_file, result_paths

#: the entry layout; entries of another layout, schema, set of key fields or of numbers read are never read
FORMAT = 11  #: 11: an orphan run's id made printable; 10: the machine state of run and end lines (issue 39); 9: the record model (relations checked, records attached by run id, outliers recomputed, ctime)
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(FilePart)
PARALLEL_FROM = 8  #: files left to read, from the first one not in the index, that start the workers
MAX_WORKERS = 8
BATCH = 8  #: files one worker task decodes (fewer, larger messages between the processes)
LOOKAHEAD = 3  #: tasks in flight per worker
PENDING_WRITES = 16  #: entries handed to the writer thread and not yet on disk, at most


def index_dir() -> Path | None:
    """The folder holding the entries, or None when the index is off."""
    chosen = os.environ.get("MICROBENCH_INDEX")
    if chosen is not None and chosen.strip().lower() in ("off", "0", "no", "none", ""):
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "microbench" / "index"


def unsafe_reason(folder: Path) -> str | None:
    """Why an existing index folder must not be trusted (None when it is this user's alone, or absent)."""
    try:
        st = os.stat(folder)
    except OSError:
        return None  # created on the first write, with this user's umask
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "it belongs to another user"
    if st.st_mode & 0o022:  # even with the sticky bit: others could create an entry before this user does
        return "others may write to it"
    return None


def read_workers() -> int:
    """Worker processes for decoding: ``$MICROBENCH_READ_WORKERS``, else the CPUs this process may use
    (at most ``MAX_WORKERS``); 1 when fork is not available or not safe (more than one thread)."""
    return fork_workers("MICROBENCH_READ_WORKERS", MAX_WORKERS)


def entry_path(folder: Path, path: Path) -> Path:
    """The entry of a results file: a hash of the index layout, what a part holds, and the file's absolute path."""
    layout = (f"{FORMAT}:{SCHEMA_VERSION}:{','.join(KEY_FIELDS)}:{','.join(NUMBERS)}:{','.join(sorted(result_paths()))}:"
              f"{','.join(sorted(RUN_PATHS))}:")  # the run-line fields a part keeps: a new one decodes again
    return folder / f"{hashlib.sha1(layout.encode() + os.fsencode(os.path.abspath(path))).hexdigest()}.mbx"


@dataclass
class _Slot:
    """One file on its way through ``PartReader.parts``: its part, or the worker task that makes it."""

    file: ResultsFile
    part: FilePart | None = None
    entry: str | None = None  #: where a worker stores the index entry (None: not stored)
    future: Future | None = None  #: the worker task holding this file
    position: int = 0  #: this file's place in that task


def _submit(pool: ProcessPoolExecutor, batch: list[_Slot]) -> None:
    """One worker task for the files of ``batch`` (emptied)."""
    future = pool.submit(_decode_in_worker, [(s.file, s.entry) for s in batch])
    for position, slot in enumerate(batch):
        slot.future, slot.position = future, position
    batch.clear()


class PartReader:
    """Parts of files, from the index where it is current, else decoded (and the index refreshed)."""

    def __init__(self, notes: ScanNotes):
        self.notes = notes
        self.maker = PartMaker()
        self.folder = index_dir()
        reason = unsafe_reason(self.folder) if self.folder is not None else None
        if reason:
            notes.index_refused = f"index folder {self.folder} not used ({reason}): read the JSONL files"
            self.folder = None
        self.writable = self.folder is not None

    def parts(self, paths: Iterable[ResultsFile]) -> Iterator[tuple[ResultsFile, FilePart]]:
        """(file, part) of each file, in the order given; see the module's text for when workers decode."""
        paths = list(paths)
        pool: ProcessPoolExecutor | None = None
        writer: ThreadPoolExecutor | None = None
        writes: deque[Future] = deque()
        ahead: deque[_Slot] = deque()  #: files read or being read, in order
        batch: list[_Slot] = []  #: files for the next worker task
        workers: int | None = None  #: decided at the first file to decode with PARALLEL_FROM or more left
        window = 1
        try:
            for index, found in enumerate(paths):
                slot = _Slot(found)
                entry = entry_path(self.folder, found.path) if self.folder else None
                slot.part = self._cached(entry, found.stamp) if entry else None
                if slot.part is not None:
                    self.notes.cached += 1
                elif workers is None and len(paths) - index >= PARALLEL_FROM:
                    workers = read_workers()
                    if workers > 1:
                        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
                        window = workers * LOOKAHEAD * BATCH
                if slot.part is None and pool is not None:
                    slot.entry = str(entry) if entry and self.writable else None
                    batch.append(slot)
                    if len(batch) == BATCH:
                        _submit(pool, batch)
                elif slot.part is None:
                    slot.part = self.maker.make(decode_file(found), found.stamp)
                    if entry and self.writable:
                        writer = writer or ThreadPoolExecutor(1, thread_name_prefix="microbench-index")
                        writes.append(writer.submit(self._write_entry, entry, _ENCODER.encode(slot.part)))
                        while len(writes) > PENDING_WRITES:
                            writes.popleft().result()
                ahead.append(slot)
                while ahead and (ahead[0].part is not None or len(ahead) > window):
                    if ahead[0].part is None and ahead[0].future is None:
                        _submit(pool, batch)
                    yield self._finish(ahead.popleft())
            if batch:
                _submit(pool, batch)
            while ahead:
                yield self._finish(ahead.popleft())
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            if writer is not None:
                writer.shutdown(wait=True)  # every entry on disk before the caller goes on

    def _write_entry(self, entry: Path, data: bytes) -> None:
        """(In the writer thread.) Store an entry; a folder that cannot be written to is not tried again."""
        if self.writable and not _store(entry, data):
            self.writable = False

    def _finish(self, slot: _Slot) -> tuple[ResultsFile, FilePart]:
        if slot.part is None:
            data, stored = slot.future.result()[slot.position]
            self.writable = self.writable and stored
            slot.part = _DECODER.decode(data)
        part = slot.part
        self.notes.add(slot.file.path, part.bad_lines, part.foreign, slot.file.size, part.orphans)
        if part.outliers_differ:
            self.notes.other.append(f"{slot.file.path}: {part.outliers_differ} pairs record(s) list outliers "
                                    "other than their matrix flags: judged on what the matrix flags")
        return slot.file, part

    @staticmethod
    def _cached(entry: Path, stamp: list[int]) -> FilePart | None:
        try:
            part = _DECODER.decode(entry.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
        return part if part.stamp == stamp else None


def _store(entry: Path, data: bytes) -> bool:
    """Write an entry (to a temporary name, then renamed); False when the folder cannot be written to (a
    read-only or full cache folder: the JSONL files are read from then on)."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, entry)
    except OSError:
        return False
    return True


_WORKER_MAKER: PartMaker | None = None


def _decode_in_worker(files: list[tuple[ResultsFile, str | None]]) -> list[tuple[bytes, bool]]:
    """In a worker: per (file, entry) its part as msgpack, stored as an entry when ``entry`` is given;
    [(data, stored)]."""
    global _WORKER_MAKER
    _WORKER_MAKER = _WORKER_MAKER or PartMaker()
    out = []
    for found, entry in files:
        data = _ENCODER.encode(_WORKER_MAKER.make(decode_file(found), found.stamp))
        out.append((data, _store(Path(entry), data) if entry else True))
    return out

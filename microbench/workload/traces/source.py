"""A trace file read once, front to back, in blocks of bytes: plain or gzip, in memory that does not grow.

Text formats get blocks that end at a line end (``blocks``); a line longer than ``MAX_LINE`` is no log line
and is skipped to its end. JSON formats get a file object (``json_stream``) whose bytes pass a nesting-depth
guard before the incremental parser sees them. A UTF-8 byte-order mark is dropped; a gzip stream that ends
early is an error naming how far it got, or, with ``partial``, the end of the trace. A trace is read up to
``max_trace_bytes()`` bytes of text, decompressed (``$MICROBENCH_MAX_TRACE_BYTES``, default 4 GiB): a few MB of
gzip can hold GBs of text, and reading is linear but not free (Kineto JSON: about 5 MB/s).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from microbench.errors import UsageError, printable
from microbench.workload.traces.jsondepth import DepthGuard

BLOCK = 1 << 20  #: bytes read at a time
MAX_LINE = 1 << 20  #: a longer line is skipped: no log format here writes one
HEAD = 1 << 20  #: bytes kept from the start, for telling the format
TAIL = 1 << 16  #: bytes kept from the end, for metadata written after the events (Kineto's distributedInfo)
OVERLONG = f"line longer than {MAX_LINE >> 20} MiB (no log line is)"
DEFAULT_MAX_TRACE_BYTES = 4 << 30
_LARGEST_CAP = 1 << 62  #: a larger $MICROBENCH_MAX_TRACE_BYTES is read as this (a byte count read() accepts)


def max_trace_bytes() -> int:
    """The most bytes of text (decompressed) read from one trace: ``$MICROBENCH_MAX_TRACE_BYTES`` or 4 GiB."""
    text = os.environ.get("MICROBENCH_MAX_TRACE_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_TRACE_BYTES
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"MICROBENCH_MAX_TRACE_BYTES={printable(text[:40])!r}: expected a whole number of bytes, "
                         "at least 1")
    return min(int(text), _LARGEST_CAP)


class TraceSource:
    """One trace file: ``head`` (its first bytes), then ``read``, ``blocks`` or ``json_stream`` once."""

    def __init__(self, path: str, partial: bool = False):
        self.path, self.partial = path, partial
        self.limit = max_trace_bytes()
        self.truncated = False  #: the gzip stream ended early (only with ``partial``)
        self.text_bytes = 0  #: bytes handed out so far (decompressed)
        self._last = (b"", b"")  # the last two blocks handed out, for ``tail``
        try:
            self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
            magic = self._file.read(2)
            self._file.seek(0)
            self._stream = gzip.GzipFile(fileobj=self._file, mode="rb") if magic == b"\x1f\x8b" else self._file
        except OSError as exc:
            raise UsageError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
        self.gzip = self._stream is not self._file
        # read1: a gzip read stops at what one inflate step gives, so nothing read is lost if the data ends early
        self._read_some = self._stream.read1 if self.gzip else self._stream.read
        self.head = self._read_raw(HEAD)
        if self.head.startswith(b"\xef\xbb\xbf"):
            self.head = self.head[3:]
        elif self.head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise UsageError(f"cannot read trace {path}: it is UTF-16 text; convert it to UTF-8 (iconv -f UTF-16)")
        self._pending = self.head

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read_raw(self, n: int) -> bytes:
        """Up to n bytes (fewer only at the end), gzip errors as one line."""
        parts, size = [], 0
        while size < n and not self.truncated:
            try:
                data = self._read_some(n - size)
            except EOFError:
                self._truncated_at(size)
                break
            except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
                raise UsageError(f"cannot read trace {self.path}: not a valid gzip file ({exc})") from exc
            if not data:
                break
            parts.append(data)
            size += len(data)
        return b"".join(parts)

    def _truncated_at(self, extra: int) -> None:
        where = self.text_bytes + len(getattr(self, "_pending", b"")) + extra
        if not self.partial:
            raise UsageError(f"cannot read trace {self.path}: the gzip data is truncated after {where} bytes "
                             f"(of text; the file has {Path(self.path).stat().st_size} bytes); pass "
                             "--trace-partial to read what is there")
        self.truncated = True

    def read(self, n: int = BLOCK) -> bytes:
        """The next n bytes at most (b"" at the end)."""
        if self._pending:
            data, self._pending = self._pending[:n], self._pending[n:]
        else:
            data = self._read_raw(n)
        self.text_bytes += len(data)
        if self.text_bytes > self.limit:
            raise UsageError(f"cannot read trace {printable(self.path)}: more than {self.limit} bytes of text"
                             + (" (decompressed)" if self.gzip else "") + ", the most a trace is read "
                             "(MICROBENCH_MAX_TRACE_BYTES sets it)")
        if data:
            self._last = (self._last[1], data)
        return data

    @property
    def tail(self) -> bytes:
        """The last bytes handed out (up to TAIL)."""
        return (self._last[0][-TAIL:] + self._last[1])[-TAIL:]

    def blocks(self, skipped) -> Iterator[bytes]:
        """Whole lines, a block at a time; an overlong line is counted in ``skipped`` and left out."""
        carry, skipping = b"", False
        while data := self.read(BLOCK):
            if skipping:
                end = data.find(b"\n")
                if end < 0:
                    continue
                data, skipping = data[end + 1:], False
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n") + 1
            carry = buf[cut:]
            if len(carry) > MAX_LINE:
                skipped[OVERLONG] += 1
                carry, skipping = b"", True
            if cut:
                yield buf[:cut]
        if carry:
            yield carry

    def json_stream(self, max_depth: int) -> JsonStream:
        return JsonStream(self, max_depth)


class JsonStream:
    """A binary file object over a source for an incremental JSON parser, refusing deep nesting."""

    def __init__(self, source: TraceSource, max_depth: int):
        self.source, self.guard = source, DepthGuard(max_depth, source.path)

    def read(self, n: int = BLOCK) -> bytes:
        if n == 0:  # ijson asks for 0 bytes to learn whether the stream gives bytes or text
            return b""
        data = self.source.read(n if n > 0 else BLOCK)
        self.guard.feed(data)
        return data

"""JSON traces read incrementally with ijson: one array element at a time, in memory that does not grow.

ijson (its yajl2 C backend where installed) parses the blocks the source hands it and builds only the
elements under the prefix asked for ("traceEvents.item", "nodes.item", "item"); top-level metadata that
sits outside those arrays (Kineto's distributedInfo, the execution trace's pid) is read from the bytes the
source keeps of the file's start and end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import ijson

from microbench.errors import UsageError
from microbench.workload.traces.source import BLOCK, TraceSource

#: nesting refused beyond this many levels (real traces nest about a dozen)
MAX_DEPTH = 64
#: bytes of JSON (decompressed) read between two elements, at most: the parser builds one element whole, so
#: this bounds its memory (a real trace event is well under a kilobyte; an execution-trace node a few)
MAX_ELEMENT_BYTES = 16 << 20


class _Metered:
    """A file object over the JSON stream that refuses to read more than ``limit`` bytes since ``reset``."""

    def __init__(self, stream, limit: int, path: str):
        self.stream, self.limit, self.path, self.since = stream, limit, path, 0

    def read(self, n: int = BLOCK) -> bytes:
        data = self.stream.read(n)
        self.since += len(data)
        if self.since > self.limit:
            raise UsageError(f"cannot read trace {self.path}: one JSON element holds more than {self.limit} bytes "
                             "(no trace event does; refused)")
        return data


def elements(source: TraceSource, prefix: str, notes: list[str], limit: int = MAX_ELEMENT_BYTES) -> Iterator:
    """The elements under ``prefix``; a JSON error is one line, or with --trace-partial the end of the trace.
    More than ``limit`` bytes read between two elements (one element built whole) is a UsageError."""
    stream = _Metered(source.json_stream(MAX_DEPTH), limit, source.path)
    try:
        for item in ijson.items(stream, prefix, use_float=True, buf_size=BLOCK):
            stream.since = 0
            yield item
    except MemoryError:
        raise UsageError(f"cannot read trace {source.path}: out of memory building one JSON element") from None
    except ijson.JSONError as exc:
        reason = _first_line(exc)
        if not source.partial:
            raise UsageError(f"cannot read trace {source.path}: not valid JSON ({reason}) within its first "
                             f"{source.text_bytes} bytes; pass --trace-partial to count what comes before") from exc
        notes.append(f"the JSON ends early or breaks ({reason}) within its first {source.text_bytes} bytes: "
                     "counted what came before (--trace-partial)")


def freeze(value):
    """Lists (of lists) as tuples, so an op's shapes and types can be part of a tally key (an object where a
    name or shape belongs becomes a tuple of its items: unreadable, but countable)."""
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in sorted(value.items()))
    return tuple(freeze(v) for v in value) if isinstance(value, list) else value


def thaw(value):
    """Tuples made by ``freeze`` as lists again."""
    return [thaw(v) for v in value] if isinstance(value, tuple) else value


def _first_line(exc: Exception) -> str:
    """The parser's message without the excerpt of the file it appends (yajl gives bytes)."""
    message = exc.args[0] if exc.args else ""
    if isinstance(message, bytes):
        message = message.decode("utf-8", errors="replace")
    lines = str(message).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def top_level_value(source: TraceSource, key: str):
    """The value of a top-level ``key`` if it is in the bytes kept of the file's start or end, else None."""
    decoder = json.JSONDecoder()
    for chunk in (source.head, source.tail):
        text = chunk.decode("utf-8", errors="replace")
        for match in re.finditer(rf'"{re.escape(key)}"\s*:\s*', text):
            try:
                return decoder.raw_decode(text, match.end())[0]
            except (ValueError, RecursionError):
                continue
    return None

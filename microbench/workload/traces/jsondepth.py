"""A nesting-depth guard for JSON read in blocks: refuses a document nested deeper than a limit.

An incremental parser builds each array element it yields in memory; one element nested a million levels
deep ("[[[[...") takes gigabytes there. Real traces nest about a dozen levels (a Kineto event's
"Input Dims" list sits 5 levels down, an execution-trace tensor list of lists 8 to 12). The guard sees every
block before the parser does and keeps, between blocks, only the brackets still open.

How: in each block, escaped backslashes and quotes are dropped, then every byte but ``[]{}"``; strings
(whose brackets are not structure) are cut out; what is left is brackets only. Adjacent pairs ``[]`` and
``{}`` are removed pass by pass: each pass peels one level, so the passes needed are the nesting depth of
the block's matched pairs. Depth at any point is at most the brackets open before the block plus those
passes; the guard refuses when that bound passes the limit (so it refuses at most at twice the true depth,
and never lets a document much deeper than the limit through). All steps are C-speed bytes operations.
"""

from __future__ import annotations

import re

from microbench.errors import UsageError

_NOT_STRUCTURE = bytes(range(256)).translate(None, b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


class DepthGuard:
    """Feed it the document's bytes in order; it raises UsageError past ``limit`` levels."""

    def __init__(self, limit: int, path: str):
        self.limit, self.path = limit, path
        self.open = b""  #: brackets opened and not yet closed
        self.in_string = False
        self.carry = b""  #: a trailing odd backslash (escaping the next block's first byte), else nothing

    def feed(self, block: bytes) -> None:
        if self.carry:
            block, self.carry = self.carry + block, b""
        if b"\\" in block:
            kept = block.rstrip(b"\\")
            self.carry = b"\\" * ((len(block) - len(kept)) % 2)  # pairs cancel: only the parity carries
            block = kept.replace(b"\\\\", b"").replace(b'\\"', b"")
        brackets = self._outside_strings(block.translate(None, _NOT_STRUCTURE).replace(b'""', b""))
        self._nest(self.open + brackets)

    def _outside_strings(self, marks: bytes) -> bytes:
        """The brackets of ``marks`` (brackets and quotes) that are not inside a string."""
        if self.in_string:
            end = marks.find(b'"')
            if end < 0:
                return b""
            marks, self.in_string = marks[end + 1:], False
        if b'"' in marks:
            marks = _STRING.sub(b"", marks)
            start = marks.find(b'"')
            if start >= 0:
                marks, self.in_string = marks[:start], True
        return marks

    def _nest(self, brackets: bytes) -> None:
        before = len(self.open)
        for passes in range(self.limit + 2):
            peeled = brackets.replace(b"[]", b"").replace(b"{}", b"")
            if peeled == brackets or before + passes > self.limit:
                break
            brackets = peeled
        if before + passes > self.limit or len(brackets) > self.limit:
            raise UsageError(f"cannot read trace {self.path}: JSON nested more than {self.limit} levels deep "
                             "(no trace is; refused)")
        self.open = brackets

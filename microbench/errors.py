"""Exceptions that end a command with a one-line message, the exit statuses, and the one sanitizer for text
that reaches a terminal.

Exit statuses (``microbench`` and each verb; docs/faults.md):

====  =====================================================================================================
0     success; every verdict PASS
1     a verdict of FAIL (check, compare, history --fail-on-step); for run and replay, a run that failed (a
      --check failure, a missing resource: RunError)
2     bad input or environment: a usage error, a file that cannot be read or written (one line
      ``microbench: error: ...`` naming the file, and ``FILE:LINE`` for a line of a file)
3     an internal error: a bug (one line ``microbench: internal error: ...``), never a verdict
4     a verdict of INCONCLUSIVE (check, compare, history --fail-on-step): no failure seen, and the gate could
      not have seen one (gate/outcome.py); ``--inconclusive-exit 0|1`` makes it 0 or 1
130   interrupted (SIGINT); 128 + N for signal N
141   the reader of the output went away (a closed pipe, as SIGPIPE would)
====  =====================================================================================================
"""

from __future__ import annotations

import io
import re
from typing import TextIO

EXIT_OK = 0
EXIT_FAIL = 1  #: a verdict of FAIL or regression; a run that failed
EXIT_USAGE = 2  #: bad input or environment
EXIT_INTERNAL = 3  #: a bug: never read as a verdict
EXIT_INCONCLUSIVE = 4  #: a verdict of INCONCLUSIVE (by default: a site may choose 0 or 1)
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """Bad input from the user or the environment: printed as one line by rank 0, exit status 2."""

    exit_code = EXIT_USAGE


class RunError(Exception):
    """The run cannot go on (missing backend, device, memory): one line, exit status 1."""

    exit_code = EXIT_FAIL


# Invisible characters of the categories ``str.isprintable`` accepts (Mn, Lo): Unicode's default-ignorable
# code points outside Cc, Cf, Zl, Zp, Zs: the combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
# Mongolian variation selectors, variation selectors.
_IGNORABLE = frozenset([0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), 0x3164,
                        *range(0xFE00, 0xFE10), 0xFFA0, *range(0xE0100, 0xE01F0)])
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_NOT_ASCII_TEXT = re.compile(r"[^\x20-\x7e]")  #: a string from a file: only printable ASCII passes as it is
_NOT_ASCII_LINES = re.compile(r"[^\t\n\x20-\x7e]")  #: a terminal stream: printable ASCII, tab and newline


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _SHORT:
        return _SHORT[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _visible(match: re.Match) -> str:
    """``ch`` where it prints as itself; else its escape. Escaped: controls (C0, DEL, C1), format characters
    (bidirectional controls, zero-width characters, the BOM, soft hyphen), line and paragraph separators,
    spaces other than U+0020, lone surrogates (bytes of a name that is not UTF-8), private-use and unassigned
    code points, and the default-ignorable ones above."""
    ch = match.group()
    return ch if ch.isprintable() and ord(ch) not in _IGNORABLE else _escape(ch)


def printable(text: str) -> str:
    """``text`` (a string read from a file or given by a user) as one visible line: each character that could
    move the cursor, recolour or retitle the terminal, reorder the line (bidirectional controls) or hide itself
    (zero-width characters) is shown as its escape (``\\x1b``, ``\\n``, ``\\u202e``, ``\\u200b``, ``\\udce9``),
    so two strings that differ only by such characters print differently. Tab is escaped too."""
    return text if text.isascii() and text.isprintable() else _NOT_ASCII_TEXT.sub(_visible, text)


def terminal_safe(text: str) -> str:
    """``text`` (lines microbench writes to a terminal, data included) with the same escapes as ``printable``
    except newline and tab, which pass: what every byte written to stdout and stderr goes through."""
    return text if text.isascii() and text.isprintable() else _NOT_ASCII_LINES.sub(_visible, text)


def clean(value):
    """``value`` (JSON-like: dicts, lists, strings, numbers) with ``printable`` applied to every string in it,
    keys included; the same object when nothing needed replacing."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


class OutputError(UsageError):
    """stdout or stderr cannot be written (a full disk, a quota): exit status 2, not a verdict or a bug."""


class PrintableStream(io.TextIOBase):
    """A text stream that passes what is written through ``terminal_safe`` to ``raw``, unbuffered (the order of
    writes on ``raw`` is kept). A write error other than a closed pipe becomes ``OutputError``."""

    def __init__(self, raw: TextIO):
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        safe = terminal_safe(text)
        try:
            try:
                self.raw.write(safe)
            except UnicodeEncodeError:  # a terminal that cannot show a printable character (LANG=C, an ASCII pipe)
                encoding = self.raw.encoding or "ascii"
                self.raw.write(safe.encode(encoding, "backslashreplace").decode(encoding))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None
        return len(text)

    def flush(self) -> None:
        try:
            self.raw.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:
        return self.raw.encoding

    @property
    def errors(self) -> str | None:
        return getattr(self.raw, "errors", None)

    def close(self) -> None:  # the raw stream belongs to the interpreter
        pass


def unwrapped(stream: TextIO) -> TextIO:
    """The stream under a ``PrintableStream`` (``stream`` itself otherwise): for a progress bar, whose carriage
    returns must reach the terminal."""
    return stream.raw if isinstance(stream, PrintableStream) else stream

"""Exceptions that end a run with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Bad input from the user: printed as one line by rank 0, exit status 2."""

    exit_code = 2


class RunError(Exception):
    """The run cannot go on (missing backend, device, memory): one line, exit status 1."""

    exit_code = 1


_CONTROL = dict.fromkeys([*range(0, 9), *range(10, 32), 127, *range(0x80, 0xA0)], "?")


def printable(text: str) -> str:
    """``text`` with control characters (other than tab; newlines too) replaced by ``?``: for printing
    strings read from files, which must not move the cursor, clear the screen or retitle the terminal."""
    return text.translate(_CONTROL)


def clean(value):
    """``value`` (JSON-like: dicts, lists, strings, numbers) with ``printable`` applied to every string in it,
    keys included; the same object when nothing needed replacing."""
    if isinstance(value, str):
        return value.translate(_CONTROL)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value

"""Exceptions that end a run with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Bad input from the user: printed as one line by rank 0, exit status 2."""

    exit_code = 2


class RunError(Exception):
    """The run cannot go on (missing backend, device, memory): one line, exit status 1."""

    exit_code = 1

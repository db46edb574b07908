"""Reading the host's kernel files (``/sys``, ``/proc``) for the doctor's layers: absent or unreadable is empty,
never an error (a container hides some, a down port has no rate)."""

from __future__ import annotations

import os


def listdir(path: str) -> list[str]:
    """The names in folder ``path``; none where it is absent or unreadable."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def read(path: str) -> str | None:
    """The file's text, stripped; None where it is absent or unreadable."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None

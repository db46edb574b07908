"""A shaped link's rate, from its root queueing discipline (``tc``, iproute2).

A NIC rate-limited by a qdisc, or a veth (which reports 10000 Mb/s in sysfs whatever is shaped on it), moves
at most the qdisc's rate. Read here (per interface, in Mbit/s): ``tbf`` (its ``rate``), ``htb`` (the highest
``ceil`` of its root classes), ``fq`` (``maxrate``) and ``cake`` (``bandwidth``). What a host sends is shaped on
its own interfaces; what it receives can be shaped on the far side (a switch port), which no host can see.
``tc -j qdisc show`` gives every interface's qdiscs at once; htb's classes come from ``tc class show`` (its
JSON form prints text in iproute2 6.1). Without ``tc`` the shaping is unknown, and said so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(r"\b(rate|ceil)\s+([0-9.]+)\s*([kKmMgGtT]?)(bit|bps)\b")
TIMEOUT_S = 5.0


def mbit(value: float, unit: str, bits: str) -> float:
    """A tc rate as Mbit/s (``bps`` is bytes per second in tc's grammar)."""
    return value * _UNITS[unit.lower()] * (8 if bits == "bps" else 1) / 1e6


def _tc(*args: str) -> str | None:
    exe = shutil.which("tc") or next((p for p in ("/usr/sbin/tc", "/sbin/tc") if Path(p).exists()), None)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def htb_ceiling(classes_text: str) -> float | None:
    """The highest ceil (else rate) of an htb qdisc's root classes, Mbit/s."""
    best = None
    for line in classes_text.splitlines():
        if " root " not in f" {line} ":
            continue
        found = {kind: mbit(float(v), u, b) for kind, v, u, b in _RATE.findall(line)}
        value = found.get("ceil", found.get("rate"))
        if value is not None:
            best = value if best is None else max(best, value)
    return best


def parse(qdiscs: list, classes: dict[str, str]) -> dict[str, dict]:
    """Per interface, its root qdisc's rate (``mbps``) and how it was found (``how``); ``qdiscs`` is
    ``tc -j qdisc show``'s list, ``classes`` each htb interface's ``tc class show`` text."""
    out = {}
    for q in qdiscs if isinstance(qdiscs, list) else []:
        if not isinstance(q, dict) or not q.get("root") or not isinstance(q.get("dev"), str):
            continue
        kind, options = q.get("kind"), q.get("options") if isinstance(q.get("options"), dict) else {}
        key = {"tbf": "rate", "fq": "maxrate", "cake": "bandwidth"}.get(kind)
        value = options.get(key) if key else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out[q["dev"]] = {"mbps": value * 8 / 1e6, "how": f"tc {kind} {key} (root qdisc)"}  # bytes per second
        elif kind == "htb":
            ceiling = htb_ceiling(classes.get(q["dev"], ""))
            if ceiling:
                out[q["dev"]] = {"mbps": ceiling, "how": "tc htb ceil of its root classes"}
    return out


def read_all() -> dict:
    """This network namespace's shaped interfaces: ``{"interfaces": {name: {...}}, "notes": [...]}``."""
    text = _tc("-j", "qdisc", "show")
    if text is None:
        return {"interfaces": {}, "notes": ["tc (iproute2) not found or failed: shaped rates unknown"]}
    try:
        qdiscs = json.loads(text or "[]")
    except ValueError:
        return {"interfaces": {}, "notes": ["tc -j qdisc show printed no JSON: shaped rates unknown"]}
    classes = {q["dev"]: _tc("class", "show", "dev", q["dev"]) or "" for q in qdiscs
               if isinstance(q, dict) and q.get("kind") == "htb" and q.get("root") and isinstance(q.get("dev"), str)}
    return {"interfaces": parse(qdiscs, classes), "qdiscs": qdiscs, "classes": classes, "notes": []}


def from_recorded(path: Path) -> dict:
    """A recorded host's shaping (``tc.json``: ``{"qdiscs": [...], "classes": {dev: text}}``), if recorded."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"interfaces": {}, "notes": []}
    return {"interfaces": parse(data.get("qdiscs", []), data.get("classes", {})), "notes": []}

"""Helpers of tests/test_hostile_findings.py: a ``microbench`` command in a guarded subprocess, and inputs built
by mutating real records as shared/reviews/hostile-input-2.md does.

``mb`` is test_hostile_inputs.py's wrapper (a wall-clock limit of ``LIMIT_S``, the command's own peak RSS from
VmHWM) with what the second review's attacks need besides: the output kept as bytes (an escape or a non-UTF-8
name must be seen as it came, not decoded away), resource limits set the way a shell's ``ulimit`` sets them,
stdout sent to a file such as /dev/full, stdin from /dev/null (``/proc/self/fd/0`` is then a device), and a
guard that refuses to start an MPI launcher and records every command the verb tried to start.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_hostile_inputs import BASE_RSS, LIMIT_S  # the same guard and memory bound as the first review's tests

REPO = Path(__file__).resolve().parent.parent  #: this tree's microbench, whatever the venv has installed
#: launchers the guard refuses to start (``mb(..., guard_launch=True)``)
LAUNCHERS = ("mpiexec", "mpirun", "prterun", "orterun", "srun", "torchrun", "mpiexec.hydra")

_WRAPPER = r"""
import atexit, json, os, resource, runpy, subprocess, sys

def _peak():
    try:
        for line in open('/proc/self/status'):
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

atexit.register(lambda: open(os.environ['HOSTILE_RSS'], 'w').write(str(_peak())))
_log = os.environ.get('HOSTILE_LAUNCH_LOG')
if _log:
    _launchers = set(os.environ['HOSTILE_LAUNCHERS'].split(','))

    class _Guard(subprocess.Popen):
        def __init__(self, args, *a, **k):
            argv = [str(x) for x in ([args] if isinstance(args, (str, bytes, os.PathLike)) else args)]
            with open(_log, 'a') as f:
                f.write(json.dumps(argv) + '\n')
            if any(os.path.basename(x) in _launchers for x in argv[:3]):
                raise PermissionError(1, 'the test guard refuses to start a launcher')
            super().__init__(args, *a, **k)

    subprocess.Popen = _Guard
sys.argv = ['microbench', *sys.argv[1:]]
runpy.run_module('microbench', run_name='__main__', alter_sys=True)
"""


@dataclass
class Done:
    """A finished command: exit status, output (bytes as they came, and decoded with surrogateescape)."""

    returncode: int
    out: bytes
    err: bytes
    seconds: float
    peak_rss: int | None  #: bytes; None when the command did not reach its exit handlers
    launched: list = field(default_factory=list)  #: commands it tried to start (with guard_launch)

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "surrogateescape")

    @property
    def stderr(self) -> str:
        return self.err.decode("utf-8", "surrogateescape")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def errors(self) -> list[str]:
        """stderr lines other than notes."""
        return [line for line in self.stderr.splitlines() if not line.startswith("# note:")]

    def notes(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("# note:")]


def mb(cwd: Path, *args, env: dict | None = None, rss_bound: int | None = BASE_RSS, ulimit: str | None = None,
       stdout_to: str | None = None, guard_launch: bool = False, timeout: float = LIMIT_S) -> Done:
    """``microbench ARGS`` run in ``cwd`` (Path arguments made relative to it, so messages name FILE as given),
    within ``timeout`` seconds (a hang fails the test); asserts the command's own peak RSS is under ``rss_bound``.

    ``ulimit``: options of bash's ulimit (e.g. "-v 4000000", "-f 8") applied before the command starts;
    ``stdout_to``: a path the command's stdout goes to (/dev/full); ``guard_launch``: the command may not start
    an MPI launcher (the attempt is refused and recorded in ``Done.launched``)."""
    cwd = Path(cwd)
    stamp = f"{time.monotonic_ns()}"
    rss_file = cwd / f".rss-{stamp}"
    launch_log = cwd / f".launch-{stamp}"
    argv = [os.path.relpath(a, cwd) if isinstance(a, Path) else str(a) for a in args]
    cmd = [sys.executable, "-c", _WRAPPER, *argv]
    if ulimit or stdout_to:
        shell = (f"ulimit {ulimit}; " if ulimit else "") + 'exec "$@"' + (f" > {shlex.quote(stdout_to)}"
                                                                          if stdout_to else "")
        cmd = ["bash", "-c", shell, "bash", *cmd]
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, "HOSTILE_RSS": str(rss_file),
                "MPLCONFIGDIR": str(cwd / ".mpl"), **(env or {})}
    if ulimit and "-v" in ulimit:  # OpenBLAS reserves address space per core: keep a limit meaning the same anywhere
        full_env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if guard_launch:
        full_env.update(HOSTILE_LAUNCH_LOG=str(launch_log), HOSTILE_LAUNCHERS=",".join(LAUNCHERS))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=full_env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: microbench {' '.join(argv)}\nstdout:\n"
                    f"{out[-3000:].decode(errors='replace')}\nstderr:\n{err[-3000:].decode(errors='replace')}")
    seconds = time.monotonic() - start
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing the command started outlives it
    except ProcessLookupError:
        pass
    peak = int(rss_file.read_text()) * 1024 if rss_file.exists() else None
    rss_file.unlink(missing_ok=True)
    launched = [json.loads(line) for line in launch_log.read_text().splitlines()] if launch_log.exists() else []
    launch_log.unlink(missing_ok=True)
    done = Done(proc.returncode, out, err, seconds, peak, launched)
    if rss_bound is not None and peak is not None:
        assert peak < rss_bound, \
            f"peak RSS {peak >> 20} MiB over the bound {rss_bound >> 20} MiB\n{done.output[-3000:]}"
    return done


def error_line(done: Done, pattern: str) -> str:
    """``one_error`` for a ``Done``: exit 2 and one stderr line (notes aside) ``microbench: error: PATTERN``;
    returns the line."""
    errors = done.errors()
    assert done.returncode == 2, f"exit {done.returncode}, expected 2\n{done.output[-4000:]}"
    assert len(errors) == 1, f"expected one error line, got {len(errors)}:\n{done.stderr[-4000:]}"
    assert re.fullmatch(f"microbench: error: {pattern}", errors[0]), \
        f"error line does not match {pattern!r}:\n{errors[0][:2000]}"
    return errors[0]


def clean_exit(done: Done, *codes: int) -> None:
    """Exit status one of ``codes`` (0 by default); never 3 (internal) nor a signal. Where a verdict is accepted
    (0 or 1), so is 4, INCONCLUSIVE: these tests judge that hostile input ends cleanly, not the verdict (a gate
    that could not see says so: issue 39)."""
    codes = codes or (0,)
    codes = (*codes, 4) if {0, 1} & set(codes) else codes
    assert done.returncode in codes, f"exit {done.returncode}, expected one of {codes}\n{done.output[-4000:]}"


# ------------------------------------------------------------------ records
def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def write_records(path: Path, records: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(records))
    return path


def results(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("type") == "result"]


def relabel(records: list[dict], run_id: str) -> list[dict]:
    """A deep copy of one run's records under another run id."""
    out = copy.deepcopy(records)
    for r in out:
        if "run_id" in r:
            r["run_id"] = run_id
    return out


LATENCY_STATS = ("avg", "min", "max", "p10", "p50", "p90", "p99", "fastest", "slowest")


def scale_latency(rec: dict, k: float) -> dict:
    """``rec`` (a result, changed in place) ``k`` times slower, consistently: every latency statistic times k,
    algbw and busbw over k (so the record still satisfies algbw = algbw_bytes / avg and the busbw factor)."""
    lat = rec["latency_us"]
    for key in LATENCY_STATS:
        if isinstance(lat.get(key), float):
            lat[key] *= k
    algbw = rec["algbw_bytes"] / (lat["avg"] * 1e-6) / 1e9
    rec["algbw_gbps"], rec["busbw_gbps"] = algbw, algbw * rec["busbw_factor"]
    return rec


class _Plan:
    """What ``run_pairs`` knows of its participants, for microbench's own matrix fields."""

    def __init__(self, n: int):
        self.labels = [f"rank {i}" for i in range(n)]
        self.unit, self.members, self.serial, self.schedule = "rank", list(range(n)), False, [[]] * (n - 1)


def pairs_with_matrix(rec: dict, matrix: list[list[float | None]]) -> dict:
    """A copy of a real pairs latency record whose matrix is ``matrix``, every field derived from the matrix
    the way ``microbench run pairs`` derives it (latency statistics over the cells, outliers, node outliers,
    labels, ranks)."""
    from microbench.run.diagnostics.pairs import METRICS, _latency_over_pairs, _matrix_fields

    assert rec["metric"] == "latency"
    n = len(matrix)
    cells = [v for i, row in enumerate(matrix) for j, v in enumerate(row) if j > i and v is not None]
    out = copy.deepcopy(rec)
    out.pop("repeats", None)  # one pass: the matrix given is the whole test (issue 39's passes are the real run's)
    out.update(_matrix_fields(_Plan(n), METRICS[0], matrix))
    out["latency_us"] = _latency_over_pairs(cells)
    out["ranks"] = n
    out["rounds"] = n - 1
    algbw = out["algbw_bytes"] / (out["latency_us"]["avg"] * 1e-6) / 1e9
    out["algbw_gbps"] = out["busbw_gbps"] = algbw * 1.0
    return out


def matrix_of(n: int, value: float, bad: dict | None = None) -> list[list[float | None]]:
    """An n x n symmetric matrix of ``value`` (None on the diagonal), ``bad`` {(i, j): v} set both ways."""
    m = [[None if i == j else value for j in range(n)] for i in range(n)]
    for (i, j), v in (bad or {}).items():
        m[i][j] = m[j][i] = v
    return m


#: what the review's reproducers must never print raw: ESC, bidi controls, zero-width characters
FORBIDDEN = ["\x1b", *map(chr, range(0x200B, 0x2010)), *map(chr, range(0x202A, 0x202F)),
             *map(chr, range(0x2066, 0x206A)), "\u2028", "\u2029", "\ufeff"]
#: one of each, and no blank (which would end an OMB version or an NCCL host name before the payload)
PAYLOAD = "\x1b[2J\x1b[32mALL_PASS\x1b[0m\u202eSSAP\u202c\u2066x\u2069\u200bz"


def raw_forbidden(done: Done) -> list[str]:
    """The forbidden characters that reached stdout or stderr, as they came (bytes decoded as UTF-8)."""
    text = (done.out + done.err).decode("utf-8", "replace")
    return sorted({f"U+{ord(c):04X}" for c in FORBIDDEN if c in text})

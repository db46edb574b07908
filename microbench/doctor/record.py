"""The ``doctor`` record (``records.model.DoctorRecord``): built through the model (``relations.make``) and written
whole by the one writer (``records.writer.append_whole``)."""

from __future__ import annotations

import shlex

import microbench
from microbench.cluster import facts
from microbench.errors import UsageError
from microbench.records import model, relations
from microbench.records.writer import append_whole, open_append


def build(coordinator, failed, wall_s: float) -> dict:
    """The record of one doctor launch from its coordinator's results."""
    job, s = coordinator.job, coordinator.s
    launcher = coordinator.launcher
    zero = job.ranks.get(min(job.ranks)) if job.ranks else None
    verdict = "interrupted" if coordinator.interrupted else ("pass" if failed is None else "fail")
    return relations.make(
        model.DoctorRecord, schema=model.SCHEMA_VERSION, run_id=coordinator.run_id,
        microbench_version=microbench.__version__, time_utc=facts.utc_now(),
        command=shlex.join(["microbench", *s.argv]), launcher=zero.launcher if zero else None,
        launch_command=shlex.join(launcher.command) if launcher and launcher.command else None,
        ranks_expected=job.expected or None, ranks=len(job.ranks), hosts=list(job.ranks_per_host),
        ranks_per_host=job.ranks_per_host, timeout_s=s.timeout, verdict=verdict,
        failed_layer=failed.layer.number if failed else None,
        layers=[r.as_record() for r in coordinator.results], wall_s=round(wall_s, 3))


def write(path: str, record: dict) -> None:
    """Append the record to ``path`` (missing folders made, never through a link)."""
    try:
        append_whole(path, [record])
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror or exc})") from exc


def check_writable(path: str) -> None:
    """Refuse ``--out`` before any rank starts (the file is made, empty, if it was not there)."""
    import os

    try:
        os.close(open_append(path))
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror or exc})") from exc

"""Handlers for the exactly-once tests' worker subprocesses.

Files are the signals, as in tests/worker_app: a handler writes ``payload["started"]`` (its
attempt and its database backend's pid) once its effect row is written inside its
transaction, and waits until ``payload["release"]`` exists. A test observes the open
transaction in pg_stat_activity by that pid, and kills or releases from there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import connection

from runledger_django import ContinueJob, JobContext, TerminalJobError, job_handler

from . import EFFECT, LATE, SLICES
from .models import Effect

POLL_SECONDS = 0.01
MAX_BLOCK_SECONDS = 120.0


def write_effect(job: JobContext) -> Effect:
    payload = job.payload if isinstance(job.payload, dict) else {}
    return Effect.objects.create(
        job_id=job.job_id,
        run_number=job.run_number,
        attempt=job.attempt,
        worker_id=job.worker_id,
        gate=payload.get("gate") if job.attempt == 1 else None,  # only the first attempt waits
    )


def _hold(job: JobContext) -> None:
    """Say we are here (attempt and backend pid), then wait for the release file."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    started = payload.get("started")
    if started:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            row = cursor.fetchone()
        line = f"{job.job_id} {job.attempt} {row[0] if row else 0} {os.getpid()}\n"
        with Path(started).open("a", encoding="utf-8") as handle:
            handle.write(line)
    release = payload.get("release")
    if not release:
        return
    give_up = time.monotonic() + MAX_BLOCK_SECONDS
    while not Path(release).exists():
        if time.monotonic() > give_up:
            raise TerminalJobError("the test never released this handler")
        time.sleep(POLL_SECONDS)


@job_handler(EFFECT, atomic=True, max_attempts=5, timeout_seconds=60)
def effect(job: JobContext) -> dict[str, Any]:
    """Write the effect row, hold (optionally), succeed: the row commits with the SUCCEEDED.

    ``payload["sync_commit"]`` makes this transaction's COMMIT wait for a synchronous standby
    (the outage test names one that never comes): committed locally, unanswered."""
    if isinstance(job.payload, dict) and job.payload.get("sync_commit") and job.attempt == 1:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = on")
    row = write_effect(job)
    _hold(job)
    return {"effect": row.pk, "attempt": job.attempt}


@job_handler(LATE, max_attempts=5, timeout_seconds=60)
def late(job: JobContext) -> None:
    """Slow work outside any transaction first, then the effect in an atomic block, which
    holds (optionally) with its transaction open."""
    job.set_stage("calling the payment provider")
    with job.complete_atomically({"late": True}):
        write_effect(job)
        _hold(job)


@job_handler(SLICES, atomic=True, max_attempts=2, timeout_seconds=60)
def slices(job: JobContext) -> dict[str, Any]:
    """One effect per slice; the slice's checkpoint commits with its effect."""
    done = int((job.checkpoint or {}).get("done", 0))
    write_effect(job)
    if done + 1 < int(job.payload["slices"]):
        raise ContinueJob(checkpoint={"done": done + 1})
    return {"slices": done + 1}

"""The handler the outage tests' workers run: one query of its own, so a connection that an
outage killed would show up as a failed attempt; otherwise every job succeeds."""

from __future__ import annotations

from django.db import connection

from runledger_django import JobContext, job_handler

JOB_TYPE = "outage.noop"


@job_handler(JOB_TYPE, max_attempts=3, timeout_seconds=30)
def noop(job: JobContext) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"n": int(job.payload.get("n", 0))}

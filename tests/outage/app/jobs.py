"""The handler the outage tests' workers run: one query of its own, so a connection that an
outage killed would show up as a failed attempt; otherwise every job succeeds."""

from __future__ import annotations

import os

from django.db import connection

from runledger_django import JobContext, job_handler

JOB_TYPE = "outage.noop"


@job_handler(JOB_TYPE, max_attempts=3, timeout_seconds=30)
def noop(job: JobContext) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"n": int(job.payload.get("n", 0))}


if os.environ.get("RUNLEDGER_OUTAGE_SCHEDULES") == "1":
    # Only the schedules' outage test declares it: the other outage tests count every job.
    from runledger_django import schedule

    schedule(
        "outage-every-second", JOB_TYPE, cron="* * * * * *", catch_up="all", catch_up_limit=1000
    )

"""The handler the outage tests' workers run: it does nothing, so every job succeeds."""

from __future__ import annotations

from runledger_django import JobContext, job_handler

JOB_TYPE = "outage.noop"


@job_handler(JOB_TYPE, max_attempts=3, timeout_seconds=30)
def noop(job: JobContext) -> dict[str, int]:
    return {"n": int(job.payload.get("n", 0))}

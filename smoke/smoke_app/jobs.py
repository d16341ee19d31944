"""The handler runledger_worker autodiscovers in the smoke project."""

from __future__ import annotations

from typing import Any

from runledger_django import JobContext, job_handler

from . import ECHO


@job_handler(ECHO, max_attempts=2, timeout_seconds=30)
def echo(job: JobContext) -> dict[str, Any]:
    """Succeed with the payload as output, so the test can read what ran."""
    return {"echo": job.payload}

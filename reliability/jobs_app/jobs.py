"""The handlers of every harness job type: they journal each run in the harness's own table.

A handler inserts a ``started`` row before it does anything and a ``finished`` row (with what
it is about to return or raise) at the end, each committed on its own (autocommit) in the table
that ``reliability.checks`` creates, so a run that was killed still shows that it started.
What a run does is its plan (``reliability.common.plan_for``): sleep, write progress through
the lease fence, and fail on purpose on its first attempts, so retries happen and the checks
can tell them from accidents.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from django.db import connection

from runledger_django import JobContext, RetryJob, job_handler

from .. import atomic  # noqa: F401  (registers the atomic=True handler of its job type)
from ..common import ATOMIC, INSERT_HANDLER_RUN, JOB_TYPES, MAX_ATTEMPTS, plan_for


class DeliberateFailureError(Exception):
    """Raised by a plan that fails on purpose: the worker retries with its backoff policy."""


def _record(job: JobContext, phase: str, result: str | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            INSERT_HANDLER_RUN,
            [
                job.job_id,
                job.job_type,
                job.run_number,
                job.attempt,
                job.worker_id,
                os.getpid(),
                phase,
                result,
            ],
        )


def run_job(job: JobContext) -> dict[str, Any]:
    """Run one attempt as its plan says; the output names the attempt that succeeded."""
    plan = plan_for(str(job.job_id), job.attempt)
    _record(job, "started")
    if plan.sleep:
        time.sleep(plan.sleep)
    if plan.writes:
        job.set_progress(1, 2)
        job.save_checkpoint({"attempt": job.attempt})
    if plan.fail == "retry":
        _record(job, "finished", "retry")
        raise RetryJob("deliberate retry", after=timedelta(seconds=plan.retry_after))
    if plan.fail == "raise":
        _record(job, "finished", "raise")
        raise DeliberateFailureError(f"deliberate failure of attempt {job.attempt}")
    _record(job, "finished", "success")
    return {"attempt": job.attempt, "worker_id": job.worker_id}


for _job_type in JOB_TYPES:
    if _job_type != ATOMIC:
        job_handler(_job_type, max_attempts=MAX_ATTEMPTS, timeout_seconds=600)(run_job)

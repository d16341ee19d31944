"""A task's ``TaskResult``, rebuilt from its intent, its job and the job's attempt rows.

The result id is the intent id, so it is stable before promotion, after it and after the run;
everything else is read from the rows every time (``refresh()`` must see current data):

- intent PENDING, job PENDING (new or waiting for a retry): READY;
- job LEASED: RUNNING;
- job SUCCEEDED: SUCCESSFUL, ``return_value`` is the job's output;
- job DEAD_LETTERED or CANCELED, or the intent CONFLICTED (promotion refused it): FAILED.

Each attempt row is one entry of ``worker_ids`` (so ``attempts`` counts the running attempt,
as Django's workers do), and each failed attempt one ``TaskError`` with the exception's class
path and traceback; a failure with no exception behind it (a timeout, an expired lease) gets
``RunledgerError`` and its code and message instead.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.utils import timezone

from ..domain import AttemptOutcome, IntentStatus, JobStatus
from ..errors import RunledgerError

if TYPE_CHECKING:
    from ..models import Job, JobAttempt, JobEnqueueIntent

RUNLEDGER_ERROR_PATH = f"{RunledgerError.__module__}.{RunledgerError.__qualname__}"
"""The class path of errors that have no exception of their own (timeouts, lost leases,
conflicts, cancellations): ``TaskError.exception_class`` still imports it."""

_FAILED_OUTCOMES = frozenset({AttemptOutcome.RETRY_SCHEDULED, AttemptOutcome.DEAD_LETTERED})
_JOB_STATUS = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.LEASED: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD_LETTERED: TaskResultStatus.FAILED,
    JobStatus.CANCELED: TaskResultStatus.FAILED,
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def enqueued_at_of(result_id: uuid.UUID, fallback: dt.datetime | None) -> dt.datetime | None:
    """When the task was enqueued: the millisecond a UUIDv7 id carries (made by the enqueue
    itself, so ``enqueue()`` knows it without reading the row back), else ``fallback``."""
    value = result_id.int
    if (value >> 76) & 0xF != 7:  # the version nibble (the uuid module's property is slower)
        return fallback
    return django_time(_EPOCH + dt.timedelta(milliseconds=value >> 80))


def django_time(value: dt.datetime) -> dt.datetime:
    """An aware time as Django hands times out: aware with USE_TZ, else naive local time."""
    return value if settings.USE_TZ else timezone.make_naive(value)


def error_from_failure(code: str | None, message: str | None) -> TaskError:
    """A TaskError for a failure that has no exception (and so no traceback) of its own."""
    text = ": ".join(part for part in (code, message) if part) or "failed"
    return TaskError(
        exception_class_path=RUNLEDGER_ERROR_PATH, traceback=f"RunledgerError: {text}\n"
    )


def attempt_errors(attempts: Sequence[JobAttempt]) -> list[TaskError]:
    errors = []
    for attempt in attempts:
        if attempt.outcome not in _FAILED_OUTCOMES:
            continue
        if attempt.error_class and attempt.error_traceback:
            errors.append(
                TaskError(
                    exception_class_path=attempt.error_class,
                    traceback=attempt.error_traceback,
                )
            )
        else:
            errors.append(error_from_failure(attempt.error_code, attempt.error_message))
    return errors


def build_result(
    *,
    task: Task[..., Any],
    result_id: str,
    enqueued_at: dt.datetime | None,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    intent: JobEnqueueIntent | None,
    job: Job | None,
    attempts: Sequence[JobAttempt],
) -> TaskResult[..., Any]:
    """The TaskResult of what the rows say now (see the module docstring)."""
    errors = attempt_errors(attempts)
    finished_at: dt.datetime | None = None
    return_value: Any = None
    if job is None:
        if intent is not None and intent.status == IntentStatus.CONFLICTED:
            status = TaskResultStatus.FAILED
            finished_at = intent.conflicted_at or intent.updated_at
            errors.append(error_from_failure(intent.last_error_code, intent.last_error_message))
        else:
            status = TaskResultStatus.READY
    else:
        status = _JOB_STATUS[JobStatus(job.status)]
        if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
            finished_at = job.finished_at
        if status == TaskResultStatus.SUCCESSFUL:
            return_value = job.output
        elif job.status == JobStatus.CANCELED:
            errors.append(error_from_failure(None, "The job was canceled."))
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=result_id,
        status=status,
        enqueued_at=enqueued_at,
        started_at=attempts[0].leased_at if attempts else None,
        finished_at=finished_at,
        last_attempted_at=attempts[-1].leased_at if attempts else None,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=errors,
        worker_ids=[attempt.worker_id for attempt in attempts],
    )
    object.__setattr__(result, "_return_value", return_value)  # init=False, as Django's do
    return result

"""The reads behind a Django task's result: its intent with the promoted job, the job of a task
enqueued without an intent, its attempts, and the enabled task job types.

The Tasks backend (``tasks/``) rebuilds ``TaskResult`` objects from these rows; this module is
where its reads meet the database, so a database error becomes a classified
``RunledgerError`` here. JSON Python cannot decode (an integer past its int-to-str digit
limit) surfaces as ``ValueError``, which the backend reports in its own terms.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import DatabaseError
from django.db.models import Q

from ..db.classify import classify
from ..models import Job, JobAttempt, JobDefinition, JobEnqueueIntent

RESULT_CONTEXT = "read task result"


def intent_with_job(intent_id: uuid.UUID, *, using: str) -> JobEnqueueIntent | None:
    """The intent ``intent_id`` with its promoted job selected, or None.

    Raises:
        RunledgerError: a classified database error.
        ValueError: a stored JSON value does not decode.
    """
    try:
        return (
            JobEnqueueIntent.objects.using(using)
            .select_related("promoted_job")
            .filter(pk=intent_id)
            .first()
        )
    except DatabaseError as exc:
        raise classify(exc, RESULT_CONTEXT) from exc


def intent_or_job(job_id: uuid.UUID, *, using: str) -> tuple[JobEnqueueIntent | None, Job | None]:
    """The intent promoted to job ``job_id`` (with the job selected); or, when no intent was,
    the job itself; or neither.

    Raises:
        RunledgerError: a classified database error.
        ValueError: a stored JSON value does not decode.
    """
    try:
        intent = (
            JobEnqueueIntent.objects.using(using)
            .select_related("promoted_job")
            .filter(promoted_job_id=job_id)
            .first()
        )
        job = None if intent is not None else Job.objects.using(using).filter(pk=job_id).first()
    except DatabaseError as exc:
        raise classify(exc, RESULT_CONTEXT) from exc
    return intent, job


def attempts_of(job: Job | None, *, using: str) -> list[JobAttempt]:
    """The job's attempt rows in the order they ran (every run number), or none before the
    first claim (no query then).

    Raises:
        RunledgerError: a classified database error.
    """
    if job is None or (job.attempt == 0 and job.run_number == 1):
        return []
    try:
        return list(
            JobAttempt.objects.using(using)
            .filter(job_id=job.id)
            .order_by("run_number", "attempt")
            .only(
                "worker_id",
                "leased_at",
                "outcome",
                "error_code",
                "error_message",
                "error_class",
                "error_traceback",
            )
        )
    except DatabaseError as exc:
        raise classify(exc, "read task attempts") from exc


def enabled_job_types(prefixes: Sequence[str], *, using: str) -> list[str]:
    """The enabled job definitions whose job type starts with one of ``prefixes``.

    One query: a LIKE prefix match on the definitions' primary key, served by the
    text_pattern_ops index Django creates for a text primary key, whatever the collation.

    Raises:
        RunledgerError: a classified database error.
    """
    condition = Q()
    for prefix in prefixes:
        condition |= Q(job_type__startswith=prefix)
    try:
        return list(
            JobDefinition.objects.using(using)
            .filter(condition, is_enabled=True)
            .values_list("job_type", flat=True)
        )
    except DatabaseError as exc:
        raise classify(exc, "list task job types") from exc

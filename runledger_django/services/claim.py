"""Claiming work: definitions for registered job types, and leasing due jobs (reference 3)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import DatabaseError

from ..db import job_queries
from ..db.classify import classify
from ..domain import PAGE_LIMIT_MAX, ClaimedJob, JobDefaults, JobLease
from ..models import JobDefinition
from ..validation import validate_job_types, validate_page
from ._lease import (
    DEFAULT_USING,
    transition,
    validate_lease_seconds,
    validate_worker_id,
)

RESOURCE_HEAD_WINDOW_MIN = 1024
RESOURCE_HEAD_WINDOW_MAX = 16384
RESOURCE_HEAD_WINDOW_FACTOR = 64


def resource_head_window(limit: int) -> int:
    """How many free-keyed jobs a claim looks through for key heads (reference 13)."""
    return max(
        RESOURCE_HEAD_WINDOW_MIN,
        min(RESOURCE_HEAD_WINDOW_MAX, limit * RESOURCE_HEAD_WINDOW_FACTOR),
    )


def ensure_job_definitions(
    defaults: Iterable[JobDefaults], *, using: str = DEFAULT_USING
) -> list[str]:
    """Create a definition for every job type that has none, with the handler's defaults.

    An existing definition is never touched: an operator's edits (disabled, other defaults)
    win over the code. Returns the job types that were created.

    Transaction: one autocommit INSERT ... ON CONFLICT DO NOTHING (or the caller's block).
    """
    wanted = list(defaults)
    rows = [
        JobDefinition(
            job_type=item.job_type,
            **{
                field: value
                for field, value in (
                    ("max_attempts", item.max_attempts),
                    ("default_timeout_seconds", item.timeout_seconds),
                    ("default_priority", item.priority),
                )
                if value is not None
            },
        )
        for item in wanted
    ]
    if not rows:
        return []
    types = validate_job_types([item.job_type for item in wanted])
    try:
        existing = set(
            JobDefinition.objects.using(using)
            .filter(job_type__in=types)
            .values_list("job_type", flat=True)
        )
        missing = [row for row in rows if row.job_type not in existing]
        if missing:
            JobDefinition.objects.using(using).bulk_create(missing, ignore_conflicts=True)
    except DatabaseError as exc:
        raise classify(exc, "create job definitions") from exc
    return [row.job_type for row in missing]


def claim_jobs(
    job_types: Sequence[str],
    *,
    worker_id: str,
    limit: int,
    lease_seconds: int,
    using: str = DEFAULT_USING,
) -> list[ClaimedJob]:
    """Lease up to ``limit`` due jobs of ``job_types`` for ``worker_id`` and mark them running.

    Highest priority first, then the earliest ``next_run_at``. Rows other claimers hold are
    skipped, never waited for. At most one job per execution resource key is leased at a
    time, across every worker and organization; a keyed job whose key is busy stays PENDING
    and does not take a slot, so a batch can come back short.

    Transaction: one statement, its own transaction (or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_lease_duration``, ``job.invalid_pagination``,
            ``job.invalid_job_type`` or ``job.invalid_argument`` before any SQL; a classified
            database error.
    """
    types = validate_job_types(job_types)
    page = validate_page(limit, 0, max_limit=PAGE_LIMIT_MAX)
    seconds = validate_lease_seconds(lease_seconds)
    worker = validate_worker_id(worker_id)
    if not types:
        return []
    rows = transition(
        using,
        job_queries.CLAIM_JOBS,
        {
            "job_types": types,
            "limit": page.limit,
            "head_window": resource_head_window(page.limit),
            "worker_id": worker,
            "lease_seconds": seconds,
        },
        context="claim jobs",
    )
    return [_decode_claimed(row, worker) for row in rows]


def _decode_claimed(row: tuple[Any, ...], worker_id: str) -> ClaimedJob:
    (
        job_id,
        run_number,
        attempt,
        job_type,
        organization_id,
        payload_text,
        max_attempts,
        timeout_seconds,
        checkpoint_text,
        claimed_at,
        lease_expires_at,
    ) = row
    decode_error = None
    try:
        payload = json.loads(payload_text)
        checkpoint = None if checkpoint_text is None else json.loads(checkpoint_text)
    except ValueError as exc:
        # jsonb always parses, but not always in Python (an integer past the int-to-str digit
        # limit): the job is already leased, so its executor dead-letters it.
        payload = checkpoint = None
        decode_error = f"payload or checkpoint does not decode ({type(exc).__name__})"
    return ClaimedJob(
        lease=JobLease(
            job_id=uuid.UUID(str(job_id)),
            run_number=run_number,
            attempt=attempt,
            worker_id=worker_id,
        ),
        job_type=job_type,
        organization_id=organization_id,
        payload=payload,
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
        checkpoint=checkpoint,
        claimed_at=claimed_at,
        lease_expires_at=lease_expires_at,
        decode_error=decode_error,
    )

"""Claiming work: definitions for registered job types, and leasing due jobs (reference 3)."""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from django.db import DatabaseError, connections

from ..db import lifecycle_queries
from ..db.classify import classify, is_session_fatal
from ..db.transaction import run_capped_together
from ..domain import PAGE_LIMIT_MAX, ClaimedJob, JobDefaults, JobLease
from ..errors import CATALOG, Code, RunledgerError
from ..models import JobDefinition
from ..validation import validate_job_types, validate_page
from ._lease import (
    DEFAULT_USING,
    LOCK_CAP_MS,
    STATEMENT_CAP_MS,
    leases_params,
    transition,
    validate_lease_seconds,
    validate_worker_id,
)
from .lifecycle import complete_jobs_success

logger = logging.getLogger(__name__)

UNCLAIMABLE_CONSTRAINTS = frozenset(
    {"chk_job_queue_values_in_range", "uq_job_attempts_job_run_attempt"}
)
"""A claim of one job that one of these refuses failed on the job's own row: its attempt would
pass the counter bound, or an attempt row of that number exists already (a hand-made reset).
A constraint elsewhere (on events, say) refuses every job alike; it never dead-letters one."""
FALLBACK_SPARE_CANDIDATES = 16
"""Due jobs the fallback looks at beyond the batch, so jobs it dead-letters (or finds busy) do
not leave the batch short: a worker asking for one job still gets the healthy one behind."""
NUMERIC_OUT_OF_RANGE = "22003"
_UNKNOWN_STEP = uuid.UUID(int=0)
"""Marks a lease as possibly a workflow job's, so its completion goes the workflow way (the
statement returns the real step id)."""
"""The attempt increment overflowing, on a table that lacks the counter bound."""

PEEK_HORIZON_MAX_SECONDS = 86_400

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

    If the statement fails for something other than the session (a job whose stored values
    cannot be leased), the due jobs are claimed one by one instead, and a job whose claim
    alone fails on its own values is dead-lettered (``job.invalid_persisted_row``).

    Transaction: one statement, its own transaction (or the caller's atomic block); the
    fallback is one statement per job.

    Raises:
        RunledgerError: ``job.invalid_lease_duration``, ``job.invalid_pagination``,
            ``job.invalid_job_type`` or ``job.invalid_argument`` before any SQL; a classified
            database error.
    """
    params = _claim_params(job_types, worker_id, limit, lease_seconds)
    if params is None:
        return []
    try:
        rows = transition(using, lifecycle_queries.CLAIM_JOBS, params, context="claim jobs")
    except RunledgerError as error:
        if error.__cause__ is None or is_session_fatal(error.__cause__):
            raise
        rows = _claim_row_by_row(params, using)
    return [_decode_claimed(row, params["worker_id"]) for row in rows]


def seconds_until_due(
    job_types: Sequence[str], *, horizon_seconds: float, using: str = DEFAULT_USING
) -> float | None:
    """Seconds until the earliest PENDING job of ``job_types`` comes due, looking at most
    ``horizon_seconds`` ahead: 0 or less when one is due now (it may still be held back by its
    resource key), None when none comes due within the horizon.

    A quiet worker's look for work that no notification announced (another worker's retry
    coming due): one autocommit read that locks nothing, so it is cheaper than a claim that
    finds nothing.

    Raises:
        RunledgerError: ``job.invalid_job_type`` or ``job.invalid_argument`` before any SQL;
            a classified database error.
    """
    types = validate_job_types(job_types)
    if (
        isinstance(horizon_seconds, bool)
        or not isinstance(horizon_seconds, int | float)
        or not math.isfinite(horizon_seconds)
        or not 0 <= horizon_seconds <= PEEK_HORIZON_MAX_SECONDS
    ):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT,
            f"horizon_seconds must be a number of seconds from 0 to {PEEK_HORIZON_MAX_SECONDS}",
        )
    if not types:
        return None
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(
                lifecycle_queries.PEEK_DUE_JOBS,
                {"job_types": types, "horizon_seconds": float(horizon_seconds)},
            )
            row = cursor.fetchone()
    except DatabaseError as exc:
        raise classify(exc, "look for due jobs") from exc
    return None if row is None or row[0] is None else float(row[0])


def complete_and_claim(
    successes: Sequence[tuple[JobLease, str | None]],
    job_types: Sequence[str],
    *,
    limit: int,
    lease_seconds: int,
    using: str = DEFAULT_USING,
) -> tuple[set[uuid.UUID], list[ClaimedJob]]:
    """Record the successes of one worker (``complete_jobs_success``) and lease up to
    ``limit`` next jobs for it (``claim_jobs``), in one transaction and one round trip: on a
    busy queue a finished job's slot is refilled for the cost of one commit, not two.

    Returns the ids recorded (the fence refused the others) and the jobs claimed.

    Transaction: its own (or the caller's atomic block). Nothing is recorded or claimed when
    either part fails; there is no row-by-row fallback here: the caller writes the successes
    alone and claims through ``claim_jobs``, which isolates a job that cannot be leased.

    Raises:
        RunledgerError: ``job.invalid_argument`` (and the claim's validation codes) before
            any SQL; a classified database error.
    """
    leases = leases_params([lease for lease, _ in successes])
    if not leases["job_ids"]:
        return set(), []
    claim = _claim_params(job_types, leases["worker_id"], limit, lease_seconds)
    if claim is None:
        return complete_jobs_success(successes, using=using), []
    if any(lease.workflow_step_id is not None for lease, _ in successes):
        # A workflow job's success releases its dependents in its own transaction first.
        recorded = complete_jobs_success(successes, using=using)
        return recorded, claim_jobs(
            job_types,
            worker_id=leases["worker_id"],
            limit=limit,
            lease_seconds=lease_seconds,
            using=using,
        )
    done, claimed = run_capped_together(
        using,
        (lifecycle_queries.COMPLETE_SUCCESS_MANY, lifecycle_queries.CLAIM_JOBS),
        {**claim, **leases, "outputs": [text for _, text in successes], "workflow": False},
        lock_ms=LOCK_CAP_MS,
        statement_ms=STATEMENT_CAP_MS,
        tag="/* runledger:complete_and_claim */\n",
        context="complete jobs and claim the next",
    )
    recorded = {row[0] for row in done}
    missed = [item for item in successes if item[0].job_id not in recorded]
    if missed:
        # A workflow job behind a lease that did not say so was left alone: complete it with
        # its release (a lease truly lost is refused again).
        recorded |= complete_jobs_success(
            [(replace(lease, workflow_step_id=_UNKNOWN_STEP), text) for lease, text in missed],
            using=using,
        )
    return recorded, [_decode_claimed(row, claim["worker_id"]) for row in claimed]


def _claim_params(
    job_types: Sequence[str], worker_id: str, limit: int, lease_seconds: int
) -> dict[str, Any] | None:
    """The claim statement's parameters, validated (None: no job types, nothing to claim)."""
    types = validate_job_types(job_types)
    page = validate_page(limit, 0, max_limit=PAGE_LIMIT_MAX)
    seconds = validate_lease_seconds(lease_seconds)
    worker = validate_worker_id(worker_id)
    if not types:
        return None
    return {
        "job_types": types,
        "limit": page.limit,
        "head_window": resource_head_window(page.limit),
        "worker_id": worker,
        "lease_seconds": seconds,
    }


def _claim_row_by_row(params: dict[str, Any], using: str) -> list[tuple[Any, ...]]:
    """The fallback after a failed batch claim: each due job claimed alone, in claim order.

    A job whose own stored values make its claim fail (its attempt counter one short of the
    maximum, attempt rows ahead of its counter) can never be leased as stored: it is
    dead-lettered with ``job.invalid_persisted_row``, so the next batch claims cleanly again.
    A job that fails for another reason (a trigger, a lock wait) stays PENDING for a later
    claim; when every job failed that way, nothing was isolated and the first error is raised,
    as the batch's would have been.
    """
    rows: list[tuple[Any, ...]] = []
    dead_lettered = 0
    first_error: RunledgerError | None = None
    wanted = params["limit"]
    ids = [
        row[0]
        for row in transition(
            using,
            lifecycle_queries.CLAIM_CANDIDATE_IDS,
            {**params, "limit": wanted + FALLBACK_SPARE_CANDIDATES},
            context="read claimable jobs",
        )
    ]
    for job_id in ids:
        if len(rows) >= wanted:
            break
        try:
            rows += transition(
                using,
                lifecycle_queries.CLAIM_ONE_JOB,
                {**params, "job_id": job_id},
                context="claim a job",
            )
        except RunledgerError as error:
            if error.__cause__ is None or is_session_fatal(error.__cause__):
                raise
            dead = _unclaimable(error) and _dead_letter(job_id, using)
            dead_lettered += dead
            first_error = first_error or (None if dead else error)
            logger.warning(
                "could not claim a job job_id=%s error_code=%s error_sqlstate=%s "
                "error_constraint=%s outcome=%s",
                job_id,
                error.code,
                error.sqlstate or "none",
                error.constraint or "none",
                "dead_lettered" if dead else "skipped",
                extra={"runledger": {"job_id": str(job_id), **error.log_fields()}},
            )
    if first_error is not None and not rows and not dead_lettered:
        raise first_error
    return rows


def _unclaimable(error: RunledgerError) -> bool:
    """Whether a claim of one job failed on that job's own stored values."""
    return error.sqlstate == NUMERIC_OUT_OF_RANGE or error.constraint in UNCLAIMABLE_CONSTRAINTS


def _dead_letter(job_id: Any, using: str) -> bool:
    """Dead-letter a PENDING job that cannot be claimed. False when it was no longer PENDING,
    or when the row refuses even that (a trigger): then it is only skipped."""
    try:
        moved = transition(
            using,
            lifecycle_queries.DEAD_LETTER_UNCLAIMABLE,
            {
                "job_id": job_id,
                "code": Code.INVALID_PERSISTED_JOB.value,
                "message": CATALOG[Code.INVALID_PERSISTED_JOB][1],
            },
            context="dead-letter an unclaimable job",
        )
    except RunledgerError as error:
        if error.__cause__ is None or is_session_fatal(error.__cause__):
            raise
        return False
    return bool(moved)


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
        workflow_step_id,
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
            workflow_step_id=workflow_step_id,
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

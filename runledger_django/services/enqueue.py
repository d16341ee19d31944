"""The ordinary keyed or unkeyed enqueue (reference 3), and the adapter promotion reuses."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..db import enqueue_queries
from ..db.transaction import ensure_read_committed, execute
from ..domain import EnqueueOutcome, EnqueueRequest, JobStatus
from ..errors import Code, RunledgerError
from ..uuid7 import uuid7
from ..validation import prepare_enqueue
from . import tracing
from ._owned import join_or_own
from .wakeup import JOBS_CHANNEL, wake_after_commit

DEFAULT_USING = "default"


def enqueue_job(
    job_type: str,
    payload: Any,
    *,
    idempotency_key: str | None = None,
    organization_id: uuid.UUID | str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    next_run_at: dt.datetime | None = None,
    stage: str | None = None,
    execution_resource_key: str | None = None,
    using: str = DEFAULT_USING,
) -> EnqueueOutcome:
    """Enqueue one job now, keyed (strictly idempotent) or unkeyed.

    Transaction: joins the caller's atomic block when there is one (keyed requests then require
    READ COMMITTED); otherwise runs in its own READ COMMITTED transaction. Idle workers are
    woken once it commits (never from inside the caller's transaction).

    Args:
        job_type: an enabled job definition's type.
        payload: JSON-native data (dicts with str keys, lists, str, int, finite float, bool, None).
        idempotency_key: makes the enqueue strictly idempotent against the original request.

    Returns:
        The job: ``disposition`` is ``"inserted"``, or ``"existing"`` for an identical keyed retry
        (with the job's current status, whatever it is).

    Raises:
        RunledgerError: validation codes for bad input (before any SQL);
            ``job.definition_not_found_or_disabled``; ``job.idempotency_conflict``;
            ``job.legacy_idempotency_snapshot_missing``;
            ``job.enqueue_idempotency_unsupported_isolation``.
    """
    request = prepare_enqueue(
        job_type,
        payload,
        idempotency_key=idempotency_key,
        organization_id=organization_id,
        priority=priority,
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
        next_run_at=next_run_at,
        stage=stage,
        execution_resource_key=execution_resource_key,
        for_intent=False,
    )
    outcome = tracing.produce(
        "send", "enqueue_job", request, lambda traced: _enqueue(traced, using)
    )
    if outcome.disposition == "inserted":
        wake_after_commit(using, JOBS_CHANNEL)
    return outcome


def _enqueue(request: EnqueueRequest, using: str) -> EnqueueOutcome:
    # In autocommit one statement is its own transaction; when the key already exists the
    # resolution needs a second statement in an owned READ COMMITTED transaction.
    return join_or_own(
        using,
        lambda cursor: enqueue_in_transaction(cursor, request, check_isolation=True),
        lambda cursor: _insert(cursor, request, require_read_committed=True),
        lambda cursor: enqueue_in_transaction(cursor, request, check_isolation=False),
        operation="enqueue job",
    )


def _params(request: EnqueueRequest, job_id: uuid.UUID) -> dict[str, Any]:
    return {
        "id": job_id,
        "job_type": request.job_type,
        "organization_id": request.organization_id,
        "payload": request.payload_json,
        "priority": request.priority,
        "max_attempts": request.max_attempts,
        "timeout_seconds": request.timeout_seconds,
        "next_run_at": request.next_run_at,
        "idempotency_key": request.idempotency_key,
        "stage": request.stage,
        "snapshot": request.snapshot_json or None,
        "execution_resource_key": request.execution_resource_key,
        "trace_context": request.trace_context,
    }


def _insert(
    cursor: CursorWrapper, request: EnqueueRequest, *, require_read_committed: bool
) -> EnqueueOutcome | None:
    """The single insert statement (job and its ENQUEUED event); None when nothing inserted."""
    if request.idempotency_key is None:
        sql = enqueue_queries.ENQUEUE_INSERT_UNKEYED
    elif request.organization_id is None:
        sql = enqueue_queries.ENQUEUE_INSERT_KEYED_GLOBAL
    else:
        sql = enqueue_queries.ENQUEUE_INSERT_KEYED_ORG
    params = _params(request, uuid7())
    params["require_read_committed"] = require_read_committed and bool(request.idempotency_key)
    row = execute(cursor, sql, params, context="enqueue job").fetchone()
    if row is None:
        return None
    return EnqueueOutcome(
        job_id=row[0], status=JobStatus(row[1]), run_number=row[2], disposition="inserted"
    )


def enqueue_in_transaction(
    cursor: CursorWrapper, request: EnqueueRequest, *, check_isolation: bool
) -> EnqueueOutcome:
    """Reference 3.4 steps 2-6 inside the current transaction.

    Promotion passes ``check_isolation=False``: its own transaction is verified READ COMMITTED.
    """
    outcome = _insert(cursor, request, require_read_committed=check_isolation)
    if outcome is not None:
        return outcome
    if request.idempotency_key is None:
        raise RunledgerError.for_code(
            Code.DEFINITION_NOT_FOUND_OR_DISABLED,
            f"job type {request.job_type!r} has no enabled definition",
        )
    if check_isolation:
        ensure_read_committed(
            cursor,
            operation="keyed job enqueue",
            code=Code.ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
        )
    return resolve_existing_job(cursor, request)


def resolve_existing_job(cursor: CursorWrapper, request: EnqueueRequest) -> EnqueueOutcome:
    """Resolve a keyed insert that did nothing: converge, conflict, or explain why.

    A new statement under READ COMMITTED sees a winner that committed while the insert waited.
    The row is locked FOR NO KEY UPDATE, so the caller may go on to mutate it.
    """
    sql = (
        enqueue_queries.FIND_EXISTING_JOB_GLOBAL
        if request.organization_id is None
        else enqueue_queries.FIND_EXISTING_JOB_ORG
    )
    params = {
        "job_type": request.job_type,
        "organization_id": request.organization_id,
        "idempotency_key": request.idempotency_key,
        "snapshot": request.snapshot_json,
    }
    row = execute(cursor, sql, params, context="resolve keyed job").fetchone()
    if row is not None:
        job_id, status, run_number, same_request, legacy = row
        if legacy:
            raise RunledgerError.for_code(
                Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING,
                f"keyed job {job_id} of type {request.job_type!r} has no request snapshot",
            )
        if not same_request:
            raise RunledgerError.for_code(
                Code.IDEMPOTENCY_CONFLICT,
                f"keyed job of type {request.job_type!r} names a different request",
            )
        try:
            job_status = JobStatus(status)
        except ValueError:
            raise RunledgerError.for_code(
                Code.INVALID_STATUS, f"job {job_id} has status {status!r}"
            ) from None
        return EnqueueOutcome(
            job_id=job_id, status=job_status, run_number=run_number, disposition="existing"
        )
    enabled = execute(
        cursor,
        enqueue_queries.DEFINITION_IS_ENABLED,
        {"job_type": request.job_type},
        context="check job definition",
    ).fetchone()
    if enabled and enabled[0]:
        raise RunledgerError.for_code(
            Code.IDEMPOTENCY_CONFLICT_MISSING_EXISTING,
            f"keyed job of type {request.job_type!r} vanished before it could be resolved",
        )
    raise RunledgerError.for_code(
        Code.DEFINITION_NOT_FOUND_OR_DISABLED,
        f"job type {request.job_type!r} has no enabled definition",
    )


@dataclass(frozen=True, slots=True)
class Enqueued:
    outcome: EnqueueOutcome


@dataclass(frozen=True, slots=True)
class DefinitionUnavailable:
    code: str


@dataclass(frozen=True, slots=True)
class EnqueueConflict:
    code: str
    client_message: str


IntentEnqueueResolution = Enqueued | DefinitionUnavailable | EnqueueConflict


def enqueue_from_intent(cursor: CursorWrapper, request: EnqueueRequest) -> IntentEnqueueResolution:
    """The promotion adapter (reference 3.5): map expected outcomes, propagate the rest."""
    try:
        return Enqueued(enqueue_in_transaction(cursor, request, check_isolation=False))
    except RunledgerError as error:
        if error.code == Code.DEFINITION_NOT_FOUND_OR_DISABLED:
            return DefinitionUnavailable(error.code)
        if error.code in (Code.IDEMPOTENCY_CONFLICT, Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING):
            return EnqueueConflict(error.code, error.client_message)
        raise

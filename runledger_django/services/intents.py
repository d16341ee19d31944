"""Recording enqueue intents and reading them back through explicit scopes (reference 4.2, 4.3)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from django.db.backends.utils import CursorWrapper
from django.db.models import QuerySet

from ..db import intent_queries
from ..db.transaction import ensure_read_committed, execute
from ..domain import EnqueueRequest, IntentOutcome, IntentStatus, ReadScope
from ..errors import Code, RunledgerError
from ..models import JobEnqueueIntent
from ..uuid7 import uuid7
from ..validation import (
    is_blank,
    prepare_enqueue,
    validate_page,
    validate_search_text,
    validate_stage,
    validate_status_filter,
    validate_uuid_argument,
)
from . import tracing
from ._owned import join_or_own
from ._scope import checked_scope_kind
from .wakeup import INTENTS_CHANNEL, wake_after_commit

DEFAULT_USING = "default"


def record_intent(
    job_type: str,
    payload: Any,
    *,
    idempotency_key: str,
    organization_id: uuid.UUID | str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    next_run_at: dt.datetime | None = None,
    stage: str | None = None,
    execution_resource_key: str | None = None,
    using: str = DEFAULT_USING,
) -> IntentOutcome:
    """Record a durable, strictly idempotent request to enqueue one job later.

    Transaction: inside an atomic block (or with autocommit turned off) it joins the caller's
    transaction (which must be READ COMMITTED) and commits nothing; the intent then commits or
    rolls back with the caller's work. Outside one it runs in its own READ COMMITTED
    transaction.

    Record the intent before anything in the same transaction that can lock a job row: queue
    retention locks intents before jobs, and a job-first recorder can deadlock against it.
    Recording never reads or locks job definitions; the type need not exist yet.

    Args:
        job_type: the job type to enqueue at promotion.
        payload: JSON-native data.
        idempotency_key: required; a retry with the identical request resolves to the same
            intent, a different request with the same key is a conflict.

    Returns:
        The intent and what was observed: ``disposition`` ``"inserted"`` or ``"existing"``. An
        identical retry of a promoted or conflicted intent returns that state (it does not
        raise); abort the business transaction yourself if CONFLICTED is not acceptable.

    Raises:
        RunledgerError: validation codes for bad input (before any SQL);
            ``job.intent_idempotency_conflict``; ``job.intent_idempotency_unsupported_isolation``;
            ``job.intent_idempotency_conflict_missing_existing``.
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
        for_intent=True,
    )
    return tracing.produce(
        "create",
        "record_intent",
        request,
        lambda traced: record_prepared(traced, intent_id=uuid7(), using=using),
    )


def record_prepared(
    request: EnqueueRequest,
    *,
    intent_id: uuid.UUID,
    using: str = DEFAULT_USING,
    on_missing_definition: Callable[[], None] | None = None,
) -> IntentOutcome:
    """``record_intent`` for a request already through ``prepare_enqueue``, under an id the
    caller chose: the Tasks backend builds its result around the id before any SQL, so
    nothing but the signal is left to do once the insert returns.

    With ``on_missing_definition``, the insert also reports whether the job type has a
    definition (an index probe that never waits), and the callback runs once the insert has
    returned when it has none: the Tasks backend makes the definition again after an operator
    deleted it or a test suite flushed the tables, without remembering anything per process.
    """
    recording = _Recording(request, intent_id, check_definition=on_missing_definition is not None)
    outcome = join_or_own(
        using,
        recording.in_transaction,
        recording.insert,
        recording.in_transaction,
        operation="record job enqueue intent",
    )
    if recording.definition_missing and on_missing_definition is not None:
        on_missing_definition()
    if outcome.disposition == "inserted":
        # After the caller's commit, never inside it (services/wakeup.py says why).
        wake_after_commit(using, INTENTS_CHANNEL)
    return outcome


class _Recording:
    """One recording: its request, and what the insert saw besides the outcome."""

    __slots__ = ("check_definition", "definition_missing", "intent_id", "request")

    def __init__(
        self, request: EnqueueRequest, intent_id: uuid.UUID, *, check_definition: bool
    ) -> None:
        self.request = request
        self.intent_id = intent_id
        self.check_definition = check_definition
        self.definition_missing = False

    def insert(self, cursor: CursorWrapper) -> IntentOutcome | None:
        request = self.request
        params = {
            "id": self.intent_id,
            "job_type": request.job_type,
            "organization_id": request.organization_id,
            "payload": request.payload_json,
            "priority": request.priority,
            "max_attempts": request.max_attempts,
            "timeout_seconds": request.timeout_seconds,
            "next_run_at": request.next_run_at,
            "idempotency_key": request.idempotency_key,
            "stage": request.stage,
            "snapshot": request.snapshot_json,
            "execution_resource_key": request.execution_resource_key,
            "trace_context": request.trace_context,
            "check_definition": self.check_definition,
        }
        flags = execute(
            cursor, intent_queries.RECORD_INTENT, params, context="record job enqueue intent"
        ).fetchone()[0]
        if flags & intent_queries.RECORDED_DEFINITION_MISSING:
            self.definition_missing = True
        if not flags & intent_queries.RECORDED_INSERTED:
            return None
        return IntentOutcome(
            intent_id=self.intent_id,
            status=IntentStatus.PENDING,
            job_id=None,
            disposition="inserted",
        )

    def in_transaction(self, cursor: CursorWrapper) -> IntentOutcome:
        """The insert-or-resolve algorithm of reference 4.2, at most two resolution attempts.

        The insert waits behind an uncommitted recorder of the same key; the lookup, a new
        statement, then sees the winner. A row deleted between the two statements sends us
        back to insert once more.
        """
        request = self.request
        for attempt in (1, 2):
            outcome = self.insert(cursor)
            if outcome is not None:
                return outcome
            if attempt == 1:
                ensure_read_committed(
                    cursor,
                    operation="record job enqueue intent",
                    code=Code.INTENT_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
                )
            existing = _find_existing(cursor, request)
            if existing is not None:
                return existing
        raise RunledgerError.for_code(
            Code.INTENT_IDEMPOTENCY_CONFLICT_MISSING_EXISTING,
            f"intent of type {request.job_type!r} vanished twice before it could be resolved",
        )


def _find_existing(cursor: CursorWrapper, request: EnqueueRequest) -> IntentOutcome | None:
    sql = (
        intent_queries.FIND_EXISTING_INTENT_GLOBAL
        if request.organization_id is None
        else intent_queries.FIND_EXISTING_INTENT_ORG
    )
    params = {
        "job_type": request.job_type,
        "organization_id": request.organization_id,
        "idempotency_key": request.idempotency_key,
        "snapshot": request.snapshot_json,
    }
    row = execute(cursor, sql, params, context="resolve job enqueue intent").fetchone()
    if row is None:
        return None
    intent_id, status, promoted_job_id, same_request = row
    if not same_request:
        raise RunledgerError.for_code(
            Code.INTENT_IDEMPOTENCY_CONFLICT,
            f"intent of type {request.job_type!r} names a different request",
        )
    return IntentOutcome(
        intent_id=intent_id,
        status=decode_outcome_status(status, promoted_job_id),
        job_id=promoted_job_id,
        disposition="existing",
    )


def decode_outcome_status(status: str, promoted_job_id: uuid.UUID | None) -> IntentStatus:
    """PENDING and CONFLICTED carry no job; PROMOTED carries one; anything else is corrupt."""
    if status == IntentStatus.PROMOTED and promoted_job_id is not None:
        return IntentStatus.PROMOTED
    if status in (IntentStatus.PENDING, IntentStatus.CONFLICTED) and promoted_job_id is None:
        return IntentStatus(status)
    raise RunledgerError.for_code(
        Code.INTENT_INVALID_PERSISTED_ROW,
        f"job enqueue intent status {status!r} does not match its promoted job link",
    )


def _scoped(scope: ReadScope, using: str) -> QuerySet[JobEnqueueIntent]:
    """The rows ``scope`` selects (a scope that is not valid is refused, never widened)."""
    rows = JobEnqueueIntent.objects.using(using)
    kind = checked_scope_kind(scope)
    if kind == "organization":
        return rows.filter(organization_id=scope.organization_id)
    if kind == "global":
        return rows.filter(organization_id__isnull=True)
    return rows


def _decoded(rows: QuerySet[JobEnqueueIntent]) -> list[JobEnqueueIntent]:
    """The rows as model instances, or ``job.intent_invalid_persisted_row`` when a JSON column
    holds what Python cannot parse (jsonb keeps integers past Python's int-to-str digit limit):
    the caller gets the catalog error, never a bare ValueError."""
    try:
        return list(rows)
    except ValueError:
        raise RunledgerError.for_code(
            Code.INTENT_INVALID_PERSISTED_ROW,
            "job enqueue intent payload or snapshot does not decode in Python",
        ) from None


def _checked(intent: JobEnqueueIntent) -> JobEnqueueIntent:
    """Refuse a row whose lifecycle, stage or type cannot be decoded (reference 5).

    Only what makes a row meaningless is refused: a blank type, an unknown stage. Limits that
    guard new requests (such as the job type's byte length) are not applied to stored rows: a
    read must not fail with a validation error its caller cannot fix.
    """
    intent.state  # noqa: B018  (decodes or raises job.intent_invalid_persisted_row)
    validate_stage(intent.stage, persisted_row=True)
    if is_blank(intent.job_type):
        raise RunledgerError.for_code(
            Code.INVALID_JOB_TYPE,
            "persisted job enqueue intent job_type is blank",
            persisted_row=True,
        )
    return intent


def get_intent(
    intent_id: uuid.UUID | str, *, scope: ReadScope, using: str = DEFAULT_USING
) -> JobEnqueueIntent | None:
    """Return one intent, or None when it is absent or outside ``scope`` (indistinguishable).

    Raises:
        RunledgerError: ``job.invalid_argument`` for a malformed id or scope;
            ``job.intent_invalid_persisted_row`` / ``job.invalid_stage`` for a corrupt row.
    """
    checked_id = validate_uuid_argument(intent_id, "intent_id")
    found = _decoded(_scoped(scope, using).filter(id=checked_id)[:1])
    return _checked(found[0]) if found else None


def list_intents(
    *,
    scope: ReadScope,
    status: IntentStatus | str | None = None,
    job_type_query: str | None = None,
    limit: int = 50,
    offset: int = 0,
    using: str = DEFAULT_USING,
) -> list[JobEnqueueIntent]:
    """Return a page of intents in ``scope``, newest first (``created_at DESC, id DESC``).

    ``job_type_query`` is a case-insensitive substring matched literally: ``%`` and ``_`` are
    not wildcards.

    Raises:
        RunledgerError: ``job.invalid_pagination`` unless ``1 <= limit <= 1000`` and
            ``offset >= 0``; ``job.invalid_argument`` for a bad status, query or scope;
            ``job.intent_invalid_persisted_row`` / ``job.invalid_stage`` for a corrupt row on
            the page.
    """
    page = validate_page(limit, offset)
    status_value = validate_status_filter(status)
    query = validate_search_text(job_type_query, "job_type_query")
    rows = _scoped(scope, using)
    if status_value is not None:
        rows = rows.filter(status=status_value)
    if query:
        rows = rows.filter(job_type__icontains=query)
    rows = rows.order_by("-created_at", "-id")[page.offset : page.offset + page.limit]
    return [_checked(intent) for intent in _decoded(rows)]

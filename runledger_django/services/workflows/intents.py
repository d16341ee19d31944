"""Workflow intents (checklist item 10): a run requested inside the caller's transaction and
promoted later into exactly one run per idempotency key.

Recording checks the whole graph before any SQL, stores its canonical request (the one a
keyed ``start_workflow`` stores on the run) and needs no job definition: a view may record a
run of job types a deploy syncs later. Promotion claims due intents whose job types all have
an enabled definition (others wait, untouched, as job intents of unknown types do), rebuilds
the graph from the stored request and starts it keyed, so a racing promoter, a retry or a
direct keyed start of the same graph converges on one run.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.backends.utils import CursorWrapper

from ...db import workflow_queries
from ...db.classify import classify, is_session_fatal
from ...db.transaction import (
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    cap_timeout,
    ensure_read_committed,
    execute,
    owned_read_committed,
)
from ...domain import (
    IntentStatus,
    WorkflowIntentOutcome,
    WorkflowPromotionReport,
    WorkflowReleaseMode,
    WorkflowStepKind,
)
from ...errors import Code, RunledgerError
from ...uuid7 import uuid7
from ...validation import validate_page
from ..wakeup import INTENTS_CHANNEL, JOBS_CHANNEL, wake_after_commit
from .builder import StepDeclaration, Workflow
from .start import _start
from .validation import PreparedWorkflow, prepare_workflow

logger = logging.getLogger(__name__)

DEFAULT_USING = "default"
PROMOTION_LIMIT_DEFAULT = 24
PROMOTION_LIMIT_MAX = 1000
LOCK_TIMEOUT_MS = 5_000
"""A promotion waits at most this long for a key a caller's open start or record holds."""
STATEMENT_TIMEOUT_MS = 25_000

_WHEN = {WorkflowReleaseMode.ON_SUCCESS.value: "success", "success": "success"}


def record_workflow_intent(
    flow: Any,
    *,
    idempotency_key: Any,
    organization_id: Any = None,
    using: str = DEFAULT_USING,
) -> WorkflowIntentOutcome:
    """Record a request to start ``flow``; a promoter starts it later, once.

    The same request under the same key returns the same intent (``disposition="existing"``,
    with its run once promoted); another graph under the key raises. Job definitions are not
    needed yet: the intent waits for them.

    Transaction: joins the caller's atomic block (in a savepoint, so a refusal leaves it
    usable) and requires READ COMMITTED there, or owns one outside; the intent exists if and
    only if that transaction commits.

    Raises:
        RunledgerError: a ``workflow.invalid_dag_*`` code (a missing key is
            ``workflow.invalid_dag_idempotency_key_blank``) or ``job.invalid_organization_id``
            before any SQL; ``workflow.enqueue_idempotency_unsupported_isolation``;
            ``workflow.enqueue_conflicting_retry``.
    """
    if idempotency_key is None:
        raise RunledgerError.for_code(
            Code.WF_INVALID_DAG_IDEMPOTENCY_KEY_BLANK, "a workflow intent needs an idempotency key"
        )
    prepared = prepare_workflow(
        flow, idempotency_key=idempotency_key, organization_id=organization_id
    )
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            ensure_read_committed(
                cursor,
                operation="workflow intent",
                code=Code.WF_ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
            )
            outcome = _record(cursor, prepared)
    except DatabaseError as exc:
        raise classify(exc, "record workflow intent") from exc
    if outcome.disposition == "inserted":
        wake_after_commit(using, INTENTS_CHANNEL)
    return outcome


def _record(cursor: CursorWrapper, prepared: PreparedWorkflow) -> WorkflowIntentOutcome:
    intent_id = uuid7()
    params: dict[str, Any] = {
        "id": intent_id,
        "workflow_type": prepared.workflow_type,
        "organization_id": prepared.organization_id,
        "idempotency_key": prepared.idempotency_key,
        "request": prepared.request,
        "job_types": json.dumps(prepared.job_types),
    }
    sql = (
        workflow_queries.INSERT_INTENT_GLOBAL
        if prepared.organization_id is None
        else workflow_queries.INSERT_INTENT_ORG
    )
    for _ in range(2):
        if execute(cursor, sql, params, context="record workflow intent").fetchone():
            return WorkflowIntentOutcome(
                intent_id=intent_id,
                status=IntentStatus.PENDING,
                workflow_run_id=None,
                disposition="inserted",
            )
        row = execute(
            cursor, workflow_queries.EXISTING_INTENT, params, context="read workflow intent"
        ).fetchone()
        if row is None:
            continue  # the key's owner rolled back between the two statements: insert again
        existing_id, status, run_id, same = row
        if not same:
            raise RunledgerError.for_code(
                Code.WF_ENQUEUE_CONFLICTING_RETRY,
                f"workflow intent {existing_id} was recorded with another request",
            )
        return WorkflowIntentOutcome(
            intent_id=existing_id,
            status=IntentStatus(status),
            workflow_run_id=run_id,
            disposition="existing",
        )
    raise RunledgerError.for_code(
        Code.WF_ENQUEUE_CONFLICTING_RETRY, "the workflow intent's key changed twice meanwhile"
    )


def promote_workflow_intents(
    *, limit: int = PROMOTION_LIMIT_DEFAULT, using: str = DEFAULT_USING
) -> WorkflowPromotionReport:
    """Start the runs of up to ``limit`` due workflow intents, one savepoint each.

    An intent whose job types lack an enabled definition is not claimed (it waits, no attempt
    spent); concurrent promoters skip each other's rows. A run already started under the key
    with the same graph is adopted; another graph conflicts the intent
    (``workflow.enqueue_conflicting_retry``); a transient failure defers it with backoff.

    Transaction: owns its READ COMMITTED transaction (lock waits capped at 5 s) and refuses to
    run inside an atomic block. With nothing eligible it is one statement in autocommit, no
    transaction block and no locks (a worker's idle promoter polls it).

    Raises:
        RunledgerError: ``job.invalid_pagination``;
            ``job.intent_promotion_requires_own_transaction``; a database code when the pass
            itself fails (everything it did is rolled back).
    """
    page = validate_page(limit, 0, max_limit=PROMOTION_LIMIT_MAX)
    connection = connections[using]
    if connection.in_atomic_block:
        raise RunledgerError.for_code(
            Code.INTENT_PROMOTION_REQUIRES_OWN_TRANSACTION,
            "promote_workflow_intents was called inside an atomic block",
        )
    counts = _Counts()
    try:
        if connection.get_autocommit() and not _anything_eligible(using):
            return WorkflowPromotionReport()  # idle: one statement, no transaction block
        with owned_read_committed(using) as cursor:
            cap_timeout(cursor, LOCK_TIMEOUT, LOCK_TIMEOUT_MS)
            cap_timeout(cursor, STATEMENT_TIMEOUT, STATEMENT_TIMEOUT_MS)
            rows = execute(
                cursor,
                workflow_queries.CLAIM_INTENTS,
                {"limit": page.limit},
                context="claim workflow intents",
            ).fetchall()
            counts.batch_was_full = len(rows) == page.limit
            for row in rows:
                _promote_one(cursor, row, counts, using)
    except DatabaseError as exc:
        raise classify(exc, "promote workflow intents") from exc
    report = counts.report()
    if report.anything_happened:
        logger.info(
            "processed workflow intents inserted_runs=%d existing_runs=%d conflicted=%d "
            "definition_became_unavailable=%d retry_deferred=%d",
            report.inserted_runs,
            report.existing_runs,
            report.conflicted,
            report.definition_became_unavailable,
            report.retry_deferred,
            extra={"runledger": report.to_dict()},
        )
    return report


def _anything_eligible(using: str) -> bool:
    with connections[using].cursor() as cursor:
        return (
            execute(
                cursor,
                workflow_queries.HAS_ELIGIBLE_INTENT,
                None,
                context="check eligible workflow intents",
            ).fetchone()
            is not None
        )


@dataclass
class _Counts:
    inserted_runs: int = 0
    existing_runs: int = 0
    conflicted: int = 0
    definition_became_unavailable: int = 0
    retry_deferred: int = 0
    batch_was_full: bool = False

    def report(self) -> WorkflowPromotionReport:
        return WorkflowPromotionReport(
            inserted_runs=self.inserted_runs,
            existing_runs=self.existing_runs,
            conflicted=self.conflicted,
            definition_became_unavailable=self.definition_became_unavailable,
            retry_deferred=self.retry_deferred,
            batch_was_full=self.batch_was_full,
        )


_CONFLICT_CODES = frozenset(
    {
        Code.WF_ENQUEUE_CONFLICTING_RETRY,
        Code.WF_LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING,
        Code.INTENT_SNAPSHOT_MISMATCH,
    }
)


def _promote_one(cursor: CursorWrapper, row: tuple[Any, ...], counts: _Counts, using: str) -> None:
    intent_id, organization_id, idempotency_key, request_text = row
    try:
        with transaction.atomic(using=using):
            prepared = _rebuild(intent_id, organization_id, idempotency_key, request_text)
            start = _start(cursor, prepared)
            _transition(
                cursor,
                workflow_queries.MARK_INTENT_PROMOTED,
                {"id": intent_id, "run_id": start.run_id},
            )
    except RunledgerError as error:
        cause = error.__cause__
        if cause is not None and (not isinstance(cause, DatabaseError) or is_session_fatal(cause)):
            raise
        if error.code == Code.WF_DEFINITION_NOT_FOUND_OR_DISABLED:
            # Disabled between the claim and the start: untouched, no attempt spent.
            counts.definition_became_unavailable += 1
            return
        conflicted = error.code in _CONFLICT_CODES or error.code.startswith("workflow.invalid_")
        sql = (
            workflow_queries.MARK_INTENT_CONFLICTED
            if conflicted
            else workflow_queries.MARK_INTENT_DEFERRED
        )
        _transition(
            cursor, sql, {"id": intent_id, "code": error.code, "message": error.client_message}
        )
        if conflicted:
            counts.conflicted += 1
        else:
            counts.retry_deferred += 1
        logger.warning(
            "workflow intent promotion did not complete intent_id=%s error_code=%s outcome=%s",
            intent_id,
            error.code,
            "conflicted" if conflicted else "retry_deferred",
            extra={"runledger": {"intent_id": str(intent_id), **error.log_fields()}},
        )
        return
    if start.disposition == "inserted":
        counts.inserted_runs += 1
        if any(not step.after and step.kind == WorkflowStepKind.JOB for step in prepared.steps):
            wake_after_commit(using, JOBS_CHANNEL)
    else:
        counts.existing_runs += 1


def _rebuild(
    intent_id: uuid.UUID,
    organization_id: uuid.UUID | None,
    idempotency_key: str,
    request_text: str,
) -> PreparedWorkflow:
    """The stored canonical request back into a checked graph; it must come out identical."""
    try:
        request = json.loads(request_text)
        flow = Workflow(
            request["workflow_type"],
            fail_fast=request["fail_fast"],
            metadata=request["metadata"],
            result_step=request["result_step_key"],
        )
        for step in request["steps"]:
            external = step["kind"] == WorkflowStepKind.EXTERNAL.value
            flow.steps.append(
                StepDeclaration(
                    key=step["key"],
                    kind=WorkflowStepKind.EXTERNAL if external else WorkflowStepKind.JOB,
                    target=None if external else step["job_type"],
                    payload=None if external else step["payload"],
                    after=[(key, _WHEN.get(mode, "terminal")) for key, mode in step["after"]],
                    priority=step["priority"],
                    max_attempts=step["max_attempts"],
                    timeout_seconds=step["timeout_seconds"],
                    execution_resource_key=step["execution_resource_key"],
                )
            )
        prepared = prepare_workflow(
            flow, idempotency_key=idempotency_key, organization_id=organization_id
        )
        same = json.loads(prepared.request) == request
    except (KeyError, TypeError, ValueError):
        same = False
    if not same:
        raise RunledgerError.for_code(
            Code.INTENT_SNAPSHOT_MISMATCH,
            f"workflow intent {intent_id} request does not rebuild into the same graph",
        )
    return prepared


def _transition(cursor: CursorWrapper, sql: str, params: dict[str, Any]) -> None:
    """Every transition must touch exactly the one PENDING row the pass holds."""
    affected = execute(cursor, sql, params, context="transition workflow intent").rowcount
    if affected != 1:
        raise RunledgerError.for_code(
            Code.INTENT_TRANSITION_FAILED,
            f"workflow intent {params['id']} transition touched {affected} rows",
        )

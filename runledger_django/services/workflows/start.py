"""Starting a run inside the caller's transaction (reference 3.1): graph checked before any
SQL, idempotent per key, active keys, and the whole graph written set-based with its root
steps released in the same statement."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from django.db import DatabaseError, connections, transaction

from ...db import workflow_queries
from ...db.classify import classify
from ...db.transaction import ensure_read_committed, execute
from ...domain import WorkflowRunStatus, WorkflowStart, WorkflowStepKind
from ...errors import Code, RunledgerError
from ...uuid7 import uuid7
from ..wakeup import JOBS_CHANNEL, wake_after_commit
from .validation import PreparedWorkflow, prepare_workflow

DEFAULT_USING = "default"


def active_scope(organization_id: uuid.UUID | None) -> str:
    """An active key's scope: ``global`` or ``organization:<uuid>`` (not the workflow type)."""
    return "global" if organization_id is None else f"organization:{organization_id}"


def start_workflow(
    flow: Any,
    *,
    idempotency_key: Any = None,
    organization_id: Any = None,
    active_key: Any = None,
    using: str = DEFAULT_USING,
) -> WorkflowStart:
    """Start a run of ``flow``: its steps and edges are written and its root steps get jobs;
    every other step waits, without a job row, until its prerequisites finish.

    With ``idempotency_key``, a retry of the same graph returns the same run
    (``disposition="existing"``) and writes nothing. With ``active_key``, at most one run per
    (tenant, key) is unfinished at a time: a start while one is returns it
    (``disposition="active"``). Never waits on a lock a worker or a promoter holds.

    Transaction: joins the caller's atomic block (in a savepoint, so a refusal leaves it
    usable), or owns one outside; the run exists if and only if that transaction commits.

    Raises:
        RunledgerError: a ``workflow.invalid_dag_*`` code, ``workflow.invalid_active_key`` or
            ``job.invalid_organization_id`` before any SQL;
            ``workflow.enqueue_idempotency_unsupported_isolation`` (keyed or active-keyed,
            outside READ COMMITTED); ``workflow.definition_not_found_or_disabled``;
            ``workflow.enqueue_conflicting_retry``;
            ``workflow.legacy_idempotency_snapshot_missing``.
    """
    prepared = prepare_workflow(
        flow,
        idempotency_key=idempotency_key,
        organization_id=organization_id,
        active_key=active_key,
    )
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            start = _start(cursor, prepared)
    except DatabaseError as exc:
        raise classify(exc, "start workflow") from exc
    if start.disposition == "inserted" and any(
        not step.after and step.kind == WorkflowStepKind.JOB for step in prepared.steps
    ):
        wake_after_commit(using, JOBS_CHANNEL)
    return start


def _start(cursor: Any, prepared: PreparedWorkflow) -> WorkflowStart:
    keyed = prepared.idempotency_key is not None
    if keyed or prepared.active_key is not None:
        ensure_read_committed(
            cursor,
            operation="keyed workflow start",
            code=Code.WF_ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
        )
    scope = active_scope(prepared.organization_id)
    if prepared.active_key is not None:
        params = {"scope": scope, "active_key": prepared.active_key}
        execute(cursor, workflow_queries.LOCK_ACTIVE_KEY, params, context="lock active key")
        if keyed:
            existing = _existing(cursor, prepared)
            if existing is not None:
                return existing
        row = execute(
            cursor, workflow_queries.ACTIVE_CLAIM, params, context="read active key"
        ).fetchone()
        if row is not None and row[2]:
            execute(cursor, workflow_queries.DELETE_ACTIVE_CLAIM, params, context="free key")
        elif row is not None:
            return WorkflowStart(
                run_id=row[0], status=WorkflowRunStatus(row[1]), disposition="active"
            )
    definitions = _definitions(cursor, prepared)
    run_id = uuid7()
    roots_external = sum(
        1 for step in prepared.steps if not step.after and step.kind == WorkflowStepKind.EXTERNAL
    )
    status = (
        WorkflowRunStatus.RUNNING
        if len(prepared.steps) > roots_external
        else WorkflowRunStatus.WAITING_FOR_EXTERNAL
    )
    run_params = {
        "run_id": run_id,
        "workflow_type": prepared.workflow_type,
        "organization_id": prepared.organization_id,
        "status": status.value,
        "idempotency_key": prepared.idempotency_key,
        "active_key": prepared.active_key,
        "metadata": prepared.metadata,
        "request": prepared.request,
        "fail_fast": prepared.fail_fast,
        "result_step_key": prepared.result_step_key,
        "steps_total": len(prepared.steps),
        "steps_waiting": roots_external,
        "steps_succeeded": 0,
    }
    sql = workflow_queries.INSERT_RUN
    if keyed:
        sql = (
            workflow_queries.INSERT_RUN_KEYED_GLOBAL
            if prepared.organization_id is None
            else workflow_queries.INSERT_RUN_KEYED_ORG
        )
    inserted = execute(cursor, sql, run_params, context="insert workflow run").fetchone()
    if inserted is None:
        existing = _existing(cursor, prepared)
        if existing is not None:
            return existing
        # The winner rolled back between the two statements: insert once more.
        inserted = execute(cursor, sql, run_params, context="insert workflow run").fetchone()
        if inserted is None:
            raise RunledgerError.for_code(
                Code.WF_ENQUEUE_CONFLICTING_RETRY, "the keyed run changed twice during the start"
            )
    execute(
        cursor,
        workflow_queries.INSERT_GRAPH,
        pack_arrays(_graph_params(prepared, run_id, definitions)),
        context="insert workflow graph",
    )
    if prepared.active_key is not None:
        execute(
            cursor,
            workflow_queries.INSERT_ACTIVE_CLAIM,
            {"run_id": run_id, "scope": scope, "active_key": prepared.active_key},
            context="claim active key",
        )
    return WorkflowStart(run_id=run_id, status=status, disposition="inserted")


def _existing(cursor: Any, prepared: PreparedWorkflow) -> WorkflowStart | None:
    row = execute(
        cursor,
        workflow_queries.EXISTING_RUN,
        {
            "workflow_type": prepared.workflow_type,
            "organization_id": prepared.organization_id,
            "idempotency_key": prepared.idempotency_key,
            "request": prepared.request,
        },
        context="read keyed workflow run",
    ).fetchone()
    if row is None:
        return None
    run_id, status, same, missing = row
    if missing:
        raise RunledgerError.for_code(
            Code.WF_LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING, f"run {run_id} has no stored request"
        )
    if not same:
        raise RunledgerError.for_code(
            Code.WF_ENQUEUE_CONFLICTING_RETRY, f"run {run_id} was started with another request"
        )
    disposition: Literal["existing"] = "existing"
    return WorkflowStart(run_id=run_id, status=WorkflowRunStatus(status), disposition=disposition)


def _definitions(cursor: Any, prepared: PreparedWorkflow) -> dict[str, tuple[int, int, int]]:
    """(priority, max attempts, timeout) per job type: the defaults resolved now, stored on the
    steps, so later definition edits do not change a started run."""
    wanted = prepared.job_types
    if not wanted:
        return {}
    rows = execute(
        cursor,
        workflow_queries.DEFINITIONS_FOR_START,
        {"job_types": wanted},
        context="read job definitions",
    ).fetchall()
    found = {row[0]: (row[1], row[2], row[3]) for row in rows}
    missing = [job_type for job_type in wanted if job_type not in found]
    if missing:
        raise RunledgerError.for_code(
            Code.WF_DEFINITION_NOT_FOUND_OR_DISABLED,
            f"{len(missing)} job type(s) have no enabled definition",
        )
    return found


def pack_arrays(params: dict[str, Any]) -> dict[str, Any]:
    """INSERT_GRAPH's list parameters as array literals: one text value per array instead of
    one bound element per step, which for a 600-step graph is most of the client's time in the
    statement. Every array parameter carries its own cast in the SQL (``::uuid[]`` ...)."""
    return {
        name: array_literal(value) if isinstance(value, list) else value
        for name, value in params.items()
    }


def array_literal(values: list[Any]) -> str:
    """A PostgreSQL array literal: NULL bare, booleans and numbers and UUIDs as they print,
    text double-quoted with its backslashes and quotes escaped (validation keeps NUL out)."""
    parts: list[str] = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif value is True or value is False:
            parts.append("t" if value else "f")
        elif isinstance(value, int | uuid.UUID):
            parts.append(str(value))
        else:
            text = str(value).replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'"{text}"')
    return "{" + ",".join(parts) + "}"


def _graph_params(
    prepared: PreparedWorkflow, run_id: uuid.UUID, definitions: dict[str, tuple[int, int, int]]
) -> dict[str, Any]:
    ids: list[uuid.UUID] = []
    keys: list[str] = []
    kinds: list[str] = []
    job_types: list[str | None] = []
    payloads: list[str] = []
    priorities: list[int | None] = []
    max_attempts: list[int | None] = []
    timeouts: list[int | None] = []
    resource_keys: list[str | None] = []
    pending: list[int] = []
    job_ids: list[uuid.UUID | None] = []
    edge_from: list[uuid.UUID] = []
    edge_to: list[uuid.UUID] = []
    edge_modes: list[str] = []
    id_of = {step.key: step.id for step in prepared.steps}
    for step in prepared.steps:
        ids.append(step.id)
        keys.append(step.key)
        kinds.append(step.kind.value)
        job_types.append(step.job_type)
        payloads.append(step.payload)
        resource_keys.append(step.execution_resource_key)
        pending.append(len(step.after))
        if step.job_type is None:
            priorities.append(None)
            max_attempts.append(None)
            timeouts.append(None)
            job_ids.append(None)
        else:
            priority, attempts, timeout = definitions[step.job_type]
            priorities.append(priority if step.priority is None else step.priority)
            max_attempts.append(attempts if step.max_attempts is None else step.max_attempts)
            timeouts.append(timeout if step.timeout_seconds is None else step.timeout_seconds)
            job_ids.append(None if step.after else uuid7())
        for dependency, mode in step.after:
            edge_from.append(id_of[dependency])
            edge_to.append(step.id)
            edge_modes.append(mode.value)
    return {
        "run_id": run_id,
        "organization_id": prepared.organization_id,
        "ids": ids,
        "keys": keys,
        "kinds": kinds,
        "job_types": job_types,
        "payloads": payloads,
        "priorities": priorities,
        "max_attempts": max_attempts,
        "timeouts": timeouts,
        "resource_keys": resource_keys,
        "pending": pending,
        "job_ids": job_ids,
        "edge_from": edge_from,
        "edge_to": edge_to,
        "edge_modes": edge_modes,
        "totals": pending,
        "carried": [False] * len(ids),
        "outputs": [None] * len(ids),
        "unsatisfied": [0] * len(ids),
        "hold": False,
    }

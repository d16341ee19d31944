"""Retrying a finished run (reference 3.12, resume mode of checklist item 48): a new run that
carries the source's succeeded steps over, with their outputs, and runs the rest again. The
source is never modified; the lineage row links the two."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ...db import workflow_queries
from ...db.transaction import execute
from ...domain import (
    WorkflowRecoveryMode,
    WorkflowRunStatus,
    WorkflowStart,
    WorkflowStepKind,
    WorkflowStepStatus,
)
from ...errors import Code, RunledgerError
from ...uuid7 import uuid7
from ...validation import is_blank, utf8_length
from ..wakeup import JOBS_CHANNEL, wake_after_commit
from ._scope import not_found, read_committed, scope_params
from .start import active_scope, pack_arrays

DEFAULT_USING = "default"
DEFAULT_REQUEST_KEY = "retry"
REQUEST_KEY_MAX_BYTES = 512


def retry_workflow(
    run_id: Any,
    *,
    scope: Any,
    request_key: Any = DEFAULT_REQUEST_KEY,
    reason: Any = "retry",
    using: str = DEFAULT_USING,
) -> WorkflowStart:
    """Start a recovery run of a finished run: its SUCCEEDED steps are carried over as
    SUCCEEDED with their outputs (so downstream steps still see them as ``upstream``); every
    other step (failed, canceled, never run, and whatever comes after one of those) runs
    again with the payload and the resolved settings the source stored. The new run keeps the source's metadata, options, result step
    and active key, not its idempotency key.

    Idempotent per (source, ``request_key``): a second retry with the same key returns the
    same recovery run (``disposition="existing"``); retry the recovery run itself to go on.

    Transaction: joins the caller's READ COMMITTED atomic block (in a savepoint), or owns one.

    Raises:
        RunledgerError: ``workflow.invalid_recovery_request_key`` before any SQL;
            ``workflow.recovery_unsupported_isolation``; ``workflow.run_not_found``;
            ``workflow.recovery_source_not_terminal`` (the run has not finished, or it
            SUCCEEDED: nothing to retry); ``workflow.recovery_active_constraint``.
    """
    if (
        not isinstance(request_key, str)
        or is_blank(request_key)
        or utf8_length(request_key) > REQUEST_KEY_MAX_BYTES
        or not isinstance(reason, str)
        or is_blank(reason)
    ):
        raise RunledgerError.for_code(
            Code.WF_INVALID_RECOVERY_REQUEST_KEY,
            f"request key and reason must be non-blank text (key at most "
            f"{REQUEST_KEY_MAX_BYTES} bytes)",
        )
    params = scope_params(run_id, scope)
    with read_committed(
        using, operation="retry a workflow run", code=Code.WF_RECOVERY_UNSUPPORTED_ISOLATION
    ) as cursor:
        start = _retry(cursor, params, request_key, reason)
    if start.disposition == "inserted":
        wake_after_commit(using, JOBS_CHANNEL)
    return start


def _retry(cursor: Any, params: dict[str, Any], request_key: str, reason: str) -> WorkflowStart:
    context = "retry workflow run"
    source = execute(cursor, workflow_queries.LOCK_SOURCE_RUN, params, context=context).fetchone()
    if source is None:
        raise not_found(params["run_id"])
    status, workflow_type, organization_id, active_key, metadata, request, fail_fast, result = (
        source
    )
    lookup = {"run_id": params["run_id"], "request_key": request_key}
    existing = execute(
        cursor, workflow_queries.EXISTING_RECOVERY, lookup, context=context
    ).fetchone()
    if existing is not None:
        return WorkflowStart(
            run_id=existing[0], status=WorkflowRunStatus(existing[2]), disposition="existing"
        )
    if status not in (WorkflowRunStatus.COMPLETED_WITH_ERRORS, WorkflowRunStatus.CANCELED):
        raise RunledgerError.for_code(
            Code.WF_RETRY_SOURCE_NOT_TERMINAL,
            f"run {params['run_id']} is {status}: only a run that finished with errors or was "
            "canceled has steps to retry",
        )
    scope = active_scope(organization_id)
    if active_key is not None:
        claim = {"scope": scope, "active_key": active_key}
        execute(cursor, workflow_queries.LOCK_ACTIVE_KEY, claim, context=context)
        held = execute(cursor, workflow_queries.ACTIVE_CLAIM, claim, context=context).fetchone()
        if held is not None and held[2]:
            execute(cursor, workflow_queries.DELETE_ACTIVE_CLAIM, claim, context=context)
        elif held is not None:
            raise RunledgerError.for_code(
                Code.WF_RECOVERY_ACTIVE_CONSTRAINT, "another run holds the active key"
            )
    steps = execute(
        cursor, workflow_queries.SOURCE_STEPS, {"run_id": params["run_id"]}, context=context
    ).fetchall()
    edges = execute(
        cursor, workflow_queries.SOURCE_EDGES, {"run_id": params["run_id"]}, context=context
    ).fetchall()
    recovery_id = uuid7()
    graph, roots_external = _graph(recovery_id, organization_id, steps, edges)
    total = len(steps)
    carried = sum(graph["carried"])
    run_status = (
        WorkflowRunStatus.RUNNING
        if total - carried > roots_external
        else WorkflowRunStatus.WAITING_FOR_EXTERNAL
    )
    execute(
        cursor,
        workflow_queries.INSERT_RUN,
        {
            "run_id": recovery_id,
            "workflow_type": workflow_type,
            "organization_id": organization_id,
            "status": run_status.value,
            "idempotency_key": None,
            "active_key": active_key,
            "metadata": metadata,
            "request": request,
            "fail_fast": fail_fast,
            "result_step_key": result,
            "steps_total": total,
            "steps_waiting": roots_external,
            "steps_succeeded": carried,
        },
        context=context,
    )
    execute(cursor, workflow_queries.INSERT_GRAPH, pack_arrays(graph), context=context)
    if active_key is not None:
        execute(
            cursor,
            workflow_queries.INSERT_ACTIVE_CLAIM,
            {"run_id": recovery_id, "scope": scope, "active_key": active_key},
            context=context,
        )
    execute(
        cursor,
        workflow_queries.INSERT_RECOVERY,
        {
            "recovery_run_id": recovery_id,
            "run_id": params["run_id"],
            "request_key": request_key,
            "mode": WorkflowRecoveryMode.RESUME.value,
            "reason": reason,
        },
        context=context,
    )
    return WorkflowStart(run_id=recovery_id, status=run_status, disposition="inserted")


def _graph(
    run_id: uuid.UUID,
    organization_id: uuid.UUID | None,
    steps: list[tuple[Any, ...]],
    edges: list[tuple[Any, ...]],
) -> tuple[dict[str, Any], int]:
    """INSERT_GRAPH's arrays for the recovery run, and how many external steps start
    waiting. New step ids keep the source's order (ids of prerequisites sort first)."""
    new_id = {row[0]: uuid7() for row in steps}
    prerequisites: dict[Any, list[Any]] = {row[0]: [] for row in steps}
    for prerequisite, dependent, _ in edges:
        prerequisites[dependent].append(prerequisite)
    # A success is carried over only when everything it came after is: a step downstream of
    # one that runs again runs again too (its inputs may change). Steps are in id order,
    # which is a topological order.
    carried: set[Any] = set()
    for row in steps:
        if row[9] == WorkflowStepStatus.SUCCEEDED and all(
            prerequisite in carried for prerequisite in prerequisites[row[0]]
        ):
            carried.add(row[0])
    totals = {step_id: len(items) for step_id, items in prerequisites.items()}
    pending = {
        step_id: sum(prerequisite not in carried for prerequisite in items)
        for step_id, items in prerequisites.items()
    }
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "ids keys kinds job_types payloads priorities max_attempts timeouts resource_keys "
            "pending job_ids totals carried outputs"
        ).split()
    }
    roots_external = 0
    for row in steps:
        (old_id, key, kind, job_type, payload, priority, attempts, timeout, resource) = row[:9]
        is_carried = old_id in carried
        is_root = not is_carried and pending[old_id] == 0
        columns["ids"].append(new_id[old_id])
        columns["keys"].append(key)
        columns["kinds"].append(kind)
        columns["job_types"].append(job_type)
        columns["payloads"].append(payload if payload is not None else json.dumps(None))
        columns["priorities"].append(priority)
        columns["max_attempts"].append(attempts)
        columns["timeouts"].append(timeout)
        columns["resource_keys"].append(resource)
        columns["pending"].append(pending[old_id])
        columns["totals"].append(totals[old_id])
        columns["carried"].append(is_carried)
        columns["outputs"].append(row[10] if is_carried else None)
        columns["job_ids"].append(uuid7() if is_root and kind == WorkflowStepKind.JOB else None)
        roots_external += is_root and kind == WorkflowStepKind.EXTERNAL
    return {
        **columns,
        "run_id": run_id,
        "organization_id": organization_id,
        "edge_from": [new_id[edge[0]] for edge in edges],
        "edge_to": [new_id[edge[1]] for edge in edges],
        "edge_modes": [edge[2] for edge in edges],
        "unsatisfied": [0] * len(steps),
        "hold": False,
    }, roots_external

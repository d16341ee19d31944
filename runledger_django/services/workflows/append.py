"""Appending steps to a running run through an open external window (reference 3.8): dynamic
fan-out, idempotent per mutation key."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connections

from ...db import workflow_queries
from ...db.transaction import execute
from ...domain import WorkflowReleaseMode, WorkflowRunStatus, WorkflowStepKind, WorkflowStepStatus
from ...errors import Code, RunledgerError
from ...validation import encode_payload, is_blank, utf8_length
from ._scope import read_committed, run_status, scope_params
from .builder import Workflow
from .release import RunDelta, propagate_runs, run_lock_key
from .start import _definitions, pack_arrays
from .validation import PreparedStep, PreparedWorkflow, prepare_steps

DEFAULT_USING = "default"
MUTATION_KEY_MAX_BYTES = 512
_TERMINAL_STEPS = frozenset(
    {WorkflowStepStatus.SUCCEEDED, WorkflowStepStatus.FAILED, WorkflowStepStatus.CANCELED}
)


def append_workflow_steps(
    run_id: Any,
    steps: Any,
    *,
    scope: Any,
    mutation_key: Any,
    window: Any,
    metadata: Any = None,
    using: str = DEFAULT_USING,
    _running_step: bool = False,
) -> list[uuid.UUID]:
    """Add the steps of ``steps`` (a ``Workflow`` used as a list of steps; its type is not
    used) to a run while its external step ``window`` is waiting: they may come after
    existing steps and after each other; existing steps never gain prerequisites. Steps with
    nothing left to wait for are released at once (in the order given), or canceled when an
    existing prerequisite behind ``when="success"`` did not succeed. Returns the new step ids
    in the order given.

    Idempotent per ``mutation_key``: the same request again returns the same ids; another one
    raises ``workflow.append_conflicting_retry``.

    Transaction: joins the caller's READ COMMITTED atomic block (in a savepoint), or owns one.
    Never waits for a cancellation (``workflow.release_conflict``).

    Raises:
        RunledgerError: ``workflow.append_mutation_key_blank`` and the ``invalid_dag`` codes
            before any SQL; ``workflow.append_unsupported_isolation``;
            ``workflow.run_not_found``; ``workflow.append_window_missing``,
            ``_not_external``, ``_not_open``; ``workflow.append_terminal_run``;
            ``workflow.invalid_dag_duplicate_step_key`` (a key the run has);
            ``workflow.invalid_dag_missing_dependency``;
            ``workflow.definition_not_found_or_disabled``; ``workflow.release_conflict``.
    """
    if (
        not isinstance(mutation_key, str)
        or is_blank(mutation_key)
        or utf8_length(mutation_key) > MUTATION_KEY_MAX_BYTES
    ):
        raise RunledgerError.for_code(
            Code.WF_APPEND_MUTATION_KEY_BLANK, "mutation key must be non-blank text"
        )
    if not isinstance(steps, Workflow):
        raise RunledgerError.for_code(Code.WF_INVALID_DAG, "steps must be given as a Workflow")
    if not isinstance(window, str):
        raise RunledgerError.for_code(Code.WF_APPEND_WINDOW_MISSING, "window must be a step key")
    prepared = prepare_steps(steps)
    metadata_text = encode_payload({} if metadata is None else metadata)
    request = json.dumps(
        {
            "window": window,
            "steps": [
                {
                    "key": step.key,
                    "kind": step.kind.value,
                    "job_type": step.job_type,
                    "payload": step.value,
                    "priority": step.priority,
                    "max_attempts": step.max_attempts,
                    "timeout_seconds": step.timeout_seconds,
                    "execution_resource_key": step.execution_resource_key,
                    "after": sorted((key, mode.value) for key, mode in step.after),
                }
                for step in sorted(prepared, key=lambda item: item.key)
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    params = scope_params(run_id, scope)
    with read_committed(
        using, operation="append workflow steps", code=Code.WF_APPEND_UNSUPPORTED_ISOLATION
    ) as cursor:
        return _append(
            cursor,
            params,
            prepared,
            window,
            mutation_key,
            metadata_text,
            request,
            using,
            running_step=_running_step,
        )


def append_from_running_step(
    step_id: uuid.UUID,
    run_id: uuid.UUID,
    step_key: str,
    steps: Any,
    *,
    mutation_key: Any,
    using: str = DEFAULT_USING,
) -> list[uuid.UUID]:
    """A running job step adds steps to its own run (checklist item 37): the append joins the
    handler's transaction, so in an atomic handler it commits with the step's success, and
    steps that come after the running step are released by that success. The step itself is
    the window while it runs.

    Transaction: requires the caller's atomic block (the atomic handler's).

    Raises:
        RunledgerError: ``workflow.append_window_not_open`` outside a transaction, or once
            the step is no longer running; the codes of ``append_workflow_steps``.
    """
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RunledgerError.for_code(
            Code.WF_APPEND_WINDOW_NOT_OPEN,
            "a step appends inside its atomic handler's transaction (atomic=True)",
        )
    from ...domain import ReadScope

    return append_workflow_steps(
        run_id,
        steps,
        scope=ReadScope.ADMIN,
        mutation_key=mutation_key,
        window=step_key,
        using=using,
        _running_step=True,
    )


def _append(
    cursor: Any,
    params: dict[str, Any],
    prepared: list[PreparedStep],
    window: str,
    mutation_key: str,
    metadata: str,
    request: str,
    using: str,
    *,
    running_step: bool = False,
) -> list[uuid.UUID]:
    context = "append workflow steps"
    run_id = params["run_id"]
    run_status(cursor, params)  # in scope
    key = {"run_id": run_id, "mutation_key": mutation_key, "request": request}
    applied = execute(cursor, workflow_queries.EXISTING_MUTATION, key, context=context).fetchone()
    if applied is not None:
        if not applied[0]:
            raise RunledgerError.for_code(
                Code.WF_APPEND_CONFLICTING_RETRY, "the mutation key was used for other steps"
            )
        stored = json.loads(applied[1]) if isinstance(applied[1], str) else applied[1]
        return [uuid.UUID(value) for value in stored]
    existing = {
        row[1]: (row[0], row[2], row[3])
        for row in execute(
            cursor, workflow_queries.LOCK_RUN_STEP_STATES, {"run_id": run_id}, context=context
        ).fetchall()
    }
    run_row = execute(
        cursor, workflow_queries.LOCK_RUN_ROW, {"run_id": run_id}, context=context
    ).fetchone()
    status, organization_id = WorkflowRunStatus(run_row[0]), run_row[1]
    if window not in existing:
        raise RunledgerError.for_code(Code.WF_APPEND_WINDOW_MISSING, "no step has that key")
    kind = WorkflowStepKind.JOB if running_step else WorkflowStepKind.EXTERNAL
    if existing[window][2] != kind:
        raise RunledgerError.for_code(Code.WF_APPEND_WINDOW_NOT_EXTERNAL, "a job step")
    if status.is_terminal:
        raise RunledgerError.for_code(Code.WF_APPEND_TERMINAL_RUN, f"the run is {status}")
    open_status = (
        WorkflowStepStatus.ENQUEUED if running_step else WorkflowStepStatus.WAITING_FOR_EXTERNAL
    )
    if existing[window][1] != open_status:
        raise RunledgerError.for_code(
            Code.WF_APPEND_WINDOW_NOT_OPEN, f"the window is {existing[window][1]}"
        )
    new_keys = {step.key for step in prepared}
    for step in prepared:
        if step.key in existing:
            raise RunledgerError.for_code(
                Code.WF_INVALID_DAG_DUPLICATE_STEP_KEY, f"the run has a step {step.key!r}"
            )
        for dependency, _ in step.after:
            if dependency not in existing and dependency not in new_keys:
                raise RunledgerError.for_code(
                    Code.WF_INVALID_DAG_MISSING_DEPENDENCY, f"no step {dependency!r}"
                )
    locked = execute(
        cursor,
        workflow_queries.TRY_LOCK_RUN_SHARED,
        {"lock_key": run_lock_key(run_id)},
        context=context,
    ).fetchone()
    if not locked or not locked[0]:
        raise RunledgerError.for_code(Code.WF_RELEASE_CONFLICT, f"run {run_id} is being canceled")
    definitions = _definitions(cursor, _as_prepared(prepared))
    graph, decide = _graph(run_id, organization_id, prepared, existing, definitions)
    execute(cursor, workflow_queries.INSERT_GRAPH, pack_arrays(graph), context=context)
    step_ids = [step.id for step in prepared]
    execute(
        cursor,
        workflow_queries.INSERT_MUTATION,
        {
            "run_id": run_id,
            "mutation_key": mutation_key,
            "metadata": metadata,
            "request": request,
            "step_ids": json.dumps([str(step_id) for step_id in step_ids]),
        },
        context=context,
    )
    delta = RunDelta(total=len(prepared), decide=decide)
    propagate_runs(cursor, {run_id: delta}, using=using, lock_held=True)
    return step_ids


def _as_prepared(steps: list[PreparedStep]) -> PreparedWorkflow:
    return PreparedWorkflow(
        workflow_type="append",
        organization_id=None,
        idempotency_key=None,
        active_key=None,
        fail_fast=False,
        metadata="{}",
        result_step_key=None,
        steps=tuple(steps),
        request="{}",
    )


def _graph(
    run_id: uuid.UUID,
    organization_id: uuid.UUID | None,
    prepared: list[PreparedStep],
    existing: dict[str, tuple[uuid.UUID, str, str]],
    definitions: dict[str, tuple[int, int, int]],
) -> tuple[dict[str, Any], list[uuid.UUID]]:
    """INSERT_GRAPH's arrays (every new step BLOCKED) and the steps to decide at once, in the
    order given: a terminal existing prerequisite counts as done (unsatisfied when it did
    not succeed behind ``when="success"``)."""
    id_of = {step.key: step.id for step in prepared}
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "ids keys kinds job_types payloads priorities max_attempts timeouts resource_keys "
            "pending job_ids totals carried outputs unsatisfied edge_from edge_to edge_modes"
        ).split()
    }
    decide: list[uuid.UUID] = []
    for step in prepared:
        pending = unsatisfied = 0
        for dependency, mode in step.after:
            if dependency in id_of:
                pending += 1
                prerequisite = id_of[dependency]
            else:
                prerequisite, state, _ = existing[dependency]
                if state not in _TERMINAL_STEPS:
                    pending += 1
                elif mode == WorkflowReleaseMode.ON_SUCCESS and (
                    state != WorkflowStepStatus.SUCCEEDED
                ):
                    unsatisfied += 1
            columns["edge_from"].append(prerequisite)
            columns["edge_to"].append(step.id)
            columns["edge_modes"].append(mode.value)
        if step.job_type is None:
            settings: tuple[int | None, int | None, int | None] = (None, None, None)
        else:
            priority, attempts, timeout = definitions[step.job_type]
            settings = (
                priority if step.priority is None else step.priority,
                attempts if step.max_attempts is None else step.max_attempts,
                timeout if step.timeout_seconds is None else step.timeout_seconds,
            )
        columns["ids"].append(step.id)
        columns["keys"].append(step.key)
        columns["kinds"].append(step.kind.value)
        columns["job_types"].append(step.job_type)
        columns["payloads"].append(step.payload)
        columns["priorities"].append(settings[0])
        columns["max_attempts"].append(settings[1])
        columns["timeouts"].append(settings[2])
        columns["resource_keys"].append(step.execution_resource_key)
        columns["pending"].append(pending)
        columns["job_ids"].append(None)
        columns["totals"].append(len(step.after))
        columns["carried"].append(False)
        columns["outputs"].append(None)
        columns["unsatisfied"].append(unsatisfied)
        if pending == 0:
            decide.append(step.id)
    return {
        **columns,
        "run_id": run_id,
        "organization_id": organization_id,
        "hold": True,
    }, decide

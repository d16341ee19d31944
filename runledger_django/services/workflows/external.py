"""Finishing an external gate by API (reference 3.7): idempotent for an identical outcome,
never waiting for a cancellation."""

from __future__ import annotations

from typing import Any

from ...db import workflow_queries
from ...db.transaction import execute
from ...domain import WorkflowStepKind, WorkflowStepStatus
from ...errors import Code, RunledgerError
from ...validation import encode_payload
from ._scope import not_found, read_committed, scope_params
from .release import RunDelta, propagate_runs, run_lock_key

DEFAULT_USING = "default"
_OUTCOMES = frozenset(
    {WorkflowStepStatus.SUCCEEDED, WorkflowStepStatus.FAILED, WorkflowStepStatus.CANCELED}
)


def complete_external_step(
    run_id: Any,
    step_key: Any,
    *,
    scope: Any,
    status: Any = "SUCCEEDED",
    output: Any = None,
    using: str = DEFAULT_USING,
) -> WorkflowStepStatus:
    """Finish the external step ``step_key`` of a run as SUCCEEDED (with an optional JSON
    ``output``, its dependents' upstream), FAILED or CANCELED, and release what it gated.

    Completing it again with the same outcome and output (jsonb-equal: ``{"n": 1}`` equals
    ``{"n": 1.0}``) returns the outcome and changes nothing.

    Transaction: joins the caller's READ COMMITTED atomic block (in a savepoint, so a refusal
    leaves it usable), or owns one. Never waits for the run's release lock: during a cancel
    it raises ``workflow.release_conflict`` with nothing changed.

    Raises:
        RunledgerError: ``workflow.external_step_invalid_terminal_status``,
            ``workflow.external_step_output_invalid_status``, ``job.invalid_payload`` before
            any SQL; ``workflow.external_completion_unsupported_isolation``;
            ``workflow.run_not_found``; ``workflow.external_step_not_found``;
            ``workflow.external_step_not_external``; ``workflow.external_step_not_waiting``;
            ``workflow.external_step_conflicting_completion_retry``;
            ``workflow.external_step_conflicting_output_retry``;
            ``workflow.release_conflict``.
    """
    if not isinstance(status, str) or status not in _OUTCOMES:
        raise RunledgerError.for_code(
            Code.WF_EXTERNAL_STEP_INVALID_TERMINAL_STATUS,
            "status must be SUCCEEDED, FAILED or CANCELED",
        )
    if output is not None and status != WorkflowStepStatus.SUCCEEDED:
        raise RunledgerError.for_code(
            Code.WF_EXTERNAL_STEP_OUTPUT_INVALID_STATUS, "only a success carries an output"
        )
    output_text = None if output is None else encode_payload(output)
    if not isinstance(step_key, str):
        raise RunledgerError.for_code(Code.WF_EXTERNAL_STEP_NOT_FOUND, "step key is not text")
    params = scope_params(run_id, scope)
    with read_committed(
        using,
        operation="complete an external step",
        code=Code.WF_EXTERNAL_COMPLETION_UNSUPPORTED_ISOLATION,
    ) as cursor:
        context = "complete external step"
        row = execute(
            cursor,
            workflow_queries.EXTERNAL_STEP_FOR_UPDATE,
            {**params, "step_key": step_key, "output": output_text},
            context=context,
        ).fetchone()
        if row is None:
            if (
                execute(
                    cursor, workflow_queries.RUN_STATUS_IN_SCOPE, params, context=context
                ).fetchone()
                is None
            ):
                raise not_found(params["run_id"])
            raise RunledgerError.for_code(
                Code.WF_EXTERNAL_STEP_NOT_FOUND, "the run has no step with that key"
            )
        step_id, kind, current, same_output = row
        if kind != WorkflowStepKind.EXTERNAL:
            raise RunledgerError.for_code(
                Code.WF_EXTERNAL_STEP_NOT_EXTERNAL, "the step is a job step"
            )
        if current in _OUTCOMES:
            if current != status:
                raise RunledgerError.for_code(
                    Code.WF_EXTERNAL_STEP_CONFLICTING_COMPLETION_RETRY,
                    f"the step already finished as {current}",
                )
            if not same_output:
                raise RunledgerError.for_code(
                    Code.WF_EXTERNAL_STEP_CONFLICTING_OUTPUT_RETRY,
                    "the step already finished with another output",
                )
            return WorkflowStepStatus(current)
        if current != WorkflowStepStatus.WAITING_FOR_EXTERNAL:
            raise RunledgerError.for_code(
                Code.WF_EXTERNAL_STEP_NOT_WAITING, f"the step is {current}"
            )
        locked = execute(
            cursor,
            workflow_queries.TRY_LOCK_RUN_SHARED,
            {"lock_key": run_lock_key(params["run_id"])},
            context=context,
        ).fetchone()
        if not locked or not locked[0]:
            raise RunledgerError.for_code(
                Code.WF_RELEASE_CONFLICT, f"run {params['run_id']} is being canceled"
            )
        execute(
            cursor,
            workflow_queries.FINISH_EXTERNAL_STEP,
            {"step_id": step_id, "status": status, "output": output_text},
            context=context,
        )
        delta = RunDelta(waiting=-1)
        delta.count(status)
        delta.finished.append((step_id, status))
        propagate_runs(cursor, {params["run_id"]: delta}, using=using, lock_held=True)
        return WorkflowStepStatus(status)

"""Cancelling a whole run (reference 3.9): every unfinished step canceled, running handlers
fenced, no dependent released, with the lock order that lets completions in flight finish
first."""

from __future__ import annotations

from typing import Any

from ...db import workflow_queries
from ...db.transaction import execute
from ...domain import WorkflowRunStatus
from ...errors import Code
from ._scope import read_committed, run_status, scope_params
from .release import RunDelta, apply_run_delta, run_lock_key

DEFAULT_USING = "default"


def cancel_workflow(run_id: Any, *, scope: Any, using: str = DEFAULT_USING) -> WorkflowRunStatus:
    """Cancel every unfinished step of a run; return the run's status (CANCELED, or the
    status of a run that had already finished: a SUCCEEDED run keeps its result).

    Jobs of enqueued steps are canceled (a running handler is fenced at its next write);
    blocked and waiting steps become CANCELED; no dependent is released, not even behind a
    ``when="terminal"`` edge. Cancelling a single job of a run instead propagates normally.

    Transaction: joins the caller's READ COMMITTED atomic block (in a savepoint), or owns
    one. Locks: the run's job rows, then the run's exclusive release lock (completions in
    flight finish first), the job rows again (jobs released meanwhile), the step rows, the
    run row.

    Raises:
        RunledgerError: ``workflow.run_not_found`` (also for a run outside ``scope``);
            ``workflow.cancel_unsupported_isolation``; ``job.invalid_argument``.
    """
    params = scope_params(run_id, scope)
    with read_committed(
        using, operation="cancel a workflow run", code=Code.WF_CANCEL_UNSUPPORTED_ISOLATION
    ) as cursor:
        status = run_status(cursor, params)
        if status.is_terminal:
            return status
        run = {"run_id": params["run_id"]}
        context = "cancel workflow run"
        execute(cursor, workflow_queries.LOCK_RUN_JOBS, run, context=context)
        execute(
            cursor,
            workflow_queries.LOCK_RUN_EXCLUSIVE,
            {"lock_key": run_lock_key(params["run_id"])},
            context=context,
        )
        execute(cursor, workflow_queries.LOCK_RUN_JOBS, run, context=context)
        execute(cursor, workflow_queries.LOCK_RUN_STEPS, run, context=context)
        row = execute(cursor, workflow_queries.LOCK_RUN_ROW, run, context=context).fetchone()
        status = WorkflowRunStatus(row[0])
        if status.is_terminal:  # it finished while the cancel waited
            return status
        canceled, waiting, _ = execute(
            cursor, workflow_queries.CANCEL_RUN_SWEEP, run, context=context
        ).fetchone()
        transition = apply_run_delta(
            cursor,
            params["run_id"],
            RunDelta(canceled=canceled, waiting=-waiting),
            cancel=True,
        )
        return transition.status

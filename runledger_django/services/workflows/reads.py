"""Scoped reads of runs and their steps, and the waitable result handle (reference 3.10)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.db.models import QuerySet

from ...db.classify import classify
from ...domain import ReadScope, WorkflowRunStatus
from ...errors import Code, RunledgerError
from ...models import WorkflowRun, WorkflowStep
from ...validation import validate_page
from ._scope import not_found, scope_params

DEFAULT_USING = "default"
WAIT_TIMEOUT_SECONDS = 300.0
POLL_SECONDS = 0.5
POLL_FLOOR_SECONDS = 0.001


def _runs(scope: ReadScope, using: str) -> QuerySet[WorkflowRun]:
    runs = WorkflowRun.objects.using(using)
    if scope.is_admin:
        return runs
    if scope.organization_id is None:
        return runs.filter(organization_id__isnull=True)
    return runs.filter(organization_id=scope.organization_id)


def get_workflow_run(run_id: Any, *, scope: Any, using: str = DEFAULT_USING) -> WorkflowRun:
    """The run ``run_id`` as ``scope`` may see it.

    Transaction: one read (or the caller's atomic block).

    Raises:
        RunledgerError: ``workflow.run_not_found`` (also for another tenant's run);
            ``job.invalid_argument``.
    """
    params = scope_params(run_id, scope)
    try:
        run = _runs(scope, using).filter(id=params["run_id"]).first()
    except DatabaseError as exc:
        raise classify(exc, "read workflow run") from exc
    if run is None:
        raise not_found(params["run_id"])
    return run


def list_workflow_runs(
    *,
    scope: Any,
    status: Any = None,
    workflow_type: Any = None,
    limit: Any = 50,
    offset: Any = 0,
    using: str = DEFAULT_USING,
) -> list[WorkflowRun]:
    """Runs ``scope`` may see, newest first, optionally of one status or workflow type.

    Raises:
        RunledgerError: ``job.invalid_argument``, ``job.invalid_status``,
            ``job.invalid_pagination``.
    """
    scope_params(uuid.UUID(int=0), scope)
    page = validate_page(limit, offset)
    runs = _runs(scope, using)
    if status is not None:
        if status not in WorkflowRunStatus.values:
            raise RunledgerError.for_code(Code.INVALID_STATUS, "not a workflow run status")
        runs = runs.filter(status=status)
    if workflow_type is not None:
        if not isinstance(workflow_type, str):
            raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "workflow_type must be text")
        runs = runs.filter(workflow_type=workflow_type)
    try:
        return list(runs.order_by("-created_at", "-id")[page.offset : page.offset + page.limit])
    except DatabaseError as exc:
        raise classify(exc, "list workflow runs") from exc


def list_workflow_steps(
    run_id: Any, *, scope: Any, using: str = DEFAULT_USING
) -> list[WorkflowStep]:
    """The steps of a run ``scope`` may see, in id order (prerequisites first).

    Raises:
        RunledgerError: ``workflow.run_not_found``.
    """
    run = get_workflow_run(run_id, scope=scope, using=using)
    return list(WorkflowStep.objects.using(using).filter(workflow_run_id=run.id).order_by("id"))


@dataclass(frozen=True, slots=True)
class WorkflowHandle:
    """A run to watch: its status, its record and, once it SUCCEEDED, its result."""

    run_id: uuid.UUID
    scope: ReadScope
    using: str = DEFAULT_USING

    def run(self) -> WorkflowRun:
        return get_workflow_run(self.run_id, scope=self.scope, using=self.using)

    def status(self) -> WorkflowRunStatus:
        return WorkflowRunStatus(self.run().status)

    def result(self, *, timeout: float = WAIT_TIMEOUT_SECONDS, poll: float = POLL_SECONDS) -> Any:
        """Wait until the run is terminal and return its result (the result step's output).

        Each look is a committed read of its own, so call it outside a transaction to see
        the run move. ``timeout=0`` reads once.

        Raises:
            RunledgerError: ``workflow.result_not_declared`` (at once, even while running);
                ``workflow.result_missing``; ``workflow.result_unsuccessful_terminal``;
                ``workflow.result_wait_timeout``; ``workflow.run_not_found``.
        """
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "timeout must be >= 0 seconds")
        interval = max(POLL_FLOOR_SECONDS, float(poll))
        deadline = time.monotonic() + float(timeout)
        while True:
            run = self.run()
            if run.result_step_key is None:
                raise RunledgerError.for_code(
                    Code.WF_RESULT_NOT_DECLARED, f"run {run.id} declares no result step"
                )
            if run.status == WorkflowRunStatus.SUCCEEDED:
                if run.result is None:
                    raise RunledgerError.for_code(
                        Code.WF_RESULT_MISSING, f"run {run.id} succeeded without output"
                    )
                return run.result
            if WorkflowRunStatus(run.status).is_terminal:
                raise RunledgerError.for_code(
                    Code.WF_RESULT_UNSUCCESSFUL_TERMINAL, f"run {run.id} ended {run.status}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RunledgerError.for_code(
                    Code.WF_RESULT_WAIT_TIMEOUT, f"run {run.id} is still {run.status}"
                )
            time.sleep(min(interval, remaining))


def workflow_handle(run_id: Any, *, scope: Any, using: str = DEFAULT_USING) -> WorkflowHandle:
    """A handle on a run (checked now: a wrong scope raises ``workflow.run_not_found``)."""
    run = get_workflow_run(run_id, scope=scope, using=using)
    return WorkflowHandle(run_id=run.id, scope=scope, using=using)

"""Operator actions on one job: cancel it, or requeue a dead letter (reference 11)."""

from __future__ import annotations

import uuid

from ..db import operations_queries
from ..domain import JobStatus, ReadScope
from ..errors import Code, RunledgerError
from ._lease import DEFAULT_USING, scope_params, transition
from .lifecycle import terminal_write
from .wakeup import JOBS_CHANNEL, wake_after_commit


def _not_found(job_id: object) -> RunledgerError:
    return RunledgerError.for_code(Code.NOT_FOUND, f"job {job_id} is not in the scope")


def _wrong_state(job_id: object, status: str, action: str) -> RunledgerError:
    return RunledgerError.for_code(
        Code.INVALID_STATE_TRANSITION, f"job {job_id} is {status}; cannot {action} it"
    )


def cancel_job(
    job_id: uuid.UUID | str, *, scope: ReadScope, using: str = DEFAULT_USING
) -> JobStatus:
    """Cancel a PENDING or LEASED job; return its new status (CANCELED).

    A handler still running is not interrupted: its next fenced write fails and its result is
    discarded. Its old lease expiry is kept, and a keyed job holds its execution resource until
    then, so a cancelled handler never overlaps the next owner of the key.

    Transaction: one statement; joins the caller's atomic block when there is one.

    Raises:
        RunledgerError: ``job.not_found`` (also for a job outside ``scope``: a scope never
            reveals another tenant's jobs), ``job.invalid_state_transition``,
            ``job.invalid_argument``.
    """
    params = scope_params(job_id, scope)
    rows = terminal_write(
        using,
        operations_queries.CANCEL_JOB,
        params,
        context="cancel job",
        workflow=False,
        finished=lambda rows: [(row[1], JobStatus.CANCELED.value) for row in rows if row[1]],
        retry_when_short=False,
        plain_guard=False,
    )
    if rows:
        return JobStatus.CANCELED
    status = _status_in_scope(params, using)
    if status is None:
        raise _not_found(params["job_id"])
    raise _wrong_state(params["job_id"], status, "cancel")


def requeue_job(
    job_id: uuid.UUID | str, *, scope: ReadScope, using: str = DEFAULT_USING
) -> JobStatus:
    """Put a DEAD_LETTERED or CANCELED job back to PENDING, due now, with a fresh attempt
    budget (``run_number`` + 1, attempt 0); return its new status (PENDING).

    Progress and checkpoint are kept, so a handler can resume where it stopped.

    Transaction: one statement; joins the caller's atomic block when there is one. Workers
    are woken after the commit.

    Raises:
        RunledgerError: ``job.not_found``, ``job.invalid_state_transition`` (also for a job
            whose run number cannot grow any more), ``job.cancellation_not_quiesced`` (a
            cancelled job whose handler may still run: try again once its old lease expired),
            ``job.invalid_argument``.
    """
    params = scope_params(job_id, scope)
    rows = transition(using, operations_queries.REQUEUE_JOB, params, context="requeue job")
    if not rows:
        raise _not_found(params["job_id"])
    status, not_quiesced, requeued, runs_exhausted, workflow_job = rows[0]
    if workflow_job and status in (JobStatus.DEAD_LETTERED, JobStatus.CANCELED):
        raise RunledgerError.for_code(
            Code.WF_REQUEUE_NOT_SUPPORTED, f"job {params['job_id']} is a workflow step's"
        )
    if requeued:
        wake_after_commit(using, JOBS_CHANNEL)
        return JobStatus.PENDING
    if not_quiesced:
        raise RunledgerError.for_code(
            Code.CANCELLATION_NOT_QUIESCED,
            f"job {params['job_id']} was canceled while leased; its lease is still live",
        )
    if runs_exhausted:
        # Only a row written by hand gets here: 2**31 - 2 runs leave no run number to start.
        raise RunledgerError.for_code(
            Code.INVALID_STATE_TRANSITION,
            f"job {params['job_id']} has used every run number; cannot requeue it",
        )
    raise _wrong_state(params["job_id"], status, "requeue")


def _status_in_scope(params: dict[str, object], using: str) -> str | None:
    rows = transition(
        using, operations_queries.JOB_STATUS_IN_SCOPE, params, context="read job status"
    )
    return str(rows[0][0]) if rows else None

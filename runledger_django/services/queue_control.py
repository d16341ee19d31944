"""Queue control per job type (docs/queue-control.md): pause, resume and limits.

The state lives on the job definition row, never in a worker: every claim reads it (the claim
statements of ``lifecycle_queries``), so a change holds from the next claim on every worker and
survives restarts and deploys. Definition syncing never writes these columns on an existing
row: the operator owns them.
"""

from __future__ import annotations

import logging
from typing import Any

from ..db import queue_control_queries
from ..domain import JobTypeControl
from ..errors import Code, RunledgerError
from ..validation import validate_job_type, validate_limits, validate_pause_note
from ._lease import DEFAULT_USING, transition
from .wakeup import JOBS_CHANNEL, wake_after_commit

logger = logging.getLogger(__name__)


def pause_job_type(
    job_type: str,
    *,
    reason: str | None = None,
    actor: str | None = None,
    using: str = DEFAULT_USING,
) -> JobTypeControl:
    """Stop claims of ``job_type`` on every worker, from the next claim on.

    Recording, promotion and enqueueing go on (the jobs wait PENDING); running jobs finish
    and record their outcome; the reaper still moves expired leases. Pausing a paused type
    changes nothing: the first pause time, reason and actor stay.

    Transaction: one statement (two when already paused); joins the caller's atomic block.

    Raises:
        RunledgerError: ``job.invalid_job_type``, ``job.invalid_job_type_length``,
            ``job_definition.invalid_pause_note`` before any SQL; ``job.definition_not_found``.
    """
    params = {
        "job_type": validate_job_type(job_type),
        "reason": validate_pause_note(reason, "reason"),
        "actor": validate_pause_note(actor, "actor"),
    }
    rows = transition(using, queue_control_queries.PAUSE_JOB_TYPE, params, context="pause job type")
    control = _control(rows, params, using, changed=bool(rows))
    if control.changed:
        _log_change("paused", control)
    return control


def resume_job_type(job_type: str, *, using: str = DEFAULT_USING) -> JobTypeControl:
    """Let workers claim ``job_type`` again, and wake the idle ones at once (after the
    commit). Resuming a running type changes nothing.

    Transaction: one statement (two when not paused); joins the caller's atomic block.

    Raises:
        RunledgerError: ``job.invalid_job_type``, ``job.invalid_job_type_length`` before any
            SQL; ``job.definition_not_found``.
    """
    params = {"job_type": validate_job_type(job_type)}
    rows = transition(
        using, queue_control_queries.RESUME_JOB_TYPE, params, context="resume job type"
    )
    control = _control(rows, params, using, changed=bool(rows))
    if control.changed:
        wake_after_commit(using, JOBS_CHANNEL)
        _log_change("resumed", control)
    return control


def set_job_type_limits(
    job_type: str,
    *,
    max_concurrency: int | None = None,
    rate_limit: tuple[int, int] | None = None,
    using: str = DEFAULT_USING,
) -> JobTypeControl:
    """Set ``job_type``'s limits (None clears one): at most ``max_concurrency`` LEASED jobs
    across every worker, and at most ``rate_limit[0]`` job starts per ``rate_limit[1]``
    seconds. A raised limit applies at the next claim; a lowered one as running jobs finish
    (nothing is pre-empted). Workers are woken, since a raise may free slots.

    Transaction: one statement; joins the caller's atomic block.

    Raises:
        RunledgerError: ``job.invalid_job_type``, ``job_definition.invalid_limit`` before any
            SQL; ``job.definition_not_found``.
    """
    concurrency, count, period = validate_limits(max_concurrency, rate_limit)
    params = {
        "job_type": validate_job_type(job_type),
        "max_concurrency": concurrency,
        "rate_limit_count": count,
        "rate_limit_period_seconds": period,
    }
    rows = transition(
        using, queue_control_queries.SET_JOB_TYPE_LIMITS, params, context="set job type limits"
    )
    control = _control(rows, params, using, changed=True)
    wake_after_commit(using, JOBS_CHANNEL)
    _log_change("limits_set", control)
    return control


def _control(
    rows: list[tuple[Any, ...]], params: dict[str, Any], using: str, *, changed: bool
) -> JobTypeControl:
    if not rows:
        rows = transition(
            using,
            queue_control_queries.JOB_TYPE_CONTROL,
            {"job_type": params["job_type"]},
            context="read job type control",
        )
    if not rows:
        raise RunledgerError.for_code(
            Code.DEFINITION_NOT_FOUND, f"no job definition for {params['job_type']!r}"
        )
    job_type, paused_at, reason, actor, concurrency, count, period = rows[0]
    return JobTypeControl(
        job_type=job_type,
        paused_at=paused_at,
        paused_reason=reason,
        paused_by=actor,
        max_concurrency=concurrency,
        rate_limit_count=count,
        rate_limit_period_seconds=period,
        changed=changed,
    )


def _log_change(action: str, control: JobTypeControl) -> None:
    """One structured line per change: the audit trail of who paused what, and why."""
    logger.info(
        "job type %s job_type=%s actor=%s max_concurrency=%s rate_limit=%s",
        action,
        control.job_type,
        control.paused_by or "none",
        control.max_concurrency or "none",
        f"{control.rate_limit_count}/{control.rate_limit_period_seconds}s"
        if control.rate_limit_count
        else "none",
        extra={
            "runledger": {
                "job_type": control.job_type,
                "outcome": action,
                "actor": control.paused_by,
                "reason": control.paused_reason,
            }
        },
    )

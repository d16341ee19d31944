"""The reaper: leases whose worker vanished go back to PENDING or dead-letter (reference 10).

No job stays LEASED forever: a worker that dies mid-job leaves a lease that expires, and the
next reaper pass (every worker runs one) retries the job after a flat delay, or dead-letters
it when its attempts are spent. A row that cannot be moved is pushed aside (its lease moved
forward) so it never blocks the rows behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..db import lifecycle_queries
from ..db.classify import is_session_fatal
from ..domain import JobStatus, ReapReport
from ..errors import Code, RunledgerError
from ..validation import INT32_MAX, validate_job_types, validate_page
from ._lease import DEFAULT_USING, transition
from .lifecycle import terminal_write

logger = logging.getLogger(__name__)

REAP_BATCH_SIZE = 100
REAPER_RETRY_DELAY_MS = 30_000
"""How long a reaped job waits before it runs again (reference 12.5)."""
RESOURCE_CLAIM_CLEANUP_LIMIT = 1000


def reap_expired_leases(
    job_types: Sequence[str],
    *,
    limit: int = REAP_BATCH_SIZE,
    retry_delay_ms: int = REAPER_RETRY_DELAY_MS,
    using: str = DEFAULT_USING,
) -> ReapReport:
    """Move up to ``limit`` expired leases of ``job_types`` out of LEASED; free stale keys.

    The batch is one statement. If it fails (a row a trigger or constraint rejects), every
    row is retried alone in its own savepoint, and a row that still fails has its lease pushed
    ``retry_delay_ms`` forward and is counted ``deferred``. Then execution-resource claims
    that no live lease owns any more are released.

    Transaction: the batch is its own transaction; the per-row fallback owns one with a
    savepoint per row; the resource cleanup is one more statement.

    Raises:
        RunledgerError: ``job.invalid_retry_delay``, ``job.invalid_pagination`` or
            ``job.invalid_job_type`` before any SQL; a classified database error when the
            database itself fails (lost connection, shutdown).
    """
    types = validate_job_types(job_types)
    page = validate_page(limit, 0)
    if type(retry_delay_ms) is not int or not 0 < retry_delay_ms <= INT32_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_RETRY_DELAY, "retry_delay_ms must be a positive 32-bit int"
        )
    if not types:
        return ReapReport()
    params = {
        "job_types": types,
        "limit": page.limit,
        "retry_delay_ms": retry_delay_ms,
        "only_job_id": None,
    }
    deferred = 0
    try:
        rows = _reap(params, using, context="reap expired leases")
    except RunledgerError as error:
        if error.__cause__ is None or is_session_fatal(error.__cause__):
            raise
        rows, deferred = _reap_row_by_row(params, using)
    released = transition(
        using,
        lifecycle_queries.RELEASE_STALE_RESOURCE_CLAIMS,
        {"limit": RESOURCE_CLAIM_CLEANUP_LIMIT},
        context="release stale execution resource claims",
    )
    retried = [row for row in rows if row[1] == "PENDING"]
    report = ReapReport(
        retried=len(retried),
        dead_lettered=len(rows) - len(retried),
        deferred=deferred,
        released_resources=len(released),
        batch_was_full=len(rows) + deferred >= page.limit,
        next_run_ats=tuple(row[2] for row in retried),
    )
    if report.reaped or report.deferred:
        logger.info(
            "reaped expired job leases retried=%d dead_lettered=%d deferred=%d",
            report.retried,
            report.dead_lettered,
            report.deferred,
        )
    return report


def _dead_workflow_steps(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, str]]:
    return [
        (row[3], JobStatus.DEAD_LETTERED.value)
        for row in rows
        if row[3] is not None and row[1] == JobStatus.DEAD_LETTERED
    ]


def _reap(params: dict[str, Any], using: str, *, context: str) -> list[tuple[Any, ...]]:
    """One reap statement; a workflow job it dead-letters fails its step and propagates in
    the same transaction (a retried one stays ENQUEUED: nothing to write)."""
    return terminal_write(
        using,
        lifecycle_queries.REAP_EXPIRED_LEASES,
        params,
        context=context,
        workflow=False,
        finished=_dead_workflow_steps,
        retry_when_short=False,
        plain_guard=False,
    )


def _reap_row_by_row(params: dict[str, object], using: str) -> tuple[list[tuple[object, ...]], int]:
    """The fallback after a failed batch: each row alone (its own one-statement transaction),
    culprits pushed aside."""
    rows: list[tuple[object, ...]] = []
    deferred = 0
    ids = [
        row[0]
        for row in transition(
            using, lifecycle_queries.EXPIRED_LEASE_IDS, params, context="read expired leases"
        )
    ]
    for job_id in ids:
        try:
            rows += _reap(
                {**params, "only_job_id": job_id}, using, context="reap one expired lease"
            )
        except RunledgerError as error:
            if error.__cause__ is None or is_session_fatal(error.__cause__):
                raise
            transition(
                using,
                lifecycle_queries.DEFER_EXPIRED_LEASE,
                {"job_id": job_id, "retry_delay_ms": params["retry_delay_ms"]},
                context="defer an expired lease",
            )
            deferred += 1
            logger.warning(
                "could not reap an expired job lease job_id=%s error_code=%s "
                "error_sqlstate=%s error_constraint=%s",
                job_id,
                error.code,
                error.sqlstate or "none",
                error.constraint or "none",
                extra={"runledger": {"job_id": str(job_id), **error.log_fields()}},
            )
    return rows, deferred

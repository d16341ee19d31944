"""Per-job-type queue metrics over explicit scopes: what operators alert on once jobs run."""

from __future__ import annotations

from ..db import operations_queries
from ..domain import JobMetrics, ReadScope
from ._scope import ScopeKind, metrics_rows

DEFAULT_USING = "default"

_STATEMENTS: dict[ScopeKind, str] = {
    "organization": operations_queries.JOB_METRICS_ORG,
    "global": operations_queries.JOB_METRICS_GLOBAL,
    "admin": operations_queries.JOB_METRICS_ADMIN,
}


def job_metrics(
    *,
    scope: ReadScope,
    job_type: str | None = None,
    limit: int = 100,
    offset: int = 0,
    using: str = DEFAULT_USING,
) -> list[JobMetrics]:
    """Return one row per job type, ordered by job type.

    Due and scheduled PENDING jobs, LEASED jobs (expired leases counted in both leased and
    expired), attempts that succeeded, were retried or were dead-lettered in the last 24 hours,
    and the ``next_run_at`` of the oldest due job. A type with no row in any of those
    populations is not listed; ``paused`` is read from the type's definition. ``job_type`` is an exact
    match. Every population is read from an index, so the cost follows the live queue and one
    day of attempts, not the size of the history.

    Transaction: one read statement (autocommit, or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_pagination``; ``job.invalid_argument`` (a bad scope or
            job type).
    """
    rows = metrics_rows(
        _STATEMENTS,
        scope=scope,
        job_type=job_type,
        limit=limit,
        offset=offset,
        using=using,
        context="read job metrics",
    )
    return [
        JobMetrics(
            job_type=row[0],
            due_count=int(row[1]),
            scheduled_count=int(row[2]),
            leased_count=int(row[3]),
            expired_lease_count=int(row[4]),
            succeeded_24h=int(row[5]),
            retried_24h=int(row[6]),
            dead_lettered_24h=int(row[7]),
            oldest_due_at=row[8],
            paused=bool(row[9]),
        )
        for row in rows
    ]

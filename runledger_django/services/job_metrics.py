"""Per-job-type queue metrics over explicit scopes: what operators alert on once jobs run."""

from __future__ import annotations

import uuid

from django.db import connections

from ..db import job_operations_queries as queries
from ..db.transaction import execute
from ..domain import JobMetrics, ReadScope
from ..errors import Code, RunledgerError
from ..validation import validate_page, validate_search_text

DEFAULT_USING = "default"


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
    populations is not listed. There is no join to job definitions. ``job_type`` is an exact
    match. Every population is read from an index, so the cost follows the live queue and one
    day of attempts, not the size of the history.

    Transaction: one read statement (autocommit, or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_pagination``; ``job.invalid_argument`` (a bad scope or
            job type).
    """
    page = validate_page(limit, offset)
    exact_type = validate_search_text(job_type, "job_type")
    sql = _metrics_sql(scope)
    params = {
        "organization_id": scope.organization_id,
        "job_type": exact_type,
        "limit": page.limit,
        "offset": page.offset,
    }
    with connections[using].cursor() as cursor:
        rows = execute(cursor, sql, params, context="read job metrics").fetchall()
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
        )
        for row in rows
    ]


def _metrics_sql(scope: object) -> str:
    """The statement for ``scope``. Fails closed: a hand-built scope with an unknown kind, or an
    organization scope without a tenant, is refused rather than read as admin."""
    if isinstance(scope, ReadScope):
        if scope.kind == "organization" and isinstance(scope.organization_id, uuid.UUID):
            return queries.JOB_METRICS_ORG
        if scope.kind == "global" and scope.organization_id is None:
            return queries.JOB_METRICS_GLOBAL
        if scope.kind == "admin" and scope.organization_id is None:
            return queries.JOB_METRICS_ADMIN
    raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "scope must be a valid ReadScope")

"""Per-job-type intent metrics over explicit scopes (reference 4.3)."""

from __future__ import annotations

import uuid

from django.db import connections

from ..db import queries
from ..db.transaction import execute
from ..domain import IntentMetrics, ReadScope
from ..errors import Code, RunledgerError
from ..validation import validate_page, validate_search_text

DEFAULT_USING = "default"


def intent_metrics(
    *,
    scope: ReadScope,
    job_type: str | None = None,
    limit: int = 100,
    offset: int = 0,
    using: str = DEFAULT_USING,
) -> list[IntentMetrics]:
    """Return one row per job type, ordered by job type.

    Pending rows count whatever their age; conflicted and promoted rows only within the last
    24 hours, so a type whose rows are all older terminal history disappears. There is no join
    to job definitions: intents for a missing definition stay visible. ``job_type`` is an exact
    match.

    Raises:
        RunledgerError: ``job.invalid_pagination``; ``job.invalid_argument``.
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
        rows = execute(cursor, sql, params, context="read job enqueue intent metrics").fetchall()
    return [
        IntentMetrics(
            job_type=row[0],
            pending_count=int(row[1]),
            retrying_count=int(row[2]),
            max_promotion_attempts=int(row[3] or 0),
            conflicted_24h=int(row[4]),
            promoted_24h=int(row[5]),
            oldest_pending_at=row[6],
        )
        for row in rows
    ]


def _metrics_sql(scope: object) -> str:
    """The statement for ``scope``. Fails closed: a hand-built scope with an unknown kind, or an
    organization scope without a tenant, is refused rather than read as admin."""
    if isinstance(scope, ReadScope):
        if scope.kind == "organization" and isinstance(scope.organization_id, uuid.UUID):
            return queries.INTENT_METRICS_ORG
        if scope.kind == "global" and scope.organization_id is None:
            return queries.INTENT_METRICS_GLOBAL
        if scope.kind == "admin" and scope.organization_id is None:
            return queries.INTENT_METRICS_ADMIN
    raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "scope must be a valid ReadScope")

"""Per-job-type intent metrics over explicit scopes (reference 4.3)."""

from __future__ import annotations

from ..db import intent_queries
from ..domain import IntentMetrics, ReadScope
from ._scope import ScopeKind, metrics_rows

DEFAULT_USING = "default"

_STATEMENTS: dict[ScopeKind, str] = {
    "organization": intent_queries.INTENT_METRICS_ORG,
    "global": intent_queries.INTENT_METRICS_GLOBAL,
    "admin": intent_queries.INTENT_METRICS_ADMIN,
}


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
    rows = metrics_rows(
        _STATEMENTS,
        scope=scope,
        job_type=job_type,
        limit=limit,
        offset=offset,
        using=using,
        context="read job enqueue intent metrics",
    )
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

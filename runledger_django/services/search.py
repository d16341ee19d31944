"""Finding intents and jobs by an exact idempotency key alone, as the admin's search does."""

from __future__ import annotations

import uuid

from django.db import connections

from ..db import intent_queries, operations_queries
from ..db.transaction import execute
from ..validation import IDEMPOTENCY_KEY_MAX_BYTES, is_blank, storable_text, utf8_length

DEFAULT_USING = "default"
KEY_SEARCH_LIMIT = 1000
"""Most rows one search returns: a key repeats at most once per job type and scope."""


def intent_ids_by_key(
    key: str, *, limit: int = KEY_SEARCH_LIMIT, using: str = DEFAULT_USING
) -> list[uuid.UUID]:
    """The ids of the intents recorded under ``key``, in any job type and scope.

    Index-backed on every supported server, whatever the number of job types and tenants. A
    key no intent can hold (blank, too long, not storable text) finds nothing.

    Transaction: one read statement (autocommit, or the caller's atomic block).
    """
    return _ids(intent_queries.INTENT_IDS_BY_KEY, key, limit, using, "search intents by key")


def job_ids_by_key(
    key: str, *, limit: int = KEY_SEARCH_LIMIT, using: str = DEFAULT_USING
) -> list[uuid.UUID]:
    """The ids of the keyed jobs enqueued under ``key``, in any job type and tenant.

    Transaction: one read statement (autocommit, or the caller's atomic block).
    """
    return _ids(operations_queries.JOB_IDS_BY_KEY, key, limit, using, "search jobs by key")


def _ids(sql: str, key: str, limit: int, using: str, context: str) -> list[uuid.UUID]:
    if (
        not isinstance(key, str)
        or is_blank(key)
        or not storable_text(key)
        or utf8_length(key) > IDEMPOTENCY_KEY_MAX_BYTES
    ):
        return []
    with connections[using].cursor() as cursor:
        rows = execute(cursor, sql, {"key": key, "limit": limit}, context=context).fetchall()
    return [row[0] for row in rows]

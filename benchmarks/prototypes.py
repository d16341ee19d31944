"""Proposed library changes, prototyped here so the benchmark can prove their gain.

Nothing here is used unless a shape asks for it (``--prototype``); each prototype patches one
query constant of ``runledger_django.db.queries`` for the current process and says what it
changes. If the library's text moved on and a prototype no longer applies, it reports that
instead of measuring something else.
"""

from __future__ import annotations

from runledger_django.db import queries

_RETURNING = "    RETURNING id, run_number, stage, job_type\n"
_RETURNING_KEYS = (
    "    RETURNING id, run_number, stage, job_type, organization_id, idempotency_key\n"
)
_INSERTED = "    SELECT * FROM inserted_org UNION ALL SELECT * FROM inserted_global\n"
_INSERTED_NARROW = (
    "    SELECT id, run_number, stage, job_type FROM inserted_org\n"
    "    UNION ALL SELECT id, run_number, stage, job_type FROM inserted_global\n"
)
_PROMOTED_HEAD = "promoted AS (\n    UPDATE runledger_job_enqueue_intents intent\n"
_PROMOTED_JOIN = (
    "    FROM candidate c JOIN inserted ON inserted.id = c.job_id\n"
    "    WHERE intent.id = c.intent_id AND intent.status = 'PENDING'\n"
    "    RETURNING intent.id\n)"
)
_FINAL_PROMOTED = "ARRAY(SELECT id FROM promoted)"
_CANDIDATE_JOIN = "    JOIN runledger_job_enqueue_intents intent ON intent.id = batch.intent_id\n"
# OFFSET 0 keeps the subquery from being flattened: one primary-key probe per batch row.
_CANDIDATE_PROBE = (
    "    CROSS JOIN LATERAL (\n"
    "        SELECT * FROM runledger_job_enqueue_intents probe\n"
    "        WHERE probe.id = batch.intent_id OFFSET 0\n"
    "    ) AS intent\n"
)


def _promoted_by_key(name: str, source: str, scope: str) -> str:
    return f"""{name} AS (
    UPDATE runledger_job_enqueue_intents intent
    SET status = 'PROMOTED',
        promotion_attempts = intent.promotion_attempts + 1,
        last_attempted_at = now(),
        promoted_job_id = i.id,
        promoted_at = now(),
        conflicted_at = NULL,
        last_error_code = NULL,
        last_error_message = NULL
    FROM {source} i
    WHERE intent.job_type = i.job_type AND intent.idempotency_key = i.idempotency_key
      AND {scope} AND intent.status = 'PENDING'
    RETURNING intent.id
)"""


def keyed_fast_path(original: str) -> str | None:
    """The fast path with the promoted UPDATE found through the intents' unique keys.

    In the original, ``promoted`` joins ``candidate`` to ``inserted`` on the job id. Both are
    CTEs the planner estimates at one row (the jsonb snapshot filter), so it picks a nested
    loop that rescans ``inserted`` once per candidate: 1,000 x 1,000 comparisons, about 0.8 s
    per 1,000-row batch. Here each scope's UPDATE is driven by its INSERT's RETURNING rows and
    reaches the intent through the scope's partial unique index (job_type,
    [organization_id,] idempotency_key): one index probe per row, whatever the estimates.

    Likewise ``candidate`` joined the batch to the intents on the primary key, and with stale
    statistics (a burst of new intents: the table looks all-PENDING) the planner merge-joins
    by scanning the primary key from its start, re-reading every intent promoted earlier in
    the drain. A LATERAL probe (not flattened) reads exactly the batch's rows.
    """
    needed = [
        _RETURNING,
        _INSERTED,
        _PROMOTED_HEAD,
        _PROMOTED_JOIN,
        _FINAL_PROMOTED,
        _CANDIDATE_JOIN,
    ]
    if not all(part in original for part in needed) or original.count(_RETURNING) != 2:
        return None
    text = original.replace(_RETURNING, _RETURNING_KEYS).replace(_INSERTED, _INSERTED_NARROW)
    text = text.replace(_CANDIDATE_JOIN, _CANDIDATE_PROBE)
    start = text.index(_PROMOTED_HEAD)
    end = text.index(_PROMOTED_JOIN) + len(_PROMOTED_JOIN)
    promoted = (
        _promoted_by_key(
            "promoted_org", "inserted_org", "intent.organization_id = i.organization_id"
        )
        + ",\n"
        + _promoted_by_key("promoted_global", "inserted_global", "intent.organization_id IS NULL")
    )
    text = text[:start] + promoted + text[end:]
    return text.replace(
        _FINAL_PROMOTED,
        "ARRAY(SELECT id FROM promoted_org UNION ALL SELECT id FROM promoted_global)",
    )


def apply_keyed_fast_path() -> bool:
    """Patch the fast path in this process; False when the library's text no longer fits."""
    patched = keyed_fast_path(queries.PROMOTE_BATCH_FAST_PATH)
    if patched is None:
        return False
    queries.PROMOTE_BATCH_FAST_PATH = patched  # type: ignore[misc]
    return True


# The pending-metrics index with organization_id carried along: the GLOBAL scope's pending
# counts then come from an index-only scan of the pending rows instead of a BitmapAnd of the
# pending index with the whole global unique index (every global intent ever recorded).
PENDING_METRICS_WITH_ORGANIZATION = [
    "DROP INDEX idx_job_enqueue_intents_pending_metrics",
    "CREATE INDEX idx_job_enqueue_intents_pending_metrics ON runledger_job_enqueue_intents "
    "(job_type, created_at) INCLUDE (promotion_attempts, organization_id) "
    "WHERE status = 'PENDING'",
    "VACUUM (ANALYZE) runledger_job_enqueue_intents",
]

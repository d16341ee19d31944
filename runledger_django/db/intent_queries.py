"""The raw SQL of intents: recording one, reading intents (the scoped columns, the metrics)
and the admin's search by idempotency key.

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. Scope variants (organization vs global) are separate texts so
PostgreSQL can infer the matching partial unique index and keep generic plans indexable.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- intent recording (INSERT ... ON CONFLICT ... WHERE, FOR KEY SHARE) ---------------------

# The insert is runledger_record_intent_v2 (migration 0013; version 1 is migration 0008's):
# INSERT ... ON CONFLICT DO NOTHING with the arbiter of the intent's scope, which blocks behind
# an uncommitted recorder of the same key; a PL/pgSQL function, so the session plans it once
# instead of on every call. It answers a bitmask: 1 the row went in (the id is made by the
# caller), 2 the job type has no definition (asked only with check_definition, by the Tasks
# backend; a plain index probe that never waits). The isolation check is in the function to
# save a round trip: under a stricter level nothing is written, it answers 0, and the caller
# runs SHOW transaction_isolation to report it. CAST(... AS integer), not ::integer: Django
# binds client-side, and "-2147483648::integer" parses as -(2147483648::integer), which
# overflows for the smallest priority.
RECORD_INTENT: Final[LiteralString] = """SELECT runledger_record_intent_v2(
%(id)s, %(job_type)s, %(organization_id)s::uuid, %(payload)s::jsonb,
CAST(%(priority)s AS integer), CAST(%(max_attempts)s AS integer),
CAST(%(timeout_seconds)s AS integer), %(next_run_at)s::timestamptz, %(idempotency_key)s,
%(stage)s, %(snapshot)s::jsonb, %(execution_resource_key)s, %(trace_context)s::jsonb,
%(check_definition)s::boolean)"""

RECORDED_INSERTED: Final = 1
"""RECORD_INTENT's bit: the intent was inserted."""
RECORDED_DEFINITION_MISSING: Final = 2
"""RECORD_INTENT's bit: the job type has no definition (only when asked)."""

_FIND_EXISTING_INTENT: Final[LiteralString] = """
SELECT id, status, promoted_job_id, enqueue_request = %(snapshot)s::jsonb AS same_request
FROM runledger_job_enqueue_intents
WHERE job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s AND
"""

# FOR KEY SHARE protects the row from deletion until the caller commits, yet stays compatible
# with the promoter's FOR NO KEY UPDATE claim and its non-key UPDATE (reference 4.2).
FIND_EXISTING_INTENT_ORG: Final[LiteralString] = (
    _FIND_EXISTING_INTENT + " organization_id = %(organization_id)s LIMIT 1 FOR KEY SHARE"
)
FIND_EXISTING_INTENT_GLOBAL: Final[LiteralString] = (
    _FIND_EXISTING_INTENT + " organization_id IS NULL LIMIT 1 FOR KEY SHARE"
)

# --- reads (static scope texts so prepared/generic plans stay index-backed) ------------------

_INTENT_COLUMNS: Final[LiteralString] = """
id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds, next_run_at,
idempotency_key, stage, enqueue_request_version, enqueue_request, execution_resource_key,
promotion_attempts, next_promotion_at, last_attempted_at, status, promoted_job_id, promoted_at,
conflicted_at, last_error_code, last_error_message, created_at, updated_at
"""

# The metrics: three independently filtered aggregates, each served by its own partial index,
# folded per job type. The scope predicate differs per scope (see METRICS_SCOPE_*).
_METRICS: Final[LiteralString] = """
WITH populations AS (
    SELECT job_type,
           count(*) AS pending_count,
           count(*) FILTER (WHERE promotion_attempts > 0) AS retrying_count,
           max(promotion_attempts) AS max_promotion_attempts,
           0::bigint AS conflicted_24h,
           0::bigint AS promoted_24h,
           min(created_at) AS oldest_pending_at
    FROM runledger_job_enqueue_intents
    WHERE status = 'PENDING' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, 0, count(*), 0, NULL
    FROM runledger_job_enqueue_intents
    WHERE status = 'CONFLICTED' AND conflicted_at >= now() - interval '24 hours' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, 0, 0, count(*), NULL
    FROM runledger_job_enqueue_intents
    WHERE status = 'PROMOTED' AND promoted_at >= now() - interval '24 hours' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
)
SELECT job_type,
       max(pending_count) AS pending_count,
       max(retrying_count) AS retrying_count,
       max(max_promotion_attempts) AS max_promotion_attempts,
       max(conflicted_24h) AS conflicted_24h,
       max(promoted_24h) AS promoted_24h,
       min(oldest_pending_at) AS oldest_pending_at
FROM populations
GROUP BY job_type
ORDER BY job_type
LIMIT %(limit)s OFFSET %(offset)s
"""

INTENT_METRICS_ORG: Final[LiteralString] = _METRICS.replace(
    "{scope}", "organization_id = %(organization_id)s"
)
INTENT_METRICS_GLOBAL: Final[LiteralString] = _METRICS.replace("{scope}", "organization_id IS NULL")
INTENT_METRICS_ADMIN: Final[LiteralString] = _METRICS.replace("{scope}", "true")

# --- search ------------------------------------------------------------------------------

INTENT_SELECT_COLUMNS: Final[LiteralString] = _INTENT_COLUMNS

# Intents by an exact idempotency key alone, whatever their job type and scope (the admin's
# search): through idx_job_enqueue_intents_idempotency_key_prefix, the key's first 64
# characters, then the whole key. The unique indexes cannot serve it: they lead with the job
# type, which only PostgreSQL 18 can skip. No ORDER BY: the ids are few, and an order would
# invite a walk of another index.
INTENT_IDS_BY_KEY: Final[LiteralString] = """
SELECT id FROM runledger_job_enqueue_intents
WHERE left(idempotency_key, 64) = left(%(key)s, 64) AND idempotency_key = %(key)s
LIMIT %(limit)s
"""

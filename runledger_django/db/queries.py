"""Every raw SQL statement of runledger_django outside migrations, one named constant each.

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. Scope variants (organization vs global) are separate texts so
PostgreSQL can infer the matching partial unique index and keep generic plans indexable.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- transaction settings (set_config / SHOW have no ORM form) ------------------------------

# The isolation level the current transaction runs at.
SHOW_TRANSACTION_ISOLATION: Final[LiteralString] = "SHOW transaction_isolation"

SET_READ_COMMITTED: Final[LiteralString] = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

# Cap a timeout GUC (lock_timeout / statement_timeout) for this transaction, keeping a stricter
# caller value; returns the previous text for an exact restore (reference 6.1). The MATERIALIZED
# CTE reads the old value before set_config changes it.
CAP_TIMEOUT: Final[LiteralString] = """
WITH previous AS MATERIALIZED (
    -- Timeout settings display with units ("5s", "250ms", "0"); as an interval they give the
    -- milliseconds without a pg_settings scan.
    SELECT current_setting(%(name)s) AS text_value,
           (extract(epoch FROM current_setting(%(name)s)::interval) * 1000)::bigint AS ms
)
SELECT previous.text_value,
       set_config(
           %(name)s,
           CASE WHEN previous.ms = 0 OR previous.ms > %(cap_ms)s
                THEN %(cap_text)s ELSE previous.text_value END,
           true
       )
FROM previous
"""

# Cap transaction_timeout (PostgreSQL 17+). Lowering the GUC does not shorten a deadline that
# is already armed, so a looser previous value is first disarmed (set to 0) and the cap then
# re-arms a fresh deadline from now. One statement: no cancellation point while disarmed.
CAP_TRANSACTION_TIMEOUT: Final[LiteralString] = """
WITH previous AS MATERIALIZED (
    SELECT current_setting('transaction_timeout') AS text_value,
           (extract(epoch FROM current_setting('transaction_timeout')::interval) * 1000)::bigint
               AS ms
),
disarmed AS MATERIALIZED (
    SELECT CASE WHEN previous.ms > %(cap_ms)s
                THEN set_config('transaction_timeout', '0', true) END AS ignored
    FROM previous
)
SELECT previous.text_value,
       set_config(
           'transaction_timeout',
           CASE WHEN previous.ms = 0 OR previous.ms > %(cap_ms)s
                THEN %(cap_text)s ELSE previous.text_value END,
           true
       )
FROM previous, disarmed
"""

# Put a GUC back to the exact text it had (transaction-local).
RESTORE_SETTING: Final[LiteralString] = "SELECT set_config(%(name)s, %(value)s, true)"

# Set statement_timeout for the rest of the transaction (client-side promotion budget).
SET_LOCAL_STATEMENT_TIMEOUT: Final[LiteralString] = (
    "SELECT set_config('statement_timeout', %(value)s, true)"
)

# The retention fence (reference 2.6): promotion takes the shared side, exact-ID retention the
# exclusive side. The comment tags let operators and tests find waiters in pg_stat_activity.
LOCK_PROMOTION_FENCE: Final[LiteralString] = (
    "SELECT /* runledger:lock_job_enqueue_intent_promotion */ "
    "pg_advisory_xact_lock_shared(1920298604, 1768846437)"
)
LOCK_RETENTION_FENCE: Final[LiteralString] = (
    "SELECT /* runledger:lock_job_enqueue_intent_retention */ "
    "pg_advisory_xact_lock(1920298604, 1768846437)"
)

# --- enqueue (INSERT ... SELECT ... FOR SHARE with a partial-index arbiter) ------------------

_ENQUEUE_INSERT_HEAD: Final[LiteralString] = """
WITH definition AS (
    SELECT default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type = %(job_type)s AND is_enabled = true
      AND (NOT %(require_read_committed)s
           OR current_setting('transaction_isolation') IN ('read committed', 'read uncommitted'))
    FOR SHARE
),
inserted AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key
    )
    SELECT %(id)s, %(job_type)s, %(organization_id)s, %(payload)s::jsonb,
           COALESCE(CAST(%(priority)s AS integer), definition.default_priority),
           COALESCE(CAST(%(max_attempts)s AS integer), definition.max_attempts),
           COALESCE(CAST(%(timeout_seconds)s AS integer), definition.default_timeout_seconds),
           COALESCE(CAST(%(next_run_at)s AS timestamptz), now()),
           %(idempotency_key)s, %(stage)s, %(snapshot)s::jsonb, %(execution_resource_key)s
    FROM definition
"""

_ENQUEUE_INSERT_TAIL: Final[LiteralString] = """
    RETURNING id, status, run_number, stage, job_type
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
)
SELECT id, status, run_number FROM inserted
"""

# Unkeyed: always a new row (no arbiter); the ENQUEUED event is written in the same statement.
ENQUEUE_INSERT_UNKEYED: Final[LiteralString] = _ENQUEUE_INSERT_HEAD + _ENQUEUE_INSERT_TAIL

# Keyed, organization scope: the arbiter predicate matches uq_job_queue_type_idempotency_org.
ENQUEUE_INSERT_KEYED_ORG: Final[LiteralString] = (
    _ENQUEUE_INSERT_HEAD
    + """
    ON CONFLICT (job_type, organization_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL DO NOTHING
"""
    + _ENQUEUE_INSERT_TAIL
)

# Keyed, global scope: the arbiter predicate matches uq_job_queue_type_idempotency_global.
ENQUEUE_INSERT_KEYED_GLOBAL: Final[LiteralString] = (
    _ENQUEUE_INSERT_HEAD
    + """
    ON CONFLICT (job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NULL DO NOTHING
"""
    + _ENQUEUE_INSERT_TAIL
)

_FIND_EXISTING_JOB: Final[LiteralString] = """
SELECT id, status, run_number, enqueue_request = %(snapshot)s::jsonb AS same_request,
       enqueue_request IS NULL AS legacy
FROM runledger_job_queue
WHERE job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s AND
"""

# The existing keyed job, locked FOR NO KEY UPDATE ("mutation-ready"); snapshot equality is
# decided by jsonb = in PostgreSQL. Separate scope texts keep the partial unique index usable.
FIND_EXISTING_JOB_ORG: Final[LiteralString] = (
    _FIND_EXISTING_JOB + " organization_id = %(organization_id)s LIMIT 1 FOR NO KEY UPDATE"
)
FIND_EXISTING_JOB_GLOBAL: Final[LiteralString] = (
    _FIND_EXISTING_JOB + " organization_id IS NULL LIMIT 1 FOR NO KEY UPDATE"
)

DEFINITION_IS_ENABLED: Final[LiteralString] = """
SELECT EXISTS (
    SELECT 1 FROM runledger_job_definitions WHERE job_type = %(job_type)s AND is_enabled = true
)
"""

# --- intent recording (INSERT ... ON CONFLICT ... WHERE, FOR KEY SHARE) ---------------------

_RECORD_INTENT_HEAD: Final[LiteralString] = """
INSERT INTO runledger_job_enqueue_intents (
    id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
    next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
    execution_resource_key
)
-- CAST(... AS integer), not ::integer: Django binds client-side, and "-2147483648::integer"
-- parses as -(2147483648::integer), which overflows for the smallest priority.
SELECT %(id)s, %(job_type)s, %(organization_id)s, %(payload)s::jsonb,
       CAST(%(priority)s AS integer), CAST(%(max_attempts)s AS integer),
       CAST(%(timeout_seconds)s AS integer), %(next_run_at)s::timestamptz,
       %(idempotency_key)s, %(stage)s, 1, %(snapshot)s::jsonb, %(execution_resource_key)s
-- Folding the isolation check into the insert saves a round trip; when it fails nothing is
-- written and the caller runs SHOW transaction_isolation to report it.
WHERE current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
"""

# Organization scope; blocks behind an uncommitted recorder of the same key, then DO NOTHING.
RECORD_INTENT_ORG: Final[LiteralString] = (
    _RECORD_INTENT_HEAD
    + """ON CONFLICT (job_type, organization_id, idempotency_key)
    WHERE organization_id IS NOT NULL DO NOTHING
RETURNING id"""
)

# Global scope (organization_id is NULL).
RECORD_INTENT_GLOBAL: Final[LiteralString] = (
    _RECORD_INTENT_HEAD
    + """ON CONFLICT (job_type, idempotency_key) WHERE organization_id IS NULL DO NOTHING
RETURNING id"""
)

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

# --- promotion ---------------------------------------------------------------------------

# The idle fast path: one non-locking EXISTS outside any transaction and without the fence.
PROMOTION_HAS_ELIGIBLE: Final[LiteralString] = """
SELECT EXISTS (
    SELECT 1
    FROM runledger_job_enqueue_intents intent
    JOIN runledger_job_definitions definition
      ON definition.job_type = intent.job_type AND definition.is_enabled = true
    WHERE intent.status = 'PENDING'
      AND intent.enqueue_request_version = 1
      AND intent.next_promotion_at <= now()
      AND intent.job_type = ANY(%(job_types)s::text[])
)
"""

# The claim: FOR NO KEY UPDATE OF intent SKIP LOCKED locks only intent rows, so concurrent
# promoters split the backlog and definitions stay shareable. Only v1 snapshots are selected.
PROMOTION_CLAIM: Final[LiteralString] = """
SELECT intent.id
FROM runledger_job_enqueue_intents intent
JOIN runledger_job_definitions definition
  ON definition.job_type = intent.job_type AND definition.is_enabled = true
WHERE intent.status = 'PENDING'
  AND intent.enqueue_request_version = 1
  AND intent.next_promotion_at <= now()
  AND intent.job_type = ANY(%(job_types)s::text[])
ORDER BY intent.next_promotion_at, intent.created_at, intent.id
LIMIT %(limit)s
FOR NO KEY UPDATE OF intent SKIP LOCKED
"""

# The claimed rows the set-based statement did not promote, for the per-row path to decode.
PROMOTION_FALLBACK_ROWS: Final[LiteralString] = """
SELECT id, job_type, organization_id, payload::text AS payload, priority, max_attempts,
       timeout_seconds, next_run_at, idempotency_key, stage, execution_resource_key,
       enqueue_request::text AS enqueue_request
FROM runledger_job_enqueue_intents
WHERE id = ANY(%(ids)s::uuid[])
"""

# Snapshot drift check: the stored snapshot against the one recomputed from the columns.
INTENT_SNAPSHOT_MATCHES: Final[LiteralString] = """
SELECT enqueue_request = %(snapshot)s::jsonb FROM runledger_job_enqueue_intents WHERE id = %(id)s
"""

# Set-based fast path for a claimed batch: insert every job in one statement (the definition
# rows share-locked as in the single enqueue), write their ENQUEUED events, and mark the intents
# promoted. Rows whose key already exists insert nothing and go through the per-row path. Only
# intents whose stored snapshot equals the one rebuilt from their columns are eligible, so
# drifted rows also fall back to the per-row path, which defers them. Returns one row: how many
# jobs were inserted and which intents were promoted; the caller undoes the statement when the
# two disagree (an inserted job must never outlive an intent left PENDING). The tag leads the
# text because pg_stat_activity keeps only the first 1 kB, and the ids and snapshots Django
# binds client-side (inlined) push the INSERT past it.
PROMOTE_BATCH_FAST_PATH: Final[LiteralString] = """
/* runledger:promote_job_enqueue_intents_batch */
WITH candidate AS (
    SELECT intent.id AS intent_id, intent.job_type, intent.organization_id, intent.payload,
           intent.priority, intent.max_attempts, intent.timeout_seconds, intent.next_run_at,
           intent.idempotency_key, intent.stage, intent.enqueue_request,
           intent.execution_resource_key, runledger_uuidv7() AS job_id
    FROM unnest(%(intent_ids)s::uuid[]) AS batch(intent_id)
    -- One primary-key probe per batch row (OFFSET 0 keeps it a probe): a join would let the
    -- planner merge the batch against the whole table once statistics go stale mid-drain.
    CROSS JOIN LATERAL (
        SELECT * FROM runledger_job_enqueue_intents probe WHERE probe.id = batch.intent_id OFFSET 0
    ) AS intent
    WHERE intent.status = 'PENDING'
      AND intent.stage = ANY(%(stages)s::text[])
      -- The canonical request v1 rebuilt from the columns (validation.canonical_snapshot_json
      -- in SQL): a drifted row does not match and takes the per-row path, which defers it.
      AND intent.enqueue_request = jsonb_build_object(
              'payload', intent.payload,
              'priority', intent.priority,
              'max_attempts', intent.max_attempts,
              'timeout_seconds', intent.timeout_seconds,
              'next_run_at', to_char(intent.next_run_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
              'stage', intent.stage
          ) || CASE WHEN intent.execution_resource_key IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('execution_resource_key',
                                            intent.execution_resource_key) END
),
definition AS (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type IN (SELECT job_type FROM candidate) AND is_enabled = true
    ORDER BY job_type
    FOR SHARE
),
inserted_org AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key
    )
    SELECT c.job_id, c.job_type, c.organization_id, c.payload,
           COALESCE(c.priority, d.default_priority), COALESCE(c.max_attempts, d.max_attempts),
           COALESCE(c.timeout_seconds, d.default_timeout_seconds),
           COALESCE(c.next_run_at, now()), c.idempotency_key, c.stage, c.enqueue_request,
           c.execution_resource_key
    FROM candidate c JOIN definition d ON d.job_type = c.job_type
    WHERE c.organization_id IS NOT NULL
    ON CONFLICT (job_type, organization_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL DO NOTHING
    RETURNING id, run_number, stage, job_type, organization_id, idempotency_key
),
inserted_global AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key
    )
    SELECT c.job_id, c.job_type, NULL, c.payload,
           COALESCE(c.priority, d.default_priority), COALESCE(c.max_attempts, d.max_attempts),
           COALESCE(c.timeout_seconds, d.default_timeout_seconds),
           COALESCE(c.next_run_at, now()), c.idempotency_key, c.stage, c.enqueue_request,
           c.execution_resource_key
    FROM candidate c JOIN definition d ON d.job_type = c.job_type
    WHERE c.organization_id IS NULL
    ON CONFLICT (job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NULL DO NOTHING
    RETURNING id, run_number, stage, job_type, idempotency_key
),
inserted AS (
    SELECT id, run_number, stage, job_type FROM inserted_org
    UNION ALL
    SELECT id, run_number, stage, job_type FROM inserted_global
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
),
-- Each new job reaches its intent through the scope's unique key (the intent it was made
-- from, claimed above): an index probe per job, never a join between two CTEs whose sizes the
-- planner cannot estimate.
promoted_org AS (
    UPDATE runledger_job_enqueue_intents intent
    SET status = 'PROMOTED',
        promotion_attempts = intent.promotion_attempts + 1,
        last_attempted_at = now(),
        promoted_job_id = job.id,
        promoted_at = now(),
        conflicted_at = NULL,
        last_error_code = NULL,
        last_error_message = NULL
    FROM inserted_org job
    WHERE intent.job_type = job.job_type AND intent.organization_id = job.organization_id
      AND intent.idempotency_key = job.idempotency_key AND intent.status = 'PENDING'
    RETURNING intent.id
),
promoted_global AS (
    UPDATE runledger_job_enqueue_intents intent
    SET status = 'PROMOTED',
        promotion_attempts = intent.promotion_attempts + 1,
        last_attempted_at = now(),
        promoted_job_id = job.id,
        promoted_at = now(),
        conflicted_at = NULL,
        last_error_code = NULL,
        last_error_message = NULL
    FROM inserted_global job
    WHERE intent.job_type = job.job_type AND intent.organization_id IS NULL
      AND intent.idempotency_key = job.idempotency_key AND intent.status = 'PENDING'
    RETURNING intent.id
)
SELECT (SELECT count(*) FROM inserted) AS inserted_count,
       ARRAY(SELECT id FROM promoted_org UNION ALL SELECT id FROM promoted_global) AS promoted_ids
"""

# Lifecycle transitions; each must touch exactly one PENDING row.
MARK_PROMOTED: Final[LiteralString] = """
UPDATE runledger_job_enqueue_intents
SET status = 'PROMOTED',
    promotion_attempts = promotion_attempts + 1,
    last_attempted_at = now(),
    promoted_job_id = %(job_id)s,
    promoted_at = now(),
    conflicted_at = NULL,
    last_error_code = NULL,
    last_error_message = NULL
WHERE id = %(id)s AND status = 'PENDING'
"""

MARK_CONFLICTED: Final[LiteralString] = """
UPDATE runledger_job_enqueue_intents
SET status = 'CONFLICTED',
    promotion_attempts = promotion_attempts + 1,
    last_attempted_at = now(),
    promoted_job_id = NULL,
    promoted_at = NULL,
    conflicted_at = now(),
    last_error_code = %(code)s,
    last_error_message = %(message)s
WHERE id = %(id)s AND status = 'PENDING'
"""

# Jittered, capped exponential backoff computed from the *old* attempt count; now() is the
# transaction start, so next_promotion_at - last_attempted_at is exactly base + jitter.
MARK_RETRY_DEFERRED: Final[LiteralString] = """
UPDATE runledger_job_enqueue_intents
SET promotion_attempts = promotion_attempts + 1,
    last_attempted_at = now(),
    last_error_code = %(code)s,
    last_error_message = %(message)s,
    next_promotion_at = now()
        + LEAST(interval '4 minutes',
                interval '1 second' * power(2.0, LEAST(promotion_attempts, 9)::double precision))
        + random() * LEAST(interval '1 minute',
                interval '0.25 seconds' * power(2.0, LEAST(promotion_attempts, 9)::double precision))
WHERE id = %(id)s AND status = 'PENDING'
"""

# --- retention -----------------------------------------------------------------------------

# Cutoff cleanup: one bounded autocommit statement; SKIP LOCKED passes over rows that duplicate
# recorders hold FOR KEY SHARE.
DELETE_PROMOTED_BEFORE: Final[LiteralString] = """
DELETE FROM runledger_job_enqueue_intents
WHERE id IN (
    SELECT id FROM runledger_job_enqueue_intents
    WHERE status = 'PROMOTED' AND promoted_at < %(cutoff)s
    ORDER BY promoted_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""

COUNT_PROMOTED_BEFORE: Final[LiteralString] = """
SELECT count(*) FROM runledger_job_enqueue_intents
WHERE status = 'PROMOTED' AND promoted_at < %(cutoff)s
"""

# Exact-ID cleanup: intents first (the recorder's intent-before-job order) ...
DELETE_PROMOTED_FOR_JOBS: Final[LiteralString] = """
DELETE FROM runledger_job_enqueue_intents
WHERE status = 'PROMOTED' AND promoted_job_id = ANY(%(job_ids)s::uuid[])
"""

# ... then the jobs, locked in id order so concurrent retention transactions cannot deadlock.
LOCK_JOBS_IN_ID_ORDER: Final[LiteralString] = """
SELECT id FROM runledger_job_queue WHERE id = ANY(%(job_ids)s::uuid[]) ORDER BY id FOR UPDATE
"""

# --- reads of the scoped API ------------------------------------------------------------------

INTENT_SELECT_COLUMNS: Final[LiteralString] = _INTENT_COLUMNS

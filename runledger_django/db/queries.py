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

# A keyed job by its scope's partial unique index. The key is matched as a one-value range and
# the match ordered by it: with sorts disabled (a promotion pass pins that), the unique index is
# then the only index that yields the order, whatever the statistics say. Under stale statistics
# the planner otherwise costs every index scan as reading the whole index, and picks the
# smallest one that filters on the organization or the type: every job of the tenant, per row.
_JOB_BY_KEY_ORG: Final[LiteralString] = """
job.job_type = {job_type} AND job.organization_id = {organization_id}
  AND job.idempotency_key >= {key} AND job.idempotency_key <= {key}
ORDER BY job.idempotency_key LIMIT 1"""
_JOB_BY_KEY_GLOBAL: Final[LiteralString] = """
job.job_type = {job_type} AND job.organization_id IS NULL
  AND job.idempotency_key >= {key} AND job.idempotency_key <= {key}
ORDER BY job.idempotency_key LIMIT 1"""

_FIND_EXISTING_JOB: Final[LiteralString] = """
SELECT job.id, job.status, job.run_number,
       job.enqueue_request = %(snapshot)s::jsonb AS same_request,
       job.enqueue_request IS NULL AS legacy
FROM runledger_job_queue job
WHERE"""

# The existing keyed job, locked FOR NO KEY UPDATE ("mutation-ready"); snapshot equality is
# decided by jsonb = in PostgreSQL. Separate scope texts keep the partial unique index usable.
FIND_EXISTING_JOB_ORG: Final[LiteralString] = (
    _FIND_EXISTING_JOB
    + _JOB_BY_KEY_ORG.replace("{job_type}", "%(job_type)s")
    .replace("{organization_id}", "%(organization_id)s")
    .replace("{key}", "%(idempotency_key)s")
    + " FOR NO KEY UPDATE"
)
FIND_EXISTING_JOB_GLOBAL: Final[LiteralString] = (
    _FIND_EXISTING_JOB
    + _JOB_BY_KEY_GLOBAL.replace("{job_type}", "%(job_type)s").replace(
        "{key}", "%(idempotency_key)s"
    )
    + " FOR NO KEY UPDATE"
)

DEFINITION_IS_ENABLED: Final[LiteralString] = """
SELECT EXISTS (
    SELECT 1 FROM runledger_job_definitions WHERE job_type = %(job_type)s AND is_enabled = true
)
"""

# --- intent recording (INSERT ... ON CONFLICT ... WHERE, FOR KEY SHARE) ---------------------

# The insert is runledger_record_intent (migration 0008): INSERT ... ON CONFLICT DO NOTHING
# with the arbiter of the intent's scope, which blocks behind an uncommitted recorder of the
# same key; a PL/pgSQL function, so the session plans it once instead of on every call. It
# returns whether the row went in (the id is made by the caller). The isolation check is in
# the function to save a round trip: under a stricter level nothing is written, it returns
# false, and the caller runs SHOW transaction_isolation to report it. CAST(... AS integer),
# not ::integer: Django binds client-side, and "-2147483648::integer" parses as
# -(2147483648::integer), which overflows for the smallest priority.
RECORD_INTENT: Final[LiteralString] = """SELECT runledger_record_intent(
%(id)s, %(job_type)s, %(organization_id)s::uuid, %(payload)s::jsonb,
CAST(%(priority)s AS integer), CAST(%(max_attempts)s AS integer),
CAST(%(timeout_seconds)s AS integer), %(next_run_at)s::timestamptz, %(idempotency_key)s,
%(stage)s, %(snapshot)s::jsonb, %(execution_resource_key)s)"""

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
#
# A promotion pass owns its transaction and pins the planner for it (PROMOTION_PLANNER_SETTINGS):
# statistics go stale exactly when promotion matters (a burst after an outage lands in a table
# autovacuum has not analysed, or one that retention emptied), and a plan chosen from a stale
# row estimate turns a batch of 1,000 into a scan of the backlog per row. Every statement below
# is written so that, with sorts, sequential and bitmap scans, nested loops and merge joins
# disabled, its plan is linear in the batch: the claim walks idx_job_enqueue_intents_pending in
# claim order and stops at the limit; rows the pass holds are reached by ctid (a TID scan,
# stable because the pass holds their row lock); jobs by their unique key (an ordered probe,
# see _JOB_BY_KEY_ORG); statement-local sets are joined by hashing.

# The planner settings of a promotion transaction (reverted at its end). jit stays off: an OLTP
# statement gains nothing from compiling, and PostgreSQL 15 and 16 price a disabled plan node
# so high that every statement would compile. The benchmarks' plain-SQL limit runs under them.
_PLANNER_PINS: Final[LiteralString] = """
       set_config('enable_sort', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_nestloop', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)
"""
PROMOTION_PLANNER_SETTINGS: Final[LiteralString] = "SELECT" + _PLANNER_PINS

# The same settings inside a transaction someone else owns (retention): the previous values
# are read first (a MATERIALIZED CTE) and returned, for RESTORE_PLANNER to put back exactly.
PIN_PLANNER: Final[LiteralString] = (
    """
WITH previous AS MATERIALIZED (
    SELECT current_setting('enable_sort') AS enable_sort,
           current_setting('enable_seqscan') AS enable_seqscan,
           current_setting('enable_bitmapscan') AS enable_bitmapscan,
           current_setting('enable_nestloop') AS enable_nestloop,
           current_setting('enable_mergejoin') AS enable_mergejoin,
           current_setting('jit') AS jit
)
SELECT previous.*,"""
    + _PLANNER_PINS
    + "FROM previous"
)

RESTORE_PLANNER: Final[LiteralString] = """
SELECT set_config('enable_sort', %(enable_sort)s, true),
       set_config('enable_seqscan', %(enable_seqscan)s, true),
       set_config('enable_bitmapscan', %(enable_bitmapscan)s, true),
       set_config('enable_nestloop', %(enable_nestloop)s, true),
       set_config('enable_mergejoin', %(enable_mergejoin)s, true),
       set_config('jit', %(jit)s, true)
"""

# Pending v1 intents of the allow-list whose definition is enabled, in claim order. The enabled
# types are computed once (an InitPlan) rather than joined, so the walk has no join to reorder.
_ELIGIBLE: Final[LiteralString] = """
FROM runledger_job_enqueue_intents intent
WHERE intent.status = 'PENDING'
  AND intent.enqueue_request_version = 1
  AND intent.next_promotion_at <= now()
  AND intent.job_type = ANY(ARRAY(
      SELECT job_type FROM runledger_job_definitions
      WHERE job_type = ANY(%(job_types)s::text[]) AND is_enabled = true))
ORDER BY intent.next_promotion_at, intent.created_at, intent.id
"""

# The idle check: the head of the claim order, without locks and before the fence, so an idle
# pass never waits for retention.
PROMOTION_HAS_ELIGIBLE: Final[LiteralString] = "SELECT intent.id" + _ELIGIBLE + "LIMIT 1"

# The claim alone, for the rows' own paths after the set-based statement was undone.
# FOR NO KEY UPDATE OF intent SKIP LOCKED locks only intent rows, so concurrent promoters split
# the backlog and definitions stay shareable.
PROMOTION_CLAIM: Final[LiteralString] = (
    "SELECT intent.id, intent.ctid::text"
    + _ELIGIBLE
    + "LIMIT %(limit)s FOR NO KEY UPDATE OF intent SKIP LOCKED"
)

# The canonical request v1 rebuilt from a row's columns (validation.canonical_snapshot_json in
# SQL). A row whose stored snapshot differs has drifted: the set-based statements leave it to
# the per-row path, which compares the snapshot Python builds and conflicts the row.
_SNAPSHOT_V1: Final[LiteralString] = """jsonb_build_object(
        'payload', {row}.payload,
        'priority', {row}.priority,
        'max_attempts', {row}.max_attempts,
        'timeout_seconds', {row}.timeout_seconds,
        'next_run_at', to_char({row}.next_run_at AT TIME ZONE 'UTC',
                               'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'stage', {row}.stage
      ) || CASE WHEN {row}.execution_resource_key IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('execution_resource_key', {row}.execution_resource_key)
           END"""

# The lifecycle transitions' SET lists (reference 4.4), shared by the per-row and set-based
# statements; the target table is aliased "intent". The attempt count saturates one below the
# integer maximum (chk_job_enqueue_intents_values_in_range): a row at the bound, written by
# hand, is still promoted, conflicted or deferred instead of failing every pass.
_COUNT_ATTEMPT: Final[LiteralString] = "LEAST(intent.promotion_attempts, 2147483645) + 1"

_SET_PROMOTED: Final[LiteralString] = """
    SET status = 'PROMOTED',
        promotion_attempts = {count_attempt},
        last_attempted_at = now(),
        promoted_job_id = {job},
        promoted_at = now(),
        conflicted_at = NULL,
        last_error_code = NULL,
        last_error_message = NULL""".replace("{count_attempt}", _COUNT_ATTEMPT)

_SET_CONFLICTED: Final[LiteralString] = """
    SET status = 'CONFLICTED',
        promotion_attempts = {count_attempt},
        last_attempted_at = now(),
        promoted_job_id = NULL,
        promoted_at = NULL,
        conflicted_at = now(),
        last_error_code = {code},
        last_error_message = {message}""".replace("{count_attempt}", _COUNT_ATTEMPT)

_INSERT_JOBS: Final[LiteralString] = """
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key
    )
    SELECT c.job_id, c.job_type, c.organization_id, c.payload,
           COALESCE(c.priority, d.default_priority), COALESCE(c.max_attempts, d.max_attempts),
           COALESCE(c.timeout_seconds, d.default_timeout_seconds),
           COALESCE(c.next_run_at, now()), c.idempotency_key, c.stage, c.enqueue_request,
           c.execution_resource_key
    FROM candidate c JOIN definition d ON d.job_type = c.job_type"""

# The set-based pass, one statement: claim a batch, insert a job and its ENQUEUED event for
# every intact row whose key is new (the scope's arbiter decides, as in the single enqueue; the
# definition rows are share-locked first, in job_type order), and mark exactly the intents
# whose job went in as promoted. Rows whose key exists, drifted rows and rows whose definition
# went away are returned unresolved (ids and ctids, in claim order) for the pass to settle
# set-based or on the per-row path. The caller undoes the statement when fewer intents were
# marked than jobs inserted (an inserted job must never outlive an intent left PENDING). The
# tag leads the text because pg_stat_activity keeps only its first 1 kB.
_PROMOTE_BATCH: Final[LiteralString] = """
/* runledger:promote_job_enqueue_intents_batch */
WITH claimed AS MATERIALIZED (
    SELECT intent.ctid AS tid, intent.id, intent.job_type, intent.organization_id,
           intent.payload, intent.priority, intent.max_attempts, intent.timeout_seconds,
           intent.next_run_at, intent.idempotency_key, intent.stage, intent.enqueue_request,
           intent.execution_resource_key, intent.next_promotion_at, intent.created_at
    {eligible}
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF intent SKIP LOCKED
),
candidate AS MATERIALIZED (
    SELECT claimed.*, runledger_uuidv7() AS job_id
    FROM claimed
    WHERE claimed.stage = ANY(%(stages)s::text[])
      AND claimed.enqueue_request = {snapshot}
),
definition AS MATERIALIZED (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type = ANY(ARRAY(SELECT DISTINCT job_type FROM candidate)) AND is_enabled = true
    ORDER BY job_type
    FOR SHARE
),
inserted_org AS ({insert_jobs}
    WHERE c.organization_id IS NOT NULL
    ON CONFLICT (job_type, organization_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL DO NOTHING
    RETURNING id, run_number, stage, job_type
),
inserted_global AS ({insert_jobs}
    WHERE c.organization_id IS NULL
    ON CONFLICT (job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NULL DO NOTHING
    RETURNING id, run_number, stage, job_type
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
linked AS MATERIALIZED (
    SELECT candidate.tid, candidate.job_id
    FROM candidate JOIN inserted ON inserted.id = candidate.job_id
),
promoted AS (
    UPDATE runledger_job_enqueue_intents intent{set_promoted}
    FROM linked
    WHERE intent.ctid = ANY(ARRAY(SELECT tid FROM linked)) AND intent.ctid = linked.tid
    RETURNING intent.id
),
unresolved AS MATERIALIZED (
    SELECT claimed.id, claimed.tid, claimed.next_promotion_at, claimed.created_at
    FROM claimed LEFT JOIN linked ON linked.tid = claimed.tid
    WHERE linked.tid IS NULL
)
SELECT (SELECT count(*) FROM claimed) AS claimed,
       (SELECT count(*) FROM inserted) AS inserted,
       (SELECT count(*) FROM promoted) AS promoted,
       (SELECT array_agg(id ORDER BY next_promotion_at, created_at, id) FROM unresolved),
       (SELECT array_agg(tid::text ORDER BY next_promotion_at, created_at, id) FROM unresolved)
"""

PROMOTE_BATCH: Final[LiteralString] = (
    _PROMOTE_BATCH.replace("{eligible}", _ELIGIBLE)
    .replace("{snapshot}", _SNAPSHOT_V1.replace("{row}", "claimed"))
    .replace("{insert_jobs}", _INSERT_JOBS)
    .replace("{set_promoted}", _SET_PROMOTED.replace("{job}", "linked.job_id"))
)

# Set-based resolution of claimed rows whose key already has a job, for more of them than the
# per-row path takes in one pass: an identical request converges on the existing job, a
# different one (or a legacy job without a snapshot) conflicts, as the per-row path decides
# them. The rows are read by ctid with no other condition (a status condition would let the
# planner consider scanning a partial pending index instead); each job is found by its unique
# key and locked FOR NO KEY UPDATE like the single enqueue's lookup, SKIP LOCKED so a job
# another session holds is left to the per-row path, which waits for it within the 5 s lock
# budget. Drifted rows and rows without an existing job are left too. Returns the ids that
# converged, and the ids that conflicted with their codes (for the warning log).
_CONVERGE_BATCH: Final[LiteralString] = """
/* runledger:converge_job_enqueue_intents_batch */
WITH held AS MATERIALIZED (
    SELECT intent.ctid AS tid, intent.id, intent.job_type, intent.organization_id,
           intent.payload, intent.priority, intent.max_attempts, intent.timeout_seconds,
           intent.next_run_at, intent.idempotency_key, intent.stage, intent.enqueue_request,
           intent.execution_resource_key, intent.status
    FROM runledger_job_enqueue_intents intent
    WHERE intent.ctid = ANY(%(tids)s::tid[])
),
pending AS MATERIALIZED (
    SELECT held.* FROM held
    WHERE held.status = 'PENDING'
      AND held.stage = ANY(%(stages)s::text[])
      AND held.enqueue_request = {snapshot}
),
decided AS MATERIALIZED (
    SELECT p.tid, COALESCE(org_job.id, global_job.id) AS job_id,
           CASE WHEN COALESCE(org_job.enqueue_request, global_job.enqueue_request) IS NULL
                    THEN %(legacy_code)s
                WHEN COALESCE(org_job.enqueue_request, global_job.enqueue_request)
                    = p.enqueue_request THEN NULL
                ELSE %(conflict_code)s END AS code
    FROM pending p
    LEFT JOIN LATERAL (
        SELECT job.id, job.enqueue_request FROM runledger_job_queue job
        WHERE{org_job}
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS org_job ON true
    LEFT JOIN LATERAL (
        SELECT job.id, job.enqueue_request FROM runledger_job_queue job
        WHERE p.organization_id IS NULL AND{global_job}
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS global_job ON true
    WHERE COALESCE(org_job.id, global_job.id) IS NOT NULL
),
converged AS (
    UPDATE runledger_job_enqueue_intents intent{set_promoted}
    FROM decided
    WHERE intent.ctid = ANY(ARRAY(SELECT tid FROM decided WHERE code IS NULL))
      AND intent.ctid = decided.tid AND decided.code IS NULL
    RETURNING intent.id
),
conflicted AS (
    UPDATE runledger_job_enqueue_intents intent{set_conflicted}
    FROM decided
    WHERE intent.ctid = ANY(ARRAY(SELECT tid FROM decided WHERE code IS NOT NULL))
      AND intent.ctid = decided.tid AND decided.code IS NOT NULL
    RETURNING intent.id, intent.last_error_code
)
SELECT ARRAY(SELECT id FROM converged) AS converged,
       ARRAY(SELECT id FROM conflicted) AS conflicted,
       ARRAY(SELECT last_error_code FROM conflicted) AS codes
"""

CONVERGE_BATCH: Final[LiteralString] = (
    _CONVERGE_BATCH.replace("{snapshot}", _SNAPSHOT_V1.replace("{row}", "held"))
    .replace(
        "{org_job}",
        _JOB_BY_KEY_ORG.replace("{job_type}", "p.job_type")
        .replace("{organization_id}", "p.organization_id")
        .replace("{key}", "p.idempotency_key"),
    )
    .replace(
        "{global_job}",
        _JOB_BY_KEY_GLOBAL.replace("{job_type}", "p.job_type").replace(
            "{key}", "p.idempotency_key"
        ),
    )
    .replace("{set_promoted}", _SET_PROMOTED.replace("{job}", "decided.job_id"))
    .replace(
        "{set_conflicted}",
        _SET_CONFLICTED.replace("{code}", "decided.code").replace(
            "{message}",
            "CASE decided.code WHEN %(legacy_code)s THEN %(legacy_message)s"
            " ELSE %(conflict_message)s END",
        ),
    )
)

# The claimed rows the per-row path decodes, by ctid.
PROMOTION_FALLBACK_ROWS: Final[LiteralString] = """
SELECT id, ctid::text, job_type, organization_id, payload::text AS payload, priority,
       max_attempts, timeout_seconds, next_run_at, idempotency_key, stage,
       execution_resource_key, enqueue_request::text AS enqueue_request
FROM runledger_job_enqueue_intents
WHERE ctid = ANY(%(tids)s::tid[])
"""

# A claimed row by its ctid, its id as a guard.
_HELD_ROW: Final[LiteralString] = "{row}.ctid = %(tid)s::tid AND {row}.id = %(id)s"

# Snapshot drift check: the stored snapshot against the one recomputed from the columns.
INTENT_SNAPSHOT_MATCHES: Final[LiteralString] = """
SELECT intent.enqueue_request = %(snapshot)s::jsonb FROM runledger_job_enqueue_intents intent
WHERE {held}
""".replace("{held}", _HELD_ROW.replace("{row}", "intent"))

# Lifecycle transitions; each must touch exactly one PENDING row.
_ONE_PENDING: Final[LiteralString] = "\nWHERE {held} AND intent.status = 'PENDING'\n".replace(
    "{held}", _HELD_ROW.replace("{row}", "intent")
)

MARK_PROMOTED: Final[LiteralString] = (
    "UPDATE runledger_job_enqueue_intents intent"
    + _SET_PROMOTED.replace("{job}", "%(job_id)s")
    + _ONE_PENDING
)

MARK_CONFLICTED: Final[LiteralString] = (
    "UPDATE runledger_job_enqueue_intents intent"
    + _SET_CONFLICTED.replace("{code}", "%(code)s").replace("{message}", "%(message)s")
    + _ONE_PENDING
)

# Jittered, capped exponential backoff computed from the *old* attempt count; now() is the
# transaction start, so next_promotion_at - last_attempted_at is exactly base + jitter.
MARK_RETRY_DEFERRED: Final[LiteralString] = (
    """
UPDATE runledger_job_enqueue_intents intent
SET promotion_attempts = """
    + _COUNT_ATTEMPT
    + """,
    last_attempted_at = now(),
    last_error_code = %(code)s,
    last_error_message = %(message)s,
    next_promotion_at = now()
        + LEAST(interval '4 minutes',
                interval '1 second' * power(2.0, LEAST(promotion_attempts, 9)::double precision))
        + random() * LEAST(interval '1 minute',
                interval '0.25 seconds' * power(2.0, LEAST(promotion_attempts, 9)::double precision))"""
    + _ONE_PENDING
)

# --- retention -----------------------------------------------------------------------------
#
# Retention pins the planner like promotion does (PIN_PLANNER / RESTORE_PLANNER: it runs in
# the caller's transaction, whose settings it puts back), so a batch is found by key or by an
# ordered walk whatever the statistics say, and deleted by ctid (a TID scan).

# Cutoff cleanup: one bounded statement. The subquery walks
# idx_job_enqueue_intents_promoted_cleanup in (promoted_at, id) order, the order it keeps;
# SKIP LOCKED passes over rows that duplicate recorders hold FOR KEY SHARE.
DELETE_PROMOTED_BEFORE: Final[LiteralString] = """
DELETE FROM runledger_job_enqueue_intents
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM runledger_job_enqueue_intents
    WHERE status = 'PROMOTED' AND promoted_at < %(cutoff)s
    ORDER BY promoted_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
"""

COUNT_PROMOTED_BEFORE: Final[LiteralString] = """
SELECT count(*) FROM runledger_job_enqueue_intents
WHERE status = 'PROMOTED' AND promoted_at < %(cutoff)s
"""

# Exact-ID cleanup: intents first (the recorder's intent-before-job order), found through
# idx_job_enqueue_intents_promoted_job, the only index that holds promoted_job_id. The status
# check applies to the rows found (a MATERIALIZED CTE keeps it out of the scan, where it would
# let the planner read idx_job_enqueue_intents_promoted_cleanup, every promoted intent, instead).
# The DELETE waits for row locks (a duplicate recorder's FOR KEY SHARE) within the caller's
# lock_timeout.
DELETE_PROMOTED_FOR_JOBS: Final[LiteralString] = """
DELETE FROM runledger_job_enqueue_intents
WHERE ctid = ANY(ARRAY(
    WITH found AS MATERIALIZED (
        SELECT ctid, status FROM runledger_job_enqueue_intents
        WHERE promoted_job_id = ANY(%(job_ids)s::uuid[])
    )
    SELECT ctid FROM found WHERE status = 'PROMOTED'
))
"""

# ... then the jobs, locked in id order so concurrent retention transactions cannot deadlock.
LOCK_JOBS_IN_ID_ORDER: Final[LiteralString] = """
SELECT id FROM runledger_job_queue WHERE id = ANY(%(job_ids)s::uuid[]) ORDER BY id FOR UPDATE
"""

# --- reads of the scoped API ------------------------------------------------------------------

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

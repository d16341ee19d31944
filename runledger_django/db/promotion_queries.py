"""The raw SQL of a promotion pass: the eligibility check, the claim, the set-based promote and
converge statements, and the per-row path's reads and transitions (reference 4.4).

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. The planner pins a pass runs under are in ``session_queries``.
"""

from __future__ import annotations

from typing import Final, LiteralString

from .enqueue_queries import JOB_BY_KEY_GLOBAL, JOB_BY_KEY_ORG

# --- promotion ---------------------------------------------------------------------------
#
# A promotion pass owns its transaction and pins the planner for it (session_queries.PROMOTION_PLANNER_SETTINGS):
# statistics go stale exactly when promotion matters (a burst after an outage lands in a table
# autovacuum has not analysed, or one that retention emptied), and a plan chosen from a stale
# row estimate turns a batch of 1,000 into a scan of the backlog per row. Every statement below
# is written so that, with sorts, sequential and bitmap scans, nested loops and merge joins
# disabled, its plan is linear in the batch: the claim walks idx_job_enqueue_intents_pending in
# claim order and stops at the limit; rows the pass holds are reached by ctid (a TID scan,
# stable because the pass holds their row lock); jobs by their unique key (an ordered probe,
# see enqueue_queries.JOB_BY_KEY_ORG); statement-local sets are joined by hashing.

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
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key,
        trace_context
    )
    SELECT c.job_id, c.job_type, c.organization_id, c.payload,
           COALESCE(c.priority, d.default_priority), COALESCE(c.max_attempts, d.max_attempts),
           COALESCE(c.timeout_seconds, d.default_timeout_seconds),
           COALESCE(c.next_run_at, now()), c.idempotency_key, c.stage, c.enqueue_request,
           c.execution_resource_key, c.trace_context
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
           intent.execution_resource_key, intent.next_promotion_at, intent.created_at,
           intent.trace_context
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
        JOB_BY_KEY_ORG.replace("{job_type}", "p.job_type")
        .replace("{organization_id}", "p.organization_id")
        .replace("{key}", "p.idempotency_key"),
    )
    .replace(
        "{global_job}",
        JOB_BY_KEY_GLOBAL.replace("{job_type}", "p.job_type").replace("{key}", "p.idempotency_key"),
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
       execution_resource_key, enqueue_request::text AS enqueue_request,
       trace_context::text AS trace_context
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

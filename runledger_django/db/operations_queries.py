"""The raw SQL of operating the queue: cancel and requeue, job reads in a scope, per-job-type
job metrics, the admin's job search by key, and retention (jobs and promoted intents).

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. Scope variants are separate texts (as for intents) so each
plan can use the index whose leading column the scope fixes.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- operator actions (reference 11) ------------------------------------------------------------

# A scope is an id lookup plus this predicate: the primary key does the work, so one text
# serves every scope.
_JOB_IN_SCOPE: Final[LiteralString] = """
    job.id = %(job_id)s
    AND (%(admin)s OR job.organization_id IS NOT DISTINCT FROM %(organization_id)s)
"""

# Cancel a PENDING or LEASED job. The lease expiry stays as the quiescence marker: a handler
# still running is fenced at its next write, and a keyed resource stays held until then.
CANCEL_JOB: Final[LiteralString] = (
    """
/* runledger:cancel_job */
WITH canceled AS (
    UPDATE runledger_job_queue job
    SET status = 'CANCELED',
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = now(),
        output = NULL,
        status_reason = 'CANCELED'
    WHERE """
    + _JOB_IN_SCOPE
    + """ AND job.status IN ('PENDING', 'LEASED')
    RETURNING job.id, job.run_number, job.attempt, job.stage, job.progress_done,
              job.progress_total,
              CASE WHEN job.lease_expires_at > clock_timestamp() THEN job.lease_expires_at
                   END AS lease_quiesces_at,
              job.workflow_step_id
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = now(), outcome = 'CANCELED'
    FROM canceled
    WHERE attempt_row.job_id = canceled.id AND attempt_row.run_number = canceled.run_number
      AND attempt_row.attempt = canceled.attempt AND attempt_row.finished_at IS NULL
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload
    )
    SELECT id, run_number, NULLIF(attempt, 0), 'CANCELED', stage, progress_done,
           progress_total,
           jsonb_strip_nulls(jsonb_build_object('reason', 'CANCELED',
                                                'lease_quiesces_at', lease_quiesces_at))
    FROM canceled
)
SELECT 'CANCELED', workflow_step_id FROM canceled
"""
)

# Put a DEAD_LETTERED or CANCELED job back to PENDING with a fresh attempt budget: a new run
# number, attempt 0, due now. Progress and checkpoint are kept, so a handler can resume. A
# cancelled job whose old lease is still live is left alone (its handler may still run).
REQUEUE_JOB: Final[LiteralString] = (
    """
/* runledger:requeue_job */
WITH target AS MATERIALIZED (
    SELECT job.id, job.status, job.run_number,
           -- A job cancelled while PENDING has no lease expiry: NULL must mean quiescent.
           COALESCE(job.status = 'CANCELED' AND job.lease_expires_at > clock_timestamp(), false)
               AS not_quiesced,
           -- One more run would pass chk_job_queue_values_in_range: refuse, never fail.
           job.run_number >= 2147483646 AS runs_exhausted,
           -- A workflow step's job is retried through its workflow (retry_workflow).
           job.workflow_step_id IS NOT NULL AS workflow_job
    FROM runledger_job_queue job
    WHERE """
    + _JOB_IN_SCOPE
    + """
    FOR NO KEY UPDATE
),
requeued AS (
    UPDATE runledger_job_queue job
    SET status = 'PENDING',
        run_number = job.run_number + 1,
        attempt = 0,
        stage = 'queued',
        next_run_at = now(),
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        output = NULL,
        status_reason = 'REQUEUED',
        last_error_code = NULL,
        last_error_message = NULL
    FROM target
    WHERE job.id = target.id AND target.status IN ('DEAD_LETTERED', 'CANCELED')
      AND NOT target.not_quiesced AND NOT target.runs_exhausted AND NOT target.workflow_job
    RETURNING job.id, job.run_number, job.stage, job.progress_done, job.progress_total,
              target.run_number AS previous_run_number, target.status AS previous_status
),
released AS (
    DELETE FROM runledger_job_execution_resource_claims claim
    USING requeued
    WHERE claim.job_id = requeued.id
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, event_type, stage, progress_done, progress_total, payload
    )
    SELECT id, previous_run_number, 'REQUEUED', stage, progress_done, progress_total,
           jsonb_build_object('reason', 'REQUEUED', 'previous_status', previous_status,
                              'next_run_number', run_number,
                              'state_policy', 'preserve_progress_and_checkpoint',
                              'requeue_kind', 'COMPARE_AND_REQUEUE')
    FROM requeued
)
SELECT target.status, target.not_quiesced, requeued.id IS NOT NULL, target.runs_exhausted,
       target.workflow_job
FROM target LEFT JOIN requeued ON requeued.id = target.id
"""
)

# The status of one job in a scope (to tell "not found" from "wrong state").
JOB_STATUS_IN_SCOPE: Final[LiteralString] = (
    "SELECT job.status FROM runledger_job_queue job WHERE " + _JOB_IN_SCOPE
)

# --- job metrics ------------------------------------------------------------------------------

# Statements here are built from constant fragments only (the prunable predicate, the scope
# predicate); every value is a %(name)s parameter.

# Three populations aggregated independently and folded per job type; the ORM cannot express a
# UNION ALL of grouped, filtered aggregates over two tables. Each part reads one index:
# - PENDING jobs: idx_job_queue_pending_metrics (organization_id, job_type, next_run_at), an
#   index-only scan whatever the backlog;
# - LEASED jobs: idx_job_queue_leased_expiry; the leased population is bounded by the workers'
#   total concurrency, so its heap visits stay few;
# - attempts finished in the last 24 hours: idx_job_attempts_finished_metrics, an index-only
#   scan of one day of history.
# Per row, the aggregates do as little as they can (the scans feed tens of thousands of rows):
# scheduled is pending minus due, the oldest due job is the oldest pending one when that one
# is due, and succeeded is what is left of the day's attempts once retried and dead-lettered
# are counted. An expired lease stays LEASED until the reaper moves it: it counts as leased
# and as expired, with the reaper's own test (lease_expires_at < now()).
_JOB_METRICS: Final[LiteralString] = """
WITH populations AS (
    SELECT job_type,
           count(*) AS pending,
           count(*) FILTER (WHERE next_run_at <= now()) AS due,
           min(next_run_at) AS oldest_pending_at,
           0::bigint AS leased,
           0::bigint AS expired,
           0::bigint AS finished_24h,
           0::bigint AS retried_24h,
           0::bigint AS dead_lettered_24h
    FROM runledger_job_queue
    WHERE status = 'PENDING' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, NULL, count(*), count(*) FILTER (WHERE lease_expires_at < now()),
           0, 0, 0
    FROM runledger_job_queue
    WHERE status = 'LEASED' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, NULL, 0, 0,
           count(*),
           count(*) FILTER (WHERE outcome = 'RETRY_SCHEDULED'),
           count(*) FILTER (WHERE outcome = 'DEAD_LETTERED')
    FROM runledger_job_attempts
    WHERE outcome IN ('SUCCEEDED', 'RETRY_SCHEDULED', 'DEAD_LETTERED')
      AND finished_at >= now() - interval '24 hours' AND {scope}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
    GROUP BY job_type
)
SELECT job_type,
       max(due) AS due_count,
       max(pending) - max(due) AS scheduled_count,
       max(leased) AS leased_count,
       max(expired) AS expired_lease_count,
       max(finished_24h) - max(retried_24h) - max(dead_lettered_24h) AS succeeded_24h,
       max(retried_24h) AS retried_24h,
       max(dead_lettered_24h) AS dead_lettered_24h,
       CASE WHEN min(oldest_pending_at) <= now() THEN min(oldest_pending_at) END
           AS oldest_due_at
FROM populations
GROUP BY job_type
ORDER BY job_type
LIMIT %(limit)s OFFSET %(offset)s
"""

JOB_METRICS_ORG: Final[LiteralString] = _JOB_METRICS.replace(
    "{scope}", "organization_id = %(organization_id)s"
)
JOB_METRICS_GLOBAL: Final[LiteralString] = _JOB_METRICS.replace(
    "{scope}", "organization_id IS NULL"
)
JOB_METRICS_ADMIN: Final[LiteralString] = _JOB_METRICS.replace("{scope}", "true")

# --- search -------------------------------------------------------------------------------------

# Keyed jobs by an exact idempotency key alone, whatever their job type and tenant (the admin's
# search), through idx_job_queue_idempotency_key_prefix: see intent_queries.INTENT_IDS_BY_KEY. The
# index leaves unkeyed jobs out, which the key condition implies.
JOB_IDS_BY_KEY: Final[LiteralString] = """
SELECT id FROM runledger_job_queue
WHERE left(idempotency_key, 64) = left(%(key)s, 64) AND idempotency_key = %(key)s
LIMIT %(limit)s
"""

# --- queue retention --------------------------------------------------------------------------

# A finished job retention may delete: one of the chosen terminal statuses, finished before the
# cutoff, and quiescent. A job cancelled while leased keeps its old lease expiry as the marker
# that its handler may still be running (and its execution resource stays held until then), so
# it waits until that moment has passed. A job finishes after it was created, so the created_at
# bound changes nothing but lets idx_job_queue_created_id find the candidates, oldest first:
# no index of its own, which every completion would have to write.
_PRUNABLE: Final[LiteralString] = """
    created_at < %(cutoff)s
    AND status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
    AND status = ANY(%(statuses)s::text[])
    AND finished_at < %(cutoff)s
    AND (lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp())
"""

# One batch of candidates, oldest first, read without locks and outside the retention
# transaction (reference 4.5: the fence must be that transaction's first lock). Jobs created
# before the cutoff that are not prunable (still pending, finished later) are passed over again
# by every batch; they are few unless jobs are scheduled far ahead.
PRUNABLE_JOB_IDS: Final[LiteralString] = (
    "SELECT id FROM runledger_job_queue WHERE"
    + _PRUNABLE
    + "ORDER BY created_at, id LIMIT %(limit)s"
)

# What a prune would remove (the dry run): jobs per status, and the promoted intents, attempts
# and events that would go with them. A set-based count the ORM would need four queries for.
COUNT_PRUNABLE: Final[LiteralString] = (
    "WITH doomed AS MATERIALIZED (SELECT id, status FROM runledger_job_queue WHERE"
    + _PRUNABLE
    + """
)
SELECT count(*) FILTER (WHERE status = 'SUCCEEDED'),
       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
       count(*) FILTER (WHERE status = 'CANCELED'),
       (SELECT count(*) FROM runledger_job_enqueue_intents intent
        WHERE intent.status = 'PROMOTED' AND intent.promoted_job_id IN (SELECT id FROM doomed)),
       (SELECT count(*) FROM runledger_job_attempts attempt_row
        WHERE attempt_row.job_id IN (SELECT id FROM doomed)),
       (SELECT count(*) FROM runledger_job_events event
        WHERE event.job_id IN (SELECT id FROM doomed))
FROM doomed
"""
)

# Inside the retention transaction, after delete_promoted_intents_for_jobs locked the jobs:
# delete those that still qualify, unless one of them changed since it was selected (a requeue
# in between). Then nothing is deleted and ``changed`` says so: the caller rolls back (which
# restores the intents the fence helper removed) and selects again. Attempts, events and
# execution-resource claims go by ON DELETE CASCADE. One statement: the ORM's delete() would
# first read every child row to emulate the cascade in Python.
DELETE_PRUNABLE_JOBS: Final[LiteralString] = (
    "/* runledger:prune_jobs */ WITH changed AS MATERIALIZED ("
    + """
    SELECT count(*) AS n FROM runledger_job_queue
    WHERE id = ANY(%(job_ids)s::uuid[]) AND ("""
    + _PRUNABLE
    + """) IS NOT TRUE
),
deleted AS (
    DELETE FROM runledger_job_queue
    WHERE id = ANY(%(job_ids)s::uuid[]) AND"""
    + _PRUNABLE
    + """  AND (SELECT n FROM changed) = 0
    RETURNING id, status
),
-- A replay's lineage goes with the replay (a source's goes by ON DELETE CASCADE): its foreign
-- key refuses a replay deleted alone, which retention of dead letters only would otherwise do.
unlinked AS (
    DELETE FROM runledger_job_replays replay
    WHERE replay.replay_job_id IN (SELECT id FROM deleted)
)
SELECT (SELECT n FROM changed),
       count(*) FILTER (WHERE status = 'SUCCEEDED'),
       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
       count(*) FILTER (WHERE status = 'CANCELED')
FROM deleted
"""
)

# --- intent retention ----------------------------------------------------------------------
#
# Retention pins the planner like promotion does (session_queries.PIN_PLANNER and
# RESTORE_PLANNER: it runs in the caller's transaction, whose settings it puts back), so a batch
# is found by key or by an ordered walk whatever the statistics say, and deleted by ctid (a TID
# scan).

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

"""The raw SQL of operating the queue: per-job-type job metrics and queue retention.

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. Scope variants are separate texts (as in ``queries.py``) so each
plan can use the index whose leading column the scope fixes.
"""

from __future__ import annotations

from typing import Final, LiteralString

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
# search), through idx_job_queue_idempotency_key_prefix: see queries.INTENT_IDS_BY_KEY. The
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
    "SELECT id FROM runledger_job_queue WHERE"  # noqa: S608 (constant fragments only)
    + _PRUNABLE
    + "ORDER BY created_at, id LIMIT %(limit)s"
)

# What a prune would remove (the dry run): jobs per status, and the promoted intents, attempts
# and events that would go with them. A set-based count the ORM would need four queries for.
COUNT_PRUNABLE: Final[LiteralString] = (
    "WITH doomed AS MATERIALIZED (SELECT id, status FROM runledger_job_queue WHERE"  # noqa: S608
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
    "/* runledger:prune_jobs */ WITH changed AS MATERIALIZED ("  # noqa: S608
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
    RETURNING status
)
SELECT (SELECT n FROM changed),
       count(*) FILTER (WHERE status = 'SUCCEEDED'),
       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
       count(*) FILTER (WHERE status = 'CANCELED')
FROM deleted
"""
)

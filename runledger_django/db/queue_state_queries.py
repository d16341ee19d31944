"""The queue state a Prometheus scrape reads: one statement, per job type, from the indexes.

Reference (observability) 2.2. The statement is read-only and bounded by the live queue (the
PENDING and LEASED rows) plus the retained dead letters, never by the finished history: every
population has an index that holds exactly it.
"""

from __future__ import annotations

from typing import Final, LiteralString

# Per job type (every definition, and every type with pending intents: an intent whose type
# has no definition waits forever and must show), folded into at most ``type_limit`` + 1 labels
# (the types past the limit, in job type order, become ``other_label``), with the states that
# partition the non-terminal and dead-lettered rows (reference 2.2: an expired, unreaped lease
# is not also ``leased``) and the pending intents.
# - Pending intents: idx_job_enqueue_intents_pending_metrics (job_type, created_at) INCLUDE
#   (promotion_attempts), PENDING rows only, read index-only.
# - PENDING: idx_job_queue_pending_metrics (organization_id, job_type, next_run_at), read
#   index-only and grouped by type; it holds PENDING rows only.
# - LEASED: idx_job_queue_leased_expiry (LEASED rows only; a few per worker thread), each with
#   its attempt row (uq_job_attempts_job_run_attempt) for the start of the current lease.
# - DEAD_LETTERED: one index-only count per definition on idx_job_queue_type_status_created's
#   (job_type, status) prefix; a GROUP BY would walk the whole index, finished history included.
# Ages are on the database clock (now(), the statement's transaction start) and count from
# ``next_run_at``, never from creation (reference 2.1 rule 5).
# The live workers come from runledger_workers (a row per worker process).
# The definitions CTE is the one place a definition's own gauges (enabled, paused, the
# limits) are read; the fold keeps them only for a label that is exactly one definition.
QUEUE_STATE: Final[LiteralString] = """
/* runledger:queue_state */
WITH intents AS (
    SELECT intent.job_type,
           count(*) FILTER (WHERE intent.promotion_attempts = 0) AS pending,
           count(*) FILTER (WHERE intent.promotion_attempts > 0) AS retrying,
           min(intent.created_at) AS oldest_created_at
    FROM runledger_job_enqueue_intents intent
    WHERE intent.status = 'PENDING'
    GROUP BY intent.job_type
),
definitions AS MATERIALIZED (
    SELECT known.job_type,
           CASE WHEN row_number() OVER (ORDER BY known.job_type) <= %(type_limit)s
                THEN known.job_type ELSE %(other_label)s END AS label,
           known.is_enabled, known.paused, known.max_concurrency, known.rate_per_second,
           known.intents_pending, known.intents_retrying, known.oldest_intent_at
    FROM (
        SELECT COALESCE(definition.job_type, intents.job_type) AS job_type,
               definition.is_enabled,
               definition.paused_at IS NOT NULL AS paused,
               definition.max_concurrency,
               definition.rate_limit_count::float8 / definition.rate_limit_period_seconds
                   AS rate_per_second,
               COALESCE(intents.pending, 0) AS intents_pending,
               COALESCE(intents.retrying, 0) AS intents_retrying,
               intents.oldest_created_at AS oldest_intent_at
        FROM runledger_job_definitions definition
        FULL JOIN intents ON intents.job_type = definition.job_type
    ) AS known
),
pending AS (
    SELECT job.job_type,
           count(*) FILTER (WHERE job.next_run_at <= now()) AS due,
           count(*) FILTER (WHERE job.next_run_at > now()) AS scheduled,
           min(job.next_run_at) FILTER (WHERE job.next_run_at <= now()) AS oldest_due_at
    FROM runledger_job_queue job
    WHERE job.status = 'PENDING'
    GROUP BY job.job_type
),
leased AS (
    SELECT job.job_type,
           count(*) AS leased_or_expired,
           count(*) FILTER (WHERE job.lease_expires_at < now()) AS lease_expired,
           min(attempt_row.leased_at) AS oldest_leased_at
    FROM runledger_job_queue job
    LEFT JOIN runledger_job_attempts attempt_row
      ON attempt_row.job_id = job.id AND attempt_row.run_number = job.run_number
     AND attempt_row.attempt = job.attempt
    WHERE job.status = 'LEASED'
    GROUP BY job.job_type
),
-- Live workers per job type: runledger_workers holds one row per running worker process (a
-- handful), each listing its job types; a row that missed its beats no longer counts.
workers AS (
    SELECT served.job_type, count(*) AS live
    FROM runledger_workers worker
    CROSS JOIN LATERAL jsonb_array_elements_text(worker.job_types) AS served (job_type)
    WHERE worker.last_heartbeat_at
          > now() - make_interval(secs => worker.heartbeat_seconds * %(stale_beats)s)
    GROUP BY served.job_type
),
per_type AS (
    SELECT definitions.label,
           definitions.is_enabled,
           definitions.paused,
           definitions.max_concurrency,
           definitions.rate_per_second,
           definitions.intents_pending,
           definitions.intents_retrying,
           definitions.oldest_intent_at,
           COALESCE(pending.due, 0) AS due,
           COALESCE(pending.scheduled, 0) AS scheduled,
           COALESCE(leased.leased_or_expired - leased.lease_expired, 0) AS leased,
           COALESCE(leased.lease_expired, 0) AS lease_expired,
           (SELECT count(*) FROM runledger_job_queue dead
            WHERE dead.job_type = definitions.job_type AND dead.status = 'DEAD_LETTERED')
               AS dead_lettered,
           pending.oldest_due_at,
           leased.oldest_leased_at,
           COALESCE(workers.live, 0) AS workers_live
    FROM definitions
    LEFT JOIN pending ON pending.job_type = definitions.job_type
    LEFT JOIN leased ON leased.job_type = definitions.job_type
    LEFT JOIN workers ON workers.job_type = definitions.job_type
)
SELECT label,
       count(*) AS definitions,
       bool_and(is_enabled) AS enabled,
       sum(due)::bigint,
       sum(scheduled)::bigint,
       sum(leased)::bigint,
       sum(lease_expired)::bigint,
       sum(dead_lettered)::bigint,
       COALESCE(extract(epoch FROM now() - min(oldest_due_at)), 0)::float8,
       COALESCE(extract(epoch FROM now() - min(oldest_leased_at)), 0)::float8,
       sum(intents_pending)::bigint,
       sum(intents_retrying)::bigint,
       COALESCE(extract(epoch FROM now() - min(oldest_intent_at)), 0)::float8,
       max(workers_live)::bigint,
       bool_or(paused),
       max(max_concurrency),
       max(rate_per_second)
FROM per_type
GROUP BY label
ORDER BY label
"""

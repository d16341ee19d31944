"""The raw SQL of periodic schedules, one named constant each (services/schedules runs them).

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. The tag in a statement's first comment lets operators and tests
find it in pg_stat_activity.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- the scheduler's idle look (one statement per poll interval) -----------------------------

# A worker's job types, as a filter the planner cannot turn into an index condition: the due
# index alone orders and bounds the walk (a bitmap AND with the job_type index would read
# every schedule of the type).
_OF_TYPES: Final[LiteralString] = (
    " AND array_position(%(job_types)s::text[], s.job_type) IS NOT NULL"
)

_PEEK: Final[LiteralString] = """
SELECT /* runledger:peek_schedules */ now(),
       (SELECT s.next_fire_at FROM runledger_job_schedules s
        WHERE s.is_active AND s.paused_at IS NULL{types}
        ORDER BY s.next_fire_at LIMIT 1)
"""

# The database clock and the earliest cursor among firing schedules: whether a pass is due and
# how long to sleep otherwise. Ordered by the partial due index (idx_job_schedules_next_fire).
PEEK_SCHEDULES: Final[LiteralString] = _PEEK.replace("{types}", "")
PEEK_SCHEDULES_OF_TYPES: Final[LiteralString] = _PEEK.replace("{types}", _OF_TYPES)

# --- a pass ---------------------------------------------------------------------------------

# Bound the pass's lock waits (SET LOCAL has no ORM form): a sync or a guard holding the
# schedules table makes the pass fail fast instead of stalling the worker's shutdown.
CLAIM_TIMEOUTS: Final[LiteralString] = """
SELECT set_config('lock_timeout', %(lock_timeout)s, true),
       set_config('statement_timeout', %(statement_timeout)s, true)
"""

# The claim's table lock first (no ORM form): ROW EXCLUSIVE conflicts with a sync's SHARE ROW
# EXCLUSIVE, so a pass and a sync never hold each other's rows (reference 1.5 step 3).
LOCK_SCHEDULES_FOR_CLAIM: Final[LiteralString] = (
    "LOCK TABLE runledger_job_schedules IN ROW EXCLUSIVE MODE"
)

_CLAIM_DUE: Final[LiteralString] = """
SELECT /* runledger:claim_due_schedules */
       s.id, s.name, s.job_type, s.cron_expr, s.interval_seconds, s.timezone,
       s.max_jitter_seconds, s.catch_up, s.catch_up_grace_seconds, s.catch_up_limit,
       s.overlap, s.next_fire_at, s.next_scheduled_for,
       (SELECT j.status FROM runledger_job_queue j WHERE j.id = s.last_job_id),
       (SELECT d.is_enabled FROM runledger_job_definitions d WHERE d.job_type = s.job_type),
       COALESCE(CAST(%(now)s AS timestamptz), now())
FROM runledger_job_schedules s
WHERE s.is_active AND s.paused_at IS NULL
  AND s.next_fire_at <= COALESCE(CAST(%(now)s AS timestamptz), now()){types}
ORDER BY s.next_fire_at
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED
"""

# Due schedules, oldest cursor first, locked so concurrent schedulers share them (SKIP LOCKED
# has no ORM form with these subselects): the previous fire's job status (overlap) and whether
# the definition is enabled come along. Due is decided by the database clock (or the explicit
# "now" a test passes).
CLAIM_DUE_SCHEDULES: Final[LiteralString] = _CLAIM_DUE.replace("{types}", "")
CLAIM_DUE_SCHEDULES_OF_TYPES: Final[LiteralString] = _CLAIM_DUE.replace("{types}", _OF_TYPES)

# Every write of a pass in one statement (data-modifying CTEs): the fires go into the ledger,
# where a fire already recorded (anything but a failed attempt) is a hit and makes no job; a job
# and its ENQUEUED event for every new enqueued fire, with the definition rows share-locked in
# job_type order as the enqueue does; and the cursor move with the schedule's counters. The
# ledger rows name their jobs before the jobs exist: foreign keys are checked at the end of the
# statement. Returns how many schedules moved (the caller undoes the pass when a claimed row
# is missing), the new jobs, and the skips the ledger took.
MATERIALIZE_FIRES: Final[LiteralString] = """
/* runledger:materialize_schedule_fires */
WITH fire_input AS MATERIALIZED (
    SELECT * FROM unnest(
        %(f_schedule_id)s::uuid[], %(f_scheduled_for)s::timestamptz[],
        %(f_scheduled_text)s::text[], %(f_kind)s::text[], %(f_outcome)s::text[],
        %(f_job_id)s::uuid[], %(f_error_code)s::text[], %(f_resource_key)s::text[]
    ) AS t(schedule_id, scheduled_for, scheduled_text, kind, outcome, job_id, error_code,
           resource_key)
),
fires AS (
    INSERT INTO runledger_schedule_fires AS f
        (id, schedule_id, scheduled_for, kind, outcome, job_id, error_code)
    SELECT runledger_uuidv7(), schedule_id, scheduled_for, kind, outcome, job_id, error_code
    FROM fire_input
    ON CONFLICT (schedule_id, scheduled_for) WHERE kind <> 'manual'
    DO UPDATE SET outcome = EXCLUDED.outcome, job_id = EXCLUDED.job_id,
                  error_code = EXCLUDED.error_code, kind = EXCLUDED.kind,
                  attempts = LEAST(f.attempts, 2147483646) + 1
        WHERE f.outcome = 'failed'
    RETURNING f.schedule_id, f.scheduled_for, f.outcome, f.job_id
),
definition AS MATERIALIZED (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type = ANY(%(job_types)s::text[]) AND is_enabled
    ORDER BY job_type
    FOR SHARE
),
jobs AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, stage, execution_resource_key
    )
    SELECT fires.job_id, s.job_type, s.organization_id,
           CASE WHEN jsonb_typeof(s.payload_template) = 'object'
                THEN s.payload_template || jsonb_build_object('_schedule', meta.value)
                ELSE jsonb_build_object('payload', s.payload_template, '_schedule', meta.value)
           END,
           COALESCE(s.priority, d.default_priority), d.max_attempts,
           d.default_timeout_seconds, now(), 'scheduled', fi.resource_key
    FROM fires
    JOIN fire_input fi
      ON fi.schedule_id = fires.schedule_id AND fi.scheduled_for = fires.scheduled_for
    JOIN runledger_job_schedules s ON s.id = fires.schedule_id
    JOIN definition d ON d.job_type = s.job_type
    CROSS JOIN LATERAL (
        SELECT jsonb_build_object('schedule_id', s.id, 'schedule_name', s.name,
                                  'scheduled_for', fi.scheduled_text)
               || CASE WHEN fi.kind = 'manual' THEN '{"manual": true}'::jsonb
                       ELSE '{}'::jsonb END AS value
    ) AS meta
    WHERE fires.outcome = 'enqueued'
    RETURNING id, run_number, stage, job_type
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM jobs
),
per_schedule AS (
    SELECT fires.schedule_id,
           count(jobs.id) AS fired,
           count(*) FILTER (WHERE fires.outcome IN ('skipped_overlap', 'skipped_late'))
               AS skipped,
           (array_agg(fires.job_id ORDER BY fires.scheduled_for DESC)
                FILTER (WHERE jobs.id IS NOT NULL))[1] AS last_job_id,
           max(fires.scheduled_for) FILTER (WHERE jobs.id IS NOT NULL) AS last_scheduled_for
    FROM fires LEFT JOIN jobs ON jobs.id = fires.job_id
    GROUP BY fires.schedule_id
),
moved AS (
    UPDATE runledger_job_schedules s
    SET next_fire_at = u.next_fire_at,
        next_scheduled_for = u.next_scheduled_for,
        last_fired_at = CASE WHEN COALESCE(p.fired, 0) > 0 THEN now() ELSE s.last_fired_at END,
        last_scheduled_for = COALESCE(p.last_scheduled_for, s.last_scheduled_for),
        last_job_id = COALESCE(p.last_job_id, s.last_job_id),
        fire_count = s.fire_count + COALESCE(p.fired, 0),
        skip_count = s.skip_count + COALESCE(p.skipped, 0),
        coalesced_count = s.coalesced_count + u.coalesced,
        consecutive_failures = CASE WHEN u.error_code IS NULL THEN 0
                                    ELSE LEAST(s.consecutive_failures, 2147483646) + 1 END,
        last_error_code = COALESCE(u.error_code, s.last_error_code),
        last_failed_at = CASE WHEN u.error_code IS NULL THEN s.last_failed_at
                              ELSE now() END
    FROM unnest(
        %(u_id)s::uuid[], %(u_next_fire_at)s::timestamptz[],
        %(u_next_scheduled_for)s::timestamptz[], %(u_coalesced)s::bigint[],
        %(u_error_code)s::text[]
    ) AS u(id, next_fire_at, next_scheduled_for, coalesced, error_code)
    LEFT JOIN per_schedule p ON p.schedule_id = u.id
    WHERE s.id = u.id
    RETURNING s.id
)
SELECT (SELECT count(*) FROM moved),
       (SELECT count(*) FROM jobs),
       (SELECT count(*) FROM fires WHERE outcome IN ('skipped_overlap', 'skipped_late')),
       (SELECT count(*) FROM fire_input) - (SELECT count(*) FROM fires)
"""

# Savepoints of the per-row path (SAVEPOINT has no ORM form outside atomic()).
SAVEPOINT: Final[LiteralString] = "SAVEPOINT materialize_due_schedule"
ROLLBACK_TO_SAVEPOINT: Final[LiteralString] = "ROLLBACK TO SAVEPOINT materialize_due_schedule"
RELEASE_SAVEPOINT: Final[LiteralString] = "RELEASE SAVEPOINT materialize_due_schedule"

# --- writes outside a pass ----------------------------------------------------------------

# The definitions schedules point at, share-locked until commit (FOR SHARE): a concurrent
# disable waits for it, then its guard trigger sees the schedule (migration 0010).
LOCK_DEFINITIONS: Final[LiteralString] = """
SELECT job_type, is_enabled FROM runledger_job_definitions
WHERE job_type = ANY(%(job_types)s::text[])
ORDER BY job_type
FOR SHARE
"""

# A sync's lock: SHARE ROW EXCLUSIVE conflicts with itself (concurrent syncs from starting
# workers take turns) and with a pass's ROW EXCLUSIVE (reference 1.2, exact sync).
LOCK_SCHEDULES_FOR_SYNC: Final[LiteralString] = (
    "LOCK TABLE runledger_job_schedules IN SHARE ROW EXCLUSIVE MODE"
)

# The sync's and the writes' timeouts, transaction-local (SET LOCAL has no ORM form).
WRITE_TIMEOUTS: Final[LiteralString] = """
SELECT now(),
       set_config('lock_timeout', %(lock_timeout)s, true),
       set_config('statement_timeout', %(statement_timeout)s, true)
"""

# The database clock (cursors are computed from it, never from the application's).
DATABASE_NOW: Final[LiteralString] = "SELECT now()"

# Ledger retention: old fires in bounded batches, never the newest of a schedule (its latest
# scheduled_for stays visible and still deduplicates). DELETE ... LIMIT has no ORM form.
PRUNE_FIRES: Final[LiteralString] = """
DELETE FROM runledger_schedule_fires
WHERE id IN (
    SELECT f.id FROM runledger_schedule_fires f
    WHERE f.created_at < %(cutoff)s
      AND EXISTS (SELECT 1 FROM runledger_schedule_fires newer
                  WHERE newer.schedule_id = f.schedule_id
                    AND (newer.scheduled_for, newer.id) > (f.scheduled_for, f.id))
    ORDER BY f.created_at
    LIMIT %(limit)s
)
"""

# How many fires PRUNE_FIRES would delete (--dry-run).
COUNT_PRUNABLE_FIRES: Final[LiteralString] = """
SELECT count(*) FROM runledger_schedule_fires f
WHERE f.created_at < %(cutoff)s
  AND EXISTS (SELECT 1 FROM runledger_schedule_fires newer
              WHERE newer.schedule_id = f.schedule_id
                AND (newer.scheduled_for, newer.id) > (f.scheduled_for, f.id))
"""

# Wake-up: schedulers LISTEN here; a saved, resumed or retimed schedule notifies after commit.
LISTEN_SCHEDULES: Final[LiteralString] = "LISTEN runledger_schedules"

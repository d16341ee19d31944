"""The rate limit as GCRA (the generic cell rate algorithm): one timestamp per limited type
instead of a log of every start in the window, and the limited claim rewritten to use it.

0015 kept each type's recent starts in an array that every limited claim read, filtered and
wrote back whole: at a rate of thousands per period, kilobytes of TOASTed array per claim.
GCRA keeps one "theoretical arrival time" (``theoretical_arrival_at``) per type. With the
emission interval T = period / count, a claim at ``now()`` may admit as many starts as there
are intervals between the later of that time and now, and now plus the period; it advances
the time by T per job it leased, in the same statement (a rollback takes the charge back).
All of it in integer microseconds on the database clock: the admitted count is an exact
integer division, and the advance is rounded up, so rounding never admits a start more.

What it guarantees (docs/queue-control.md): after an idle period, a burst of up to the count;
under a standing backlog, one start per T; over any span of L seconds, at most
count x (1 + L / period) starts, across every worker. The claim's shape is 0015's otherwise
(the per-type advisory lock, then a later query that counts and leases), with the same result
columns, so workers of either release call it during a rolling deploy.

The upgrade turns each logged window into the equivalent debt (starts still in the window
times T); the downgrade starts every log empty (at most one extra burst). Frozen history:
never import application code here."""

from django.db import migrations, models

CLAIM_LIMITED_FUNCTION = r"""
CREATE OR REPLACE FUNCTION runledger_claim_limited(
    p_job_types text[], p_limit integer, p_head_window integer, p_worker_id text,
    p_lease_seconds integer, p_lock_space integer)
RETURNS TABLE (id uuid, run_number integer, attempt integer, job_type text, organization_id uuid,
               payload text, max_attempts integer, timeout_seconds integer, checkpoint text,
               claimed_at timestamptz, lease_expires_at timestamptz, due_at timestamptz,
               trace_context text, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    locked text[];
BEGIN
    SELECT array_agg(candidate_type.job_type) INTO locked
    FROM (
        SELECT definition.job_type FROM runledger_job_definitions definition
        WHERE definition.job_type = ANY(p_job_types) AND definition.paused_at IS NULL
          AND (definition.max_concurrency IS NOT NULL OR definition.rate_limit_count IS NOT NULL)
        ORDER BY definition.job_type
        OFFSET 0
    ) candidate_type
    WHERE pg_try_advisory_xact_lock(p_lock_space, hashtext(candidate_type.job_type));
    IF locked IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY /* runledger:claim_limited_jobs */
WITH limited AS MATERIALIZED (
    SELECT counted.*,
           LEAST(p_limit, counted.concurrency_left, counted.rate_left)::integer AS slots
    FROM (
        SELECT definition.job_type, definition.rate_limit_count,
               definition.rate_limit_period_seconds::numeric * 1000000 AS period_us,
               definition.max_concurrency - (
                   SELECT count(*) FROM runledger_job_queue running
                   WHERE running.job_type = definition.job_type
                     AND running.status = 'LEASED'
               ) AS concurrency_left,
               -- GCRA: the whole emission intervals (period / count) between the later of the
               -- stored arrival time and now, and now plus the period; exact integers.
               CASE WHEN definition.rate_limit_count IS NOT NULL THEN
                   div((definition.rate_limit_period_seconds::numeric * 1000000
                        - GREATEST(extract(epoch FROM state.theoretical_arrival_at - now())
                                   * 1000000, 0)) * definition.rate_limit_count,
                       definition.rate_limit_period_seconds::numeric * 1000000)
               END AS rate_left,
               GREATEST(state.theoretical_arrival_at, now()) AS arrival_from
        FROM runledger_job_definitions definition
        LEFT JOIN runledger_job_rate_limits state
          ON state.job_type = definition.job_type
        WHERE definition.job_type = ANY(locked)
          AND definition.paused_at IS NULL
        OFFSET 0
    ) counted
),
resource_window AS MATERIALIZED (
    SELECT job.id, job.execution_resource_key, job.priority, job.next_run_at, job.created_at
    FROM runledger_job_queue job
    WHERE job.status = 'PENDING'
      AND job.execution_resource_key IS NOT NULL
      AND job.next_run_at <= now()
      AND job.job_type IN (SELECT job_type FROM limited)
      AND NOT EXISTS (
          SELECT 1 FROM runledger_job_execution_resource_claims claim
          WHERE claim.resource_key = job.execution_resource_key
      )
    ORDER BY job.priority DESC, job.next_run_at, job.created_at, job.id
    LIMIT p_head_window
),
resource_head AS (
    SELECT DISTINCT ON (execution_resource_key) id
    FROM resource_window
    ORDER BY execution_resource_key, priority DESC, next_run_at, created_at, id
),
candidate AS MATERIALIZED (
    SELECT pick.id, pick.execution_resource_key, pick.run_number, pick.attempt
    FROM limited
    CROSS JOIN LATERAL (
        SELECT job.id, job.execution_resource_key, job.run_number, job.attempt, job.priority,
               job.next_run_at, job.created_at
        FROM runledger_job_queue job
        WHERE job.status = 'PENDING'
          AND job.next_run_at <= now()
          AND job.job_type = limited.job_type
          AND (job.execution_resource_key IS NULL OR job.id IN (SELECT id FROM resource_head))
        ORDER BY job.priority DESC, job.next_run_at, job.created_at
        LIMIT GREATEST(limited.slots, 0)
        FOR UPDATE OF job SKIP LOCKED
    ) pick
    ORDER BY pick.priority DESC, pick.next_run_at, pick.created_at
    LIMIT p_limit
),
acquired AS (
    INSERT INTO runledger_job_execution_resource_claims (
        resource_key, job_id, run_number, attempt, worker_id, lease_expires_at
    )
    SELECT execution_resource_key, id, run_number, attempt + 1, p_worker_id,
           now() + p_lease_seconds * interval '1 second'
    FROM candidate
    WHERE execution_resource_key IS NOT NULL
    ORDER BY execution_resource_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
),
leased AS (
    UPDATE runledger_job_queue job
    SET status = 'LEASED',
        attempt = job.attempt + 1,
        worker_id = p_worker_id,
        lease_expires_at = now() + p_lease_seconds * interval '1 second',
        last_heartbeat_at = now(),
        started_at = COALESCE(job.started_at, now()),
        stage = 'running'
    FROM candidate
    WHERE job.id = candidate.id
      AND (candidate.execution_resource_key IS NULL
           OR candidate.id IN (SELECT job_id FROM acquired))
    RETURNING job.id, job.run_number, job.attempt, job.job_type, job.organization_id,
              job.payload, job.max_attempts, job.timeout_seconds, job.checkpoint,
              job.lease_expires_at, job.priority, job.next_run_at, job.created_at,
              job.trace_context, job.workflow_step_id
),
taken AS MATERIALIZED (
    SELECT job_type, count(*) AS jobs FROM leased GROUP BY job_type
),
attempt_row AS (
    INSERT INTO runledger_job_attempts (
        job_id, job_type, organization_id, run_number, attempt, worker_id
    )
    SELECT id, job_type, organization_id, run_number, attempt, p_worker_id FROM leased
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage, payload)
    SELECT id, run_number, attempt, 'LEASED', 'running',
           jsonb_build_object('worker_id', p_worker_id::text,
                              'lease_duration_seconds', p_lease_seconds::integer)
    FROM leased
),
-- The charge: T per job leased (never per slot asked for), rounded up to the microsecond.
charged AS (
    INSERT INTO runledger_job_rate_limits AS state (job_type, theoretical_arrival_at)
    SELECT limited.job_type,
           limited.arrival_from + interval '1 microsecond'
               * div(taken.jobs * limited.period_us + limited.rate_limit_count - 1,
                     limited.rate_limit_count)::float8
    FROM limited
    JOIN taken ON taken.job_type = limited.job_type
    WHERE limited.rate_limit_count IS NOT NULL
    ON CONFLICT (job_type) DO UPDATE
        SET theoretical_arrival_at = EXCLUDED.theoretical_arrival_at
)
SELECT id, run_number, attempt, job_type, organization_id,
       payload, max_attempts, timeout_seconds, checkpoint, claimed_at, lease_expires_at,
       due_at, trace_context, workflow_step_id
FROM (
    SELECT 0 AS part, id, run_number, attempt, job_type, organization_id,
           payload::text AS payload, max_attempts, timeout_seconds,
           checkpoint::text AS checkpoint, now() AS claimed_at, lease_expires_at, priority,
           next_run_at, created_at, GREATEST(next_run_at, created_at) AS due_at,
           trace_context::text AS trace_context, workflow_step_id
    FROM leased
    UNION ALL
    -- A marker per type its limit held back; only a type left with fewer slots than the
    -- batch asked for is looked at, so a limit that does not bind costs nothing here.
    SELECT 1, NULL, NULL, NULL, limited.job_type, NULL,
           CASE WHEN limited.rate_left IS NOT NULL
                     AND limited.rate_left <= COALESCE(limited.concurrency_left,
                                                       limited.rate_left)
                THEN 'rate' ELSE 'concurrency' END,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM limited
    LEFT JOIN taken ON taken.job_type = limited.job_type
    WHERE limited.slots < p_limit
      AND COALESCE(taken.jobs, 0) >= GREATEST(limited.slots, 0)
      AND (SELECT count(*) FROM (
               SELECT 1 FROM runledger_job_queue due
               WHERE due.job_type = limited.job_type AND due.status = 'PENDING'
                 AND due.next_run_at <= now()
               LIMIT COALESCE(taken.jobs, 0) + 1) due_jobs) > COALESCE(taken.jobs, 0)
) claimed
ORDER BY part, priority DESC, next_run_at, created_at, id;
END
$fn$;
"""

# 0015's body, for the way back (its text, with OR REPLACE).
CLAIM_LIMITED_FUNCTION_0015 = r"""
CREATE OR REPLACE FUNCTION runledger_claim_limited(
    p_job_types text[], p_limit integer, p_head_window integer, p_worker_id text,
    p_lease_seconds integer, p_lock_space integer)
RETURNS TABLE (id uuid, run_number integer, attempt integer, job_type text, organization_id uuid,
               payload text, max_attempts integer, timeout_seconds integer, checkpoint text,
               claimed_at timestamptz, lease_expires_at timestamptz, due_at timestamptz,
               trace_context text, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    locked text[];
BEGIN
    SELECT array_agg(candidate_type.job_type) INTO locked
    FROM (
        SELECT definition.job_type FROM runledger_job_definitions definition
        WHERE definition.job_type = ANY(p_job_types) AND definition.paused_at IS NULL
          AND (definition.max_concurrency IS NOT NULL OR definition.rate_limit_count IS NOT NULL)
        ORDER BY definition.job_type
        OFFSET 0
    ) candidate_type
    WHERE pg_try_advisory_xact_lock(p_lock_space, hashtext(candidate_type.job_type));
    IF locked IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY /* runledger:claim_limited_jobs */
WITH limited AS MATERIALIZED (
    SELECT left_over.*,
           LEAST(p_limit, left_over.concurrency_left, left_over.rate_left)::integer AS slots
    FROM (
        SELECT counted.*,
               counted.rate_limit_count - cardinality(counted.kept_starts) AS rate_left
        FROM (
            SELECT definition.job_type, definition.rate_limit_count,
                   definition.rate_limit_period_seconds,
                   definition.max_concurrency - (
                       SELECT count(*) FROM runledger_job_queue running
                       WHERE running.job_type = definition.job_type
                         AND running.status = 'LEASED'
                   ) AS concurrency_left,
                   ARRAY(SELECT start_at FROM unnest(state.recent_starts) AS start_at
                         WHERE start_at > now() - definition.rate_limit_period_seconds
                                                  * interval '1 second') AS kept_starts
            FROM runledger_job_definitions definition
            LEFT JOIN runledger_job_rate_limits state
              ON state.job_type = definition.job_type
            WHERE definition.job_type IN (
                      SELECT unnest(locked))
              AND definition.paused_at IS NULL
            OFFSET 0
        ) counted
        OFFSET 0
    ) left_over
),
resource_window AS MATERIALIZED (
    SELECT job.id, job.execution_resource_key, job.priority, job.next_run_at, job.created_at
    FROM runledger_job_queue job
    WHERE job.status = 'PENDING'
      AND job.execution_resource_key IS NOT NULL
      AND job.next_run_at <= now()
      AND job.job_type IN (SELECT job_type FROM limited)
      AND NOT EXISTS (
          SELECT 1 FROM runledger_job_execution_resource_claims claim
          WHERE claim.resource_key = job.execution_resource_key
      )
    ORDER BY job.priority DESC, job.next_run_at, job.created_at, job.id
    LIMIT p_head_window
),
resource_head AS (
    SELECT DISTINCT ON (execution_resource_key) id
    FROM resource_window
    ORDER BY execution_resource_key, priority DESC, next_run_at, created_at, id
),
candidate AS MATERIALIZED (
    SELECT pick.id, pick.execution_resource_key, pick.run_number, pick.attempt
    FROM limited
    CROSS JOIN LATERAL (
        SELECT job.id, job.execution_resource_key, job.run_number, job.attempt, job.priority,
               job.next_run_at, job.created_at
        FROM runledger_job_queue job
        WHERE job.status = 'PENDING'
          AND job.next_run_at <= now()
          AND job.job_type = limited.job_type
          AND (job.execution_resource_key IS NULL OR job.id IN (SELECT id FROM resource_head))
        ORDER BY job.priority DESC, job.next_run_at, job.created_at
        LIMIT GREATEST(limited.slots, 0)
        FOR UPDATE OF job SKIP LOCKED
    ) pick
    ORDER BY pick.priority DESC, pick.next_run_at, pick.created_at
    LIMIT p_limit
),
acquired AS (
    INSERT INTO runledger_job_execution_resource_claims (
        resource_key, job_id, run_number, attempt, worker_id, lease_expires_at
    )
    SELECT execution_resource_key, id, run_number, attempt + 1, p_worker_id,
           now() + p_lease_seconds * interval '1 second'
    FROM candidate
    WHERE execution_resource_key IS NOT NULL
    ORDER BY execution_resource_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
),
leased AS (
    UPDATE runledger_job_queue job
    SET status = 'LEASED',
        attempt = job.attempt + 1,
        worker_id = p_worker_id,
        lease_expires_at = now() + p_lease_seconds * interval '1 second',
        last_heartbeat_at = now(),
        started_at = COALESCE(job.started_at, now()),
        stage = 'running'
    FROM candidate
    WHERE job.id = candidate.id
      AND (candidate.execution_resource_key IS NULL
           OR candidate.id IN (SELECT job_id FROM acquired))
    RETURNING job.id, job.run_number, job.attempt, job.job_type, job.organization_id,
              job.payload, job.max_attempts, job.timeout_seconds, job.checkpoint,
              job.lease_expires_at, job.priority, job.next_run_at, job.created_at,
              job.trace_context, job.workflow_step_id
),
attempt_row AS (
    INSERT INTO runledger_job_attempts (
        job_id, job_type, organization_id, run_number, attempt, worker_id
    )
    SELECT id, job_type, organization_id, run_number, attempt, p_worker_id FROM leased
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage, payload)
    SELECT id, run_number, attempt, 'LEASED', 'running',
           jsonb_build_object('worker_id', p_worker_id::text,
                              'lease_duration_seconds', p_lease_seconds::integer)
    FROM leased
),
charged AS (
    INSERT INTO runledger_job_rate_limits AS state (job_type, recent_starts)
    SELECT limited.job_type, limited.kept_starts || array_fill(now(), ARRAY[taken.jobs::integer])
    FROM limited
    JOIN (SELECT job_type, count(*) AS jobs FROM leased GROUP BY job_type) taken
      ON taken.job_type = limited.job_type
    WHERE limited.rate_limit_count IS NOT NULL
    ON CONFLICT (job_type) DO UPDATE SET recent_starts = EXCLUDED.recent_starts
)
SELECT id, run_number, attempt, job_type, organization_id,
       payload, max_attempts, timeout_seconds, checkpoint, claimed_at, lease_expires_at,
       due_at, trace_context, workflow_step_id
FROM (
    SELECT 0 AS part, id, run_number, attempt, job_type, organization_id,
           payload::text AS payload, max_attempts, timeout_seconds,
           checkpoint::text AS checkpoint, now() AS claimed_at, lease_expires_at, priority,
           next_run_at, created_at, GREATEST(next_run_at, created_at) AS due_at,
           trace_context::text AS trace_context, workflow_step_id
    FROM leased
    UNION ALL
    SELECT 1, NULL, NULL, NULL, limited.job_type, NULL,
           CASE WHEN limited.rate_left IS NOT NULL
                     AND limited.rate_left <= COALESCE(limited.concurrency_left,
                                                       limited.rate_left)
                THEN 'rate' ELSE 'concurrency' END,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM limited
    LEFT JOIN (SELECT job_type, count(*) AS jobs FROM leased GROUP BY job_type) taken
      ON taken.job_type = limited.job_type
    WHERE limited.slots < p_limit
      AND COALESCE(taken.jobs, 0) >= GREATEST(limited.slots, 0)
      AND (SELECT count(*) FROM (
               SELECT 1 FROM runledger_job_queue due
               WHERE due.job_type = limited.job_type AND due.status = 'PENDING'
                 AND due.next_run_at <= now()
               LIMIT COALESCE(taken.jobs, 0) + 1) due_jobs) > COALESCE(taken.jobs, 0)
) claimed
ORDER BY part, priority DESC, next_run_at, created_at, id;
END
$fn$;
"""

# The log's starts still in the window become the same debt: now() plus T per start (rounded
# up, as the claim rounds). A row whose type has no rate limit (any more) holds nothing.
LOG_TO_ARRIVAL = """
ALTER TABLE runledger_job_rate_limits ADD COLUMN theoretical_arrival_at timestamptz;
UPDATE runledger_job_rate_limits state
SET theoretical_arrival_at = now() + interval '1 microsecond' * div(
        (SELECT count(*) FROM unnest(state.recent_starts) AS start_at
         WHERE start_at > now() - definition.rate_limit_period_seconds * interval '1 second')
        * definition.rate_limit_period_seconds::numeric * 1000000
        + definition.rate_limit_count - 1,
        definition.rate_limit_count)::float8
FROM runledger_job_definitions definition
WHERE definition.job_type = state.job_type AND definition.rate_limit_count IS NOT NULL;
DELETE FROM runledger_job_rate_limits WHERE theoretical_arrival_at IS NULL;
ALTER TABLE runledger_job_rate_limits ALTER COLUMN theoretical_arrival_at SET NOT NULL;
ALTER TABLE runledger_job_rate_limits DROP COLUMN recent_starts;
"""

ARRIVAL_TO_LOG = """
ALTER TABLE runledger_job_rate_limits
    ADD COLUMN recent_starts timestamptz[] NOT NULL DEFAULT '{}';
ALTER TABLE runledger_job_rate_limits DROP COLUMN theoretical_arrival_at;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0016_hot_path_functions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="jobratelimitstate",
                    name="theoretical_arrival_at",
                    field=models.DateTimeField(),
                ),
            ],
            database_operations=[migrations.RunSQL(LOG_TO_ARRIVAL, ARRIVAL_TO_LOG)],
        ),
        migrations.RunSQL(CLAIM_LIMITED_FUNCTION, CLAIM_LIMITED_FUNCTION_0015),
    ]

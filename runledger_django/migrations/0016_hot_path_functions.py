"""The worker's hot path as PL/pgSQL functions (issue 22): the claim (batch and one job by id),
the success of one lease and of many, the failure, and the heartbeat. Sent as text, these
statements were parsed and planned on every job (planning cost as much as running them); a
PL/pgSQL function's statements are planned once per session and their plans kept, with no
session state of the client's (a function call is one statement: it works behind PgBouncer in
transaction mode, as record_intent's of 0008 and the limited claim of 0015 do).

Each function pins its plans generic (``plan_cache_mode = force_generic_plan``: the custom
plans of the first calls would be planned again each time until the cache gave up on them) and
runs under the planner pins every transition had (no sort, no sequential or bitmap scan, no
JIT), so the cached plan is the index-driven one whatever the statistics said when it was made.
The statements are those the worker sent as text until now, unchanged: the callers' timeout caps
still go in front of the call. Frozen history: never import application code here."""

from django.db import migrations

_CLAIM_QUERY = r"""RETURN QUERY /* runledger:{tag} */
WITH claim_type AS MATERIALIZED (
    SELECT definition.job_type,
           definition.max_concurrency IS NULL AND definition.rate_limit_count IS NULL AS open
    FROM runledger_job_definitions definition
    WHERE definition.job_type = ANY(p_job_types::text[]) AND definition.paused_at IS NULL
),
open_type AS (SELECT array_agg(job_type) AS job_types FROM claim_type WHERE open),
resource_window AS MATERIALIZED (
    SELECT job.id, job.execution_resource_key, job.priority, job.next_run_at, job.created_at
    FROM runledger_job_queue job
    WHERE job.status = 'PENDING'
      AND job.execution_resource_key IS NOT NULL
      AND job.next_run_at <= now()
      AND job.job_type = ANY(CAST((SELECT job_types FROM open_type) AS text[]))
{only}      AND NOT EXISTS (
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
    SELECT job.id, job.execution_resource_key, job.run_number, job.attempt
    FROM runledger_job_queue job
    WHERE job.status = 'PENDING'
      AND job.next_run_at <= now()
      AND job.job_type = ANY(CAST((SELECT job_types FROM open_type) AS text[]))
{only}      AND (job.execution_resource_key IS NULL OR job.id IN (SELECT id FROM resource_head))
    -- Exactly idx_job_queue_claim's order, so the claim walks that index and stops at the
    -- limit; one more sort key (even id) would make it read and sort the whole backlog.
    ORDER BY job.priority DESC, job.next_run_at, job.created_at
    LIMIT p_limit
    FOR UPDATE OF job SKIP LOCKED
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
    SELECT 1, NULL, NULL, NULL, job_type, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL
    FROM claim_type WHERE NOT open
) claimed
ORDER BY part, priority DESC, next_run_at, created_at, id;
"""
"""The claim as the worker sent it as text: ``{tag}`` names it, ``{only}`` narrows the
one-job form (the fallback's) to its job."""

CLAIM_FUNCTION = (
    r"""
CREATE FUNCTION runledger_claim_jobs(
    p_job_types text[], p_limit integer, p_head_window integer, p_worker_id text,
    p_lease_seconds integer, p_job_id uuid)
RETURNS TABLE (id uuid, run_number integer, attempt integer, job_type text, organization_id uuid,
               payload text, max_attempts integer, timeout_seconds integer, checkpoint text,
               claimed_at timestamptz, lease_expires_at timestamptz, due_at timestamptz,
               trace_context text, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
IF p_job_id IS NULL THEN
"""
    + _CLAIM_QUERY.replace("{tag}", "claim_jobs").replace("{only}", "")
    + "ELSE\n"
    + _CLAIM_QUERY.replace("{tag}", "claim_one_job").replace(
        "{only}", "      AND job.id = p_job_id\n"
    )
    + r"""END IF;
END
$fn$;
"""
)

SUCCESS_FUNCTION = r"""
CREATE FUNCTION runledger_complete_success(
    p_job_id uuid, p_run_number integer, p_attempt integer, p_worker_id text, p_output text,
    p_workflow boolean)
RETURNS TABLE (finished_at timestamptz, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY /* runledger:complete_job_success */
WITH locked AS MATERIALIZED (
    SELECT job.id FROM runledger_job_queue job
    WHERE
    job.id = p_job_id AND job.run_number = p_run_number AND job.attempt = p_attempt
    AND job.worker_id = p_worker_id AND job.status = 'LEASED'
    AND job.lease_expires_at IS NOT NULL

      AND (job.workflow_step_id IS NULL OR p_workflow)
    FOR UPDATE
),
finished AS (
    UPDATE runledger_job_queue job
    SET status = 'SUCCEEDED',
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = statement_timestamp(),
        stage = 'completed',
        output = CAST(p_output AS jsonb),
        status_reason = NULL,
        last_error_code = NULL,
        last_error_message = NULL
    FROM locked
    WHERE job.id = locked.id AND
    job.id = p_job_id AND job.run_number = p_run_number AND job.attempt = p_attempt
    AND job.worker_id = p_worker_id AND job.status = 'LEASED'
    AND job.lease_expires_at IS NOT NULL
 AND job.lease_expires_at > clock_timestamp()

    RETURNING job.id, job.run_number, job.attempt, job.progress_done, job.progress_total,
              job.finished_at, job.workflow_step_id
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = statement_timestamp(), outcome = 'SUCCEEDED'
    FROM finished
    WHERE attempt_row.job_id = finished.id AND attempt_row.run_number = finished.run_number
      AND attempt_row.attempt = finished.attempt
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total,
        occurred_at
    )
    SELECT id, run_number, attempt, 'SUCCEEDED', 'completed', progress_done, progress_total,
           statement_timestamp()
    FROM finished
)

SELECT finished_at, workflow_step_id FROM finished;
END
$fn$;
"""

SUCCESS_MANY_FUNCTION = r"""
CREATE FUNCTION runledger_complete_success_many(
    p_job_ids uuid[], p_run_numbers integer[], p_attempts integer[], p_outputs text[],
    p_worker_id text, p_workflow boolean)
RETURNS TABLE (id uuid, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY /* runledger:complete_jobs_success */
WITH lease AS (
    SELECT *
    FROM unnest(p_job_ids::uuid[], p_run_numbers::integer[], p_attempts::integer[],
                p_outputs::text[])
        AS lease(id, run_number, attempt, output)
),
locked AS MATERIALIZED (
    SELECT job.id, lease.output
    FROM runledger_job_queue job
    JOIN lease
      ON lease.id = job.id AND lease.run_number = job.run_number
     AND lease.attempt = job.attempt
    WHERE job.id = ANY(p_job_ids::uuid[])
      AND job.worker_id = p_worker_id AND (job.status = 'LEASED') IS TRUE
      AND (job.workflow_step_id IS NULL OR p_workflow)
    FOR UPDATE OF job
),
finished AS (
    UPDATE runledger_job_queue job
    SET status = 'SUCCEEDED',
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = statement_timestamp(),
        stage = 'completed',
        output = CAST(locked.output AS jsonb),
        status_reason = NULL,
        last_error_code = NULL,
        last_error_message = NULL
    FROM locked
    WHERE job.id = locked.id AND job.lease_expires_at > clock_timestamp()
    RETURNING job.id, job.run_number, job.attempt, job.progress_done, job.progress_total,
              job.workflow_step_id
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = statement_timestamp(), outcome = 'SUCCEEDED'
    FROM finished
    WHERE attempt_row.job_id = finished.id AND attempt_row.run_number = finished.run_number
      AND attempt_row.attempt = finished.attempt
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total,
        occurred_at
    )
    SELECT id, run_number, attempt, 'SUCCEEDED', 'completed', progress_done, progress_total,
           statement_timestamp()
    FROM finished
)

SELECT id, workflow_step_id FROM finished;
END
$fn$;
"""

FAILURE_FUNCTION = r"""
CREATE FUNCTION runledger_complete_failure(
    p_job_id uuid, p_run_number integer, p_attempt integer, p_worker_id text, p_workflow boolean,
    p_retryable boolean, p_kind text, p_code text, p_message text, p_error_class text,
    p_traceback text, p_policy_retry_delay_ms integer, p_retry_after_ms bigint,
    p_retry_at timestamptz, p_timing_valid boolean)
RETURNS TABLE (status text, next_run_at timestamptz, workflow_step_id uuid)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY /* runledger:complete_job_failure */
WITH locked AS MATERIALIZED (
    SELECT job.id, job.attempt >= job.max_attempts AS exhausted
    FROM runledger_job_queue job
    WHERE
    job.id = p_job_id AND job.run_number = p_run_number AND job.attempt = p_attempt
    AND job.worker_id = p_worker_id AND job.status = 'LEASED'
    AND job.lease_expires_at IS NOT NULL

      AND (job.workflow_step_id IS NULL OR p_workflow)
    FOR UPDATE
),
decided AS MATERIALIZED (
    SELECT locked.id,
           NOT p_retryable OR locked.exhausted AS dead,
           CASE WHEN NOT p_retryable THEN 'FAILURE_KIND_NON_RETRYABLE'
                WHEN locked.exhausted THEN 'ATTEMPTS_EXHAUSTED' END AS dead_reason,
           clock_timestamp()
               + CAST(p_policy_retry_delay_ms AS integer) * interval '1 millisecond'
               AS policy_next,
           CASE WHEN CAST(p_retry_after_ms AS bigint) IS NOT NULL
                THEN clock_timestamp()
                     + CAST(p_retry_after_ms AS bigint) * interval '1 millisecond'
                ELSE CAST(p_retry_at AS timestamptz) END AS requested
    FROM locked
),
moved AS (
    UPDATE runledger_job_queue job
    SET status = CASE WHEN decided.dead THEN 'DEAD_LETTERED' ELSE 'PENDING' END,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = CASE WHEN decided.dead THEN now() ELSE job.finished_at END,
        next_run_at = CASE WHEN decided.dead THEN job.next_run_at
                           ELSE COALESCE(decided.requested, decided.policy_next) END,
        output = NULL,
        status_reason = p_kind,
        last_error_code = p_code,
        last_error_message = p_message
    FROM decided
    -- Invalid retry timing (checked by the caller) may only dead-letter, never retry.
    WHERE job.id = decided.id AND (decided.dead OR p_timing_valid) AND
    job.id = p_job_id AND job.run_number = p_run_number AND job.attempt = p_attempt
    AND job.worker_id = p_worker_id AND job.status = 'LEASED'
    AND job.lease_expires_at IS NOT NULL
 AND job.lease_expires_at > clock_timestamp()

    RETURNING job.id, job.run_number, job.attempt, job.status, job.next_run_at, job.stage,
              job.progress_done, job.progress_total, decided.dead, decided.dead_reason,
              decided.requested, job.workflow_step_id
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = now(),
        outcome = CASE WHEN moved.dead THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
        failure_kind = p_kind,
        error_code = p_code,
        error_message = p_message,
        error_class = p_error_class,
        error_traceback = p_traceback,
        retry_delay_ms = CASE WHEN moved.dead THEN NULL
                              ELSE CAST(p_policy_retry_delay_ms AS integer) END,
        requested_retry_not_before = CASE WHEN moved.dead THEN NULL ELSE moved.requested END,
        effective_next_run_at = CASE WHEN moved.dead THEN NULL ELSE moved.next_run_at END,
        retry_timing_source = CASE WHEN moved.dead THEN NULL
                                   WHEN moved.requested IS NOT NULL THEN 'HANDLER_NOT_BEFORE'
                                   ELSE 'POLICY' END
    FROM moved
    WHERE attempt_row.job_id = moved.id AND attempt_row.run_number = moved.run_number
      AND attempt_row.attempt = moved.attempt
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload
    )
    SELECT moved.id, moved.run_number, moved.attempt, kind.event_type, moved.stage,
           moved.progress_done, moved.progress_total, kind.payload
    FROM moved
    CROSS JOIN LATERAL (
        VALUES
            (1, 'FAILED',
             jsonb_build_object('kind', CAST(p_kind AS text),
                                'error_code', CAST(p_code AS text),
                                'error_message', CAST(p_message AS text))),
            (2, CASE WHEN moved.dead THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
             CASE WHEN moved.dead
                  THEN jsonb_build_object('kind', CAST(p_kind AS text),
                                          'error_code', CAST(p_code AS text),
                                          'reason', moved.dead_reason)
                  ELSE jsonb_strip_nulls(jsonb_build_object(
                      'retry_delay_ms', CAST(p_policy_retry_delay_ms AS integer),
                      'requested_retry_not_before', moved.requested,
                      'retry_timing_source',
                          CASE WHEN moved.requested IS NOT NULL THEN 'HANDLER_NOT_BEFORE'
                               ELSE 'POLICY' END,
                      'next_run_at', moved.next_run_at)) END)
    ) AS kind(position, event_type, payload)
    ORDER BY moved.id, kind.position
)
SELECT status, CASE WHEN dead THEN NULL ELSE next_run_at END, workflow_step_id FROM moved;
END
$fn$;
"""

HEARTBEAT_FUNCTION = r"""
CREATE FUNCTION runledger_heartbeat_leases(
    p_job_ids uuid[], p_run_numbers integer[], p_attempts integer[], p_worker_id text,
    p_lease_seconds integer)
RETURNS TABLE (id uuid, renewed boolean, busy boolean)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY /* runledger:heartbeat_leases */
WITH lease AS (
    SELECT *
    FROM unnest(p_job_ids::uuid[], p_run_numbers::integer[], p_attempts::integer[])
        AS lease(id, run_number, attempt)
),
locked AS MATERIALIZED (
    SELECT job.id
    FROM runledger_job_queue job
    WHERE (job.id, job.run_number, job.attempt) IN (
              SELECT id, run_number, attempt FROM lease)
      AND job.worker_id = p_worker_id AND job.status = 'LEASED'
      AND job.lease_expires_at IS NOT NULL
    FOR UPDATE OF job SKIP LOCKED
),
renewed AS (
    UPDATE runledger_job_queue job
    SET lease_expires_at = now() + p_lease_seconds * interval '1 second',
        last_heartbeat_at = now()
    FROM locked
    WHERE job.id = locked.id AND job.worker_id = p_worker_id AND job.status = 'LEASED'
      AND job.lease_expires_at > clock_timestamp()
    RETURNING job.id, job.run_number, job.attempt, job.stage
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage, payload)
    SELECT id, run_number, attempt, 'HEARTBEAT', stage,
           jsonb_build_object('worker_id', p_worker_id::text)
    FROM renewed
)
SELECT lease.id,
       renewed.id IS NOT NULL AS renewed,
       renewed.id IS NULL AND locked.id IS NULL AND EXISTS (
           SELECT 1 FROM runledger_job_queue job
           WHERE job.id = lease.id AND job.run_number = lease.run_number
             AND job.attempt = lease.attempt AND job.worker_id = p_worker_id
             AND job.status = 'LEASED' AND job.lease_expires_at > clock_timestamp()
       ) AS busy
FROM lease
LEFT JOIN renewed ON renewed.id = lease.id
LEFT JOIN locked ON locked.id = lease.id;

END
$fn$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0015_queue_control"),
    ]

    operations = [
        migrations.RunSQL(
            CLAIM_FUNCTION,
            "DROP FUNCTION runledger_claim_jobs(text[], integer, integer, text, integer, uuid)",
        ),
        migrations.RunSQL(
            SUCCESS_FUNCTION,
            "DROP FUNCTION runledger_complete_success(uuid, integer, integer, text, text, boolean)",
        ),
        migrations.RunSQL(
            SUCCESS_MANY_FUNCTION,
            "DROP FUNCTION runledger_complete_success_many(uuid[], integer[], integer[], text[], text, boolean)",
        ),
        migrations.RunSQL(
            FAILURE_FUNCTION,
            "DROP FUNCTION runledger_complete_failure(uuid, integer, integer, text, boolean, boolean, text, text, text, text, text, integer, bigint, timestamptz, boolean)",
        ),
        migrations.RunSQL(
            HEARTBEAT_FUNCTION,
            "DROP FUNCTION runledger_heartbeat_leases(uuid[], integer[], integer[], text, integer)",
        ),
    ]

"""Queue control (issue 21): the pause and the per-type limits on the job definition, and the
rate limit's log table. Nullable columns without defaults and CHECKs on the small definitions
table: instant on a busy queue. Counting a type's LEASED jobs walks the existing
idx_job_queue_type_status_created (job_type, status, ...): no new index on the queue. The log
column is an array, which the ORM cannot declare without django.contrib.postgres: RunSQL.

The claim of limited job types is a PL/pgSQL function, as record_intent's is (0008): planned
once per session, and one statement for the client, while its two steps still get a snapshot
each (a VOLATILE function's queries do, under READ COMMITTED). It first takes a
transaction-scoped advisory lock per limited type (skipping a type another claimer holds),
then, in a later query that sees every claim the lock's previous holder committed, counts the
type's LEASED jobs and its starts in the rate window and leases at most what is left; it
charges the starts, and returns a marker row (id NULL, the reason in the payload column) per
type its limit held back. Frozen history: never import application code here."""

from django.db import migrations, models

CLAIM_LIMITED_FUNCTION = r"""
CREATE FUNCTION runledger_claim_limited(
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
                   -- The log's starts still inside the window, in order (read once: the
                   -- charge appends to this).
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


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0014_workflows"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobRateLimitState",
            fields=[
                ("job_type", models.TextField(primary_key=True, serialize=False)),
            ],
            options={
                "db_table": "runledger_job_rate_limits",
            },
        ),
        migrations.AlterModelOptions(
            name="jobdefinition",
            options={
                "ordering": ["job_type"],
                "permissions": [
                    ("pause_jobdefinition", "Can pause a job type"),
                    ("resume_jobdefinition", "Can resume a paused job type"),
                ],
            },
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="max_concurrency",
            field=models.IntegerField(
                blank=True,
                help_text="At most this many LEASED jobs of the type across every worker (empty: no limit).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="paused_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="paused_by",
            field=models.TextField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="paused_reason",
            field=models.TextField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="rate_limit_count",
            field=models.IntegerField(
                blank=True,
                help_text="At most this many job starts per rate limit period (empty: no limit).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="rate_limit_period_seconds",
            field=models.IntegerField(
                blank=True, help_text="The rate limit's period, in seconds.", null=True
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdefinition",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_concurrency__isnull", True), ("max_concurrency__gt", 0), _connector="OR"
                ),
                name="chk_job_definitions_max_concurrency_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdefinition",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("rate_limit_count__isnull", True),
                        ("rate_limit_period_seconds__isnull", True),
                    ),
                    models.Q(
                        ("rate_limit_count__gt", 0),
                        ("rate_limit_count__lte", 10000),
                        ("rate_limit_period_seconds__gt", 0),
                    ),
                    _connector="OR",
                ),
                name="chk_job_definitions_rate_limit_valid",
            ),
        ),
        migrations.RunSQL(
            "ALTER TABLE runledger_job_rate_limits "
            "ADD COLUMN recent_starts timestamptz[] NOT NULL DEFAULT '{}'",
            "ALTER TABLE runledger_job_rate_limits DROP COLUMN recent_starts",
        ),
        migrations.RunSQL(
            CLAIM_LIMITED_FUNCTION,
            "DROP FUNCTION runledger_claim_limited(text[], integer, integer, text, integer, integer)",
        ),
    ]

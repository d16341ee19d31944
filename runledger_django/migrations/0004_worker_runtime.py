"""The worker runtime: attempts, execution-resource claims and the triggers that keep a claim
in step with its lease (reference runledger-worker 1.4 and 1.7); job event ids become
GENERATED ALWAYS as in the reference. Frozen history: never import application code here."""

import django.db.models.deletion
from django.db import migrations, models

# The Unicode White_Space set of migration 0002, repeated because migrations never import
# each other's code.
NOT_BLANK = r"U&'[^\0009-\000D\0020\0085\00A0\1680\2000-\200A\2028\2029\202F\205F\3000]'"

FOREIGN_KEYS = """
ALTER TABLE runledger_job_attempts ADD CONSTRAINT fk_job_attempts_job
    FOREIGN KEY (job_id) REFERENCES runledger_job_queue (id) ON DELETE CASCADE;
ALTER TABLE runledger_job_execution_resource_claims
    ADD CONSTRAINT fk_job_execution_resource_claims_job
    FOREIGN KEY (job_id) REFERENCES runledger_job_queue (id) ON DELETE CASCADE;
"""

FOREIGN_KEYS_REVERSE = """
ALTER TABLE runledger_job_execution_resource_claims
    DROP CONSTRAINT fk_job_execution_resource_claims_job;
ALTER TABLE runledger_job_attempts DROP CONSTRAINT fk_job_attempts_job;
"""

CHECKS = f"""
ALTER TABLE runledger_job_attempts ADD CONSTRAINT chk_job_attempts_worker_id_not_blank
    CHECK (worker_id ~ {NOT_BLANK});
ALTER TABLE runledger_job_execution_resource_claims
    ADD CONSTRAINT chk_job_execution_resource_claims_key
    CHECK (resource_key ~ {NOT_BLANK} AND octet_length(resource_key) <= 512);
"""

CHECKS_REVERSE = """
ALTER TABLE runledger_job_execution_resource_claims
    DROP CONSTRAINT chk_job_execution_resource_claims_key;
ALTER TABLE runledger_job_attempts DROP CONSTRAINT chk_job_attempts_worker_id_not_blank;
"""

# A keyed job may only become LEASED by the worker that holds the key's claim row, and the
# claim follows the lease: a heartbeat moves its expiry, a live cancellation keeps it until the
# old lease would have expired, and every other end of the lease deletes it.
RESOURCE_TRIGGERS = """
CREATE FUNCTION runledger_require_execution_resource_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM runledger_job_execution_resource_claims claim
        WHERE claim.resource_key = NEW.execution_resource_key AND claim.job_id = NEW.id
          AND claim.run_number = NEW.run_number AND claim.attempt = NEW.attempt
          AND claim.worker_id = NEW.worker_id
    ) THEN
        RAISE EXCEPTION 'a keyed job cannot be leased without its execution resource claim'
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'chk_job_queue_execution_resource_claim_required',
                  TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER trg_job_queue_require_execution_resource_claim
    BEFORE UPDATE OF status ON runledger_job_queue FOR EACH ROW
    WHEN (NEW.status = 'LEASED' AND NEW.execution_resource_key IS NOT NULL)
    EXECUTE FUNCTION runledger_require_execution_resource_claim();

CREATE FUNCTION runledger_sync_execution_resource_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'LEASED' AND NEW.run_number = OLD.run_number
       AND NEW.attempt = OLD.attempt AND NEW.worker_id IS NOT DISTINCT FROM OLD.worker_id THEN
        IF NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
            UPDATE runledger_job_execution_resource_claims
            SET lease_expires_at = NEW.lease_expires_at
            WHERE resource_key = OLD.execution_resource_key AND job_id = OLD.id
              AND run_number = OLD.run_number AND attempt = OLD.attempt
              AND worker_id = OLD.worker_id;
        END IF;
    ELSIF NEW.status = 'CANCELED' AND OLD.lease_expires_at > clock_timestamp() THEN
        UPDATE runledger_job_execution_resource_claims
        SET release_after = OLD.lease_expires_at
        WHERE resource_key = OLD.execution_resource_key AND job_id = OLD.id
          AND run_number = OLD.run_number AND attempt = OLD.attempt
          AND worker_id = OLD.worker_id;
    ELSE
        DELETE FROM runledger_job_execution_resource_claims
        WHERE resource_key = OLD.execution_resource_key AND job_id = OLD.id
          AND run_number = OLD.run_number AND attempt = OLD.attempt
          AND worker_id = OLD.worker_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER trg_job_queue_sync_execution_resource_claim
    AFTER UPDATE OF status, run_number, attempt, worker_id, lease_expires_at
    ON runledger_job_queue FOR EACH ROW
    WHEN (OLD.status = 'LEASED' AND OLD.execution_resource_key IS NOT NULL)
    EXECUTE FUNCTION runledger_sync_execution_resource_claim();
"""

RESOURCE_TRIGGERS_REVERSE = """
DROP TRIGGER trg_job_queue_sync_execution_resource_claim ON runledger_job_queue;
DROP FUNCTION runledger_sync_execution_resource_claim();
DROP TRIGGER trg_job_queue_require_execution_resource_claim ON runledger_job_queue;
DROP FUNCTION runledger_require_execution_resource_claim();
"""

# Django gives every text primary key a text_pattern_ops index for LIKE lookups; claims are
# only ever looked up by equality, and every keyed claim would pay for it. Django creates that
# index at the end of the migration (deferred SQL), so the drop is deferred behind it.
DROP_PATTERN_INDEX = """
DO $$
DECLARE pattern_index text;
BEGIN
    FOR pattern_index IN
        SELECT indexname FROM pg_indexes
        WHERE tablename = 'runledger_job_execution_resource_claims'
          AND indexdef LIKE '%text_pattern_ops%'
    LOOP
        EXECUTE format('DROP INDEX %I', pattern_index);
    END LOOP;
END
$$;
"""


def drop_pattern_index(apps: object, schema_editor: object) -> None:
    schema_editor.deferred_sql.append(DROP_PATTERN_INDEX)  # type: ignore[attr-defined]


# The audit trail is append-only: ids come from the database alone (reference 1.5).
EVENT_IDS_ALWAYS = "ALTER TABLE runledger_job_events ALTER COLUMN id SET GENERATED ALWAYS;"
EVENT_IDS_ALWAYS_REVERSE = (
    "ALTER TABLE runledger_job_events ALTER COLUMN id SET GENERATED BY DEFAULT;"
)


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0003_intent_metrics_page"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobExecutionResourceClaim",
            fields=[
                ("resource_key", models.TextField(primary_key=True, serialize=False)),
                ("run_number", models.IntegerField()),
                ("attempt", models.IntegerField()),
                ("worker_id", models.TextField()),
                ("lease_expires_at", models.DateTimeField()),
                ("release_after", models.DateTimeField(blank=True, null=True)),
                (
                    "acquired_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "job",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="resource_claim",
                        to="runledger.job",
                    ),
                ),
            ],
            options={
                "db_table": "runledger_job_execution_resource_claims",
            },
        ),
        migrations.CreateModel(
            name="JobAttempt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_type", models.TextField()),
                ("organization_id", models.UUIDField(blank=True, null=True)),
                ("run_number", models.IntegerField()),
                ("attempt", models.IntegerField()),
                ("worker_id", models.TextField()),
                (
                    "leased_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField())
                    ),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "outcome",
                    models.TextField(
                        blank=True,
                        choices=[
                            ("SUCCEEDED", "Succeeded"),
                            ("RETRY_SCHEDULED", "Retry Scheduled"),
                            ("DEAD_LETTERED", "Dead Lettered"),
                            ("CANCELED", "Canceled"),
                            ("INTERRUPTED", "Interrupted"),
                        ],
                        null=True,
                    ),
                ),
                (
                    "failure_kind",
                    models.TextField(
                        blank=True,
                        choices=[
                            ("RETRYABLE", "Retryable"),
                            ("TERMINAL", "Terminal"),
                            ("PANICKED", "Panicked"),
                            ("TIMEOUT", "Timeout"),
                            ("LEASE_EXPIRED", "Lease Expired"),
                        ],
                        null=True,
                    ),
                ),
                ("error_code", models.TextField(blank=True, null=True)),
                ("error_message", models.TextField(blank=True, null=True)),
                ("error_class", models.TextField(blank=True, null=True)),
                ("error_traceback", models.TextField(blank=True, null=True)),
                ("retry_delay_ms", models.IntegerField(blank=True, null=True)),
                ("requested_retry_not_before", models.DateTimeField(blank=True, null=True)),
                ("effective_next_run_at", models.DateTimeField(blank=True, null=True)),
                ("retry_timing_source", models.TextField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="attempts",
                        to="runledger.job",
                    ),
                ),
            ],
            options={
                "db_table": "runledger_job_attempts",
                "ordering": ["job_id", "run_number", "attempt"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "run_number", "attempt"),
                        name="uq_job_attempts_job_run_attempt",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("attempt__gt", 0)),
                        name="chk_job_attempts_attempt_positive",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("run_number__gt", 0)),
                        name="chk_job_attempts_run_number_positive",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("outcome__isnull", True),
                            (
                                "outcome__in",
                                [
                                    "SUCCEEDED",
                                    "RETRY_SCHEDULED",
                                    "DEAD_LETTERED",
                                    "CANCELED",
                                    "INTERRUPTED",
                                ],
                            ),
                            _connector="OR",
                        ),
                        name="chk_job_attempts_outcome",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("failure_kind__isnull", True),
                            (
                                "failure_kind__in",
                                ["RETRYABLE", "TERMINAL", "PANICKED", "TIMEOUT", "LEASE_EXPIRED"],
                            ),
                            _connector="OR",
                        ),
                        name="chk_job_attempts_failure_kind",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("finished_at__isnull", True), ("outcome__isnull", True)),
                            models.Q(("finished_at__isnull", False), ("outcome__isnull", False)),
                            _connector="OR",
                        ),
                        name="chk_job_attempts_finished_outcome",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("retry_delay_ms__isnull", True),
                            ("retry_delay_ms__gte", 0),
                            _connector="OR",
                        ),
                        name="chk_job_attempts_retry_delay_nonnegative",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("retry_timing_source__isnull", True),
                            ("retry_timing_source__in", ["POLICY", "HANDLER_NOT_BEFORE"]),
                            _connector="OR",
                        ),
                        name="chk_job_attempts_retry_timing_source",
                    ),
                ],
            },
        ),
        migrations.RunSQL(FOREIGN_KEYS, FOREIGN_KEYS_REVERSE),
        migrations.RunSQL(CHECKS, CHECKS_REVERSE),
        migrations.RunSQL(RESOURCE_TRIGGERS, RESOURCE_TRIGGERS_REVERSE),
        migrations.RunSQL(EVENT_IDS_ALWAYS, EVENT_IDS_ALWAYS_REVERSE),
        migrations.RunPython(drop_pattern_index, migrations.RunPython.noop),
    ]

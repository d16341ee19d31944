"""Periodic schedules (issue 18): the schedules, their fire ledger, and the database objects
the ORM cannot express: immediate foreign keys with database actions, the Unicode blank and
zone-shape CHECKs, the partial due index, the updated_at triggers and the guard that refuses
to disable a job definition an active schedule uses. Frozen history: never import application
code here."""

import django.db.models.deletion
from django.db import migrations, models

import runledger_django.uuid7

# As in 0002: the Unicode White_Space set spelled out, equal to the Python validation.
NOT_BLANK = r"U&'[^\0009-\000D\0020\0085\00A0\1680\2000-\200A\2028\2029\202F\205F\3000]'"

DATABASE_OBJECTS = f"""
ALTER TABLE runledger_job_schedules ALTER COLUMN id SET DEFAULT runledger_uuidv7();
ALTER TABLE runledger_schedule_fires ALTER COLUMN id SET DEFAULT runledger_uuidv7();

ALTER TABLE runledger_job_schedules ADD CONSTRAINT fk_job_schedules_job_type
    FOREIGN KEY (job_type) REFERENCES runledger_job_definitions (job_type) ON DELETE RESTRICT;
ALTER TABLE runledger_schedule_fires ADD CONSTRAINT fk_schedule_fires_schedule
    FOREIGN KEY (schedule_id) REFERENCES runledger_job_schedules (id) ON DELETE CASCADE;
-- Retention deletes jobs; their fires stay, without a job, so a fire never runs twice.
ALTER TABLE runledger_schedule_fires ADD CONSTRAINT fk_schedule_fires_job
    FOREIGN KEY (job_id) REFERENCES runledger_job_queue (id) ON DELETE SET NULL;

ALTER TABLE runledger_job_schedules ADD CONSTRAINT chk_job_schedules_name_not_blank
    CHECK (name ~ {NOT_BLANK});
ALTER TABLE runledger_job_schedules ADD CONSTRAINT chk_job_schedules_cron_not_blank
    CHECK (cron_expr IS NULL OR cron_expr ~ {NOT_BLANK});
ALTER TABLE runledger_job_schedules ADD CONSTRAINT chk_job_schedules_timezone_not_blank
    CHECK (timezone ~ {NOT_BLANK});
-- The seed's chk_job_schedules_timezone_utc allowed only UTC; any IANA-shaped name now.
ALTER TABLE runledger_job_schedules ADD CONSTRAINT chk_job_schedules_timezone_valid
    CHECK (length(timezone) <= 64
           AND timezone ~ '^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$');
ALTER TABLE runledger_job_schedules ADD CONSTRAINT chk_job_schedules_counters
    CHECK (fire_count >= 0 AND skip_count >= 0 AND coalesced_count >= 0
           AND consecutive_failures >= 0);

-- The due claim: active, unpaused rows by cursor (the seed's name, one more predicate).
CREATE INDEX idx_job_schedules_next_fire ON runledger_job_schedules (next_fire_at)
    WHERE is_active AND paused_at IS NULL;
CREATE INDEX idx_job_schedules_job_type ON runledger_job_schedules (job_type);
CREATE INDEX idx_job_schedules_organization ON runledger_job_schedules (organization_id, name)
    WHERE organization_id IS NOT NULL;
-- One fire per schedule and scheduled_for; manual runs ("run now") are extra and exempt.
CREATE UNIQUE INDEX uq_schedule_fires_schedule_scheduled_for
    ON runledger_schedule_fires (schedule_id, scheduled_for) WHERE kind <> 'manual';
CREATE INDEX idx_schedule_fires_schedule_created
    ON runledger_schedule_fires (schedule_id, created_at);
CREATE INDEX idx_schedule_fires_created ON runledger_schedule_fires (created_at);
-- Deleting a job sets its fire's job_id to NULL: that lookup needs an index.
CREATE INDEX idx_schedule_fires_job ON runledger_schedule_fires (job_id)
    WHERE job_id IS NOT NULL;

CREATE TRIGGER trg_job_schedules_set_updated_at BEFORE UPDATE ON runledger_job_schedules
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
CREATE TRIGGER trg_schedule_fires_set_updated_at BEFORE UPDATE ON runledger_schedule_fires
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();

"""

# The seed's guard (reference 1.4), without formatted parts.
DEFINITION_GUARD = """
-- The seed's guard (reference 1.4): a job definition an active schedule uses cannot be
-- disabled. A schedule write share-locks the definition row it checks, and this trigger runs
-- under the disable's row lock, so neither can slip past the other.
CREATE FUNCTION runledger_guard_definition_disable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runledger_job_schedules
               WHERE job_type = NEW.job_type AND is_active AND paused_at IS NULL) THEN
        RAISE EXCEPTION 'job definition has an active schedule'
            USING ERRCODE = '23514',
                  CONSTRAINT = 'chk_job_definitions_no_active_schedule',
                  TABLE = 'runledger_job_definitions';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER trg_job_definitions_guard_active_schedule
    BEFORE UPDATE OF is_enabled ON runledger_job_definitions
    FOR EACH ROW WHEN (OLD.is_enabled AND NOT NEW.is_enabled)
    EXECUTE FUNCTION runledger_guard_definition_disable();
"""

DATABASE_OBJECTS_REVERSE = """
DROP TRIGGER trg_job_definitions_guard_active_schedule ON runledger_job_definitions;
DROP FUNCTION runledger_guard_definition_disable();
DROP TRIGGER trg_schedule_fires_set_updated_at ON runledger_schedule_fires;
DROP TRIGGER trg_job_schedules_set_updated_at ON runledger_job_schedules;
DROP INDEX idx_schedule_fires_job;
DROP INDEX idx_schedule_fires_created;
DROP INDEX idx_schedule_fires_schedule_created;
DROP INDEX uq_schedule_fires_schedule_scheduled_for;
DROP INDEX idx_job_schedules_organization;
DROP INDEX idx_job_schedules_job_type;
DROP INDEX idx_job_schedules_next_fire;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT chk_job_schedules_counters;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT chk_job_schedules_timezone_valid;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT chk_job_schedules_timezone_not_blank;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT chk_job_schedules_cron_not_blank;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT chk_job_schedules_name_not_blank;
ALTER TABLE runledger_schedule_fires DROP CONSTRAINT fk_schedule_fires_job;
ALTER TABLE runledger_schedule_fires DROP CONSTRAINT fk_schedule_fires_schedule;
ALTER TABLE runledger_job_schedules DROP CONSTRAINT fk_job_schedules_job_type;
ALTER TABLE runledger_schedule_fires ALTER COLUMN id DROP DEFAULT;
ALTER TABLE runledger_job_schedules ALTER COLUMN id DROP DEFAULT;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0009_exactly_once"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobSchedule",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=runledger_django.uuid7.uuid7,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("name", models.TextField()),
                ("organization_id", models.UUIDField(blank=True, null=True)),
                (
                    "payload_template",
                    models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict),
                ),
                ("cron_expr", models.TextField(blank=True, null=True)),
                ("interval_seconds", models.IntegerField(blank=True, null=True)),
                ("timezone", models.TextField(db_default="UTC", default="UTC")),
                ("is_active", models.BooleanField(db_default=True, default=True)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("next_fire_at", models.DateTimeField()),
                ("next_scheduled_for", models.DateTimeField()),
                ("last_fired_at", models.DateTimeField(blank=True, null=True)),
                ("last_scheduled_for", models.DateTimeField(blank=True, null=True)),
                ("last_job_id", models.UUIDField(blank=True, null=True)),
                ("max_jitter_seconds", models.IntegerField(db_default=0, default=0)),
                ("priority", models.IntegerField(blank=True, null=True)),
                (
                    "catch_up",
                    models.TextField(
                        choices=[("latest", "Latest"), ("skip", "Skip"), ("all", "All")],
                        db_default="latest",
                        default="latest",
                    ),
                ),
                ("catch_up_grace_seconds", models.IntegerField(db_default=60, default=60)),
                ("catch_up_limit", models.IntegerField(db_default=100, default=100)),
                (
                    "overlap",
                    models.TextField(
                        choices=[("allow", "Allow"), ("skip", "Skip"), ("serialize", "Serialize")],
                        db_default="allow",
                        default="allow",
                    ),
                ),
                ("declared", models.BooleanField(db_default=False, default=False)),
                ("fire_count", models.BigIntegerField(db_default=0, default=0)),
                ("skip_count", models.BigIntegerField(db_default=0, default=0)),
                ("coalesced_count", models.BigIntegerField(db_default=0, default=0)),
                ("consecutive_failures", models.IntegerField(db_default=0, default=0)),
                ("last_error_code", models.TextField(blank=True, null=True)),
                ("last_failed_at", models.DateTimeField(blank=True, null=True)),
                ("created_by_user_id", models.UUIDField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "job_type",
                    models.ForeignKey(
                        db_column="job_type",
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="schedules",
                        to="runledger.jobdefinition",
                    ),
                ),
            ],
            options={
                "db_table": "runledger_job_schedules",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="ScheduleFire",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=runledger_django.uuid7.uuid7,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("scheduled_for", models.DateTimeField()),
                (
                    "kind",
                    models.TextField(
                        choices=[
                            ("scheduled", "Scheduled"),
                            ("backfill", "Backfill"),
                            ("manual", "Manual"),
                        ],
                        db_default="scheduled",
                        default="scheduled",
                    ),
                ),
                (
                    "outcome",
                    models.TextField(
                        choices=[
                            ("enqueued", "Enqueued"),
                            ("skipped_overlap", "Skipped Overlap"),
                            ("skipped_late", "Skipped Late"),
                            ("failed", "Failed"),
                        ]
                    ),
                ),
                ("attempts", models.IntegerField(db_default=1, default=1)),
                ("error_code", models.TextField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="schedule_fires",
                        to="runledger.job",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="fires",
                        to="runledger.jobschedule",
                    ),
                ),
            ],
            options={
                "db_table": "runledger_schedule_fires",
                "ordering": ["-scheduled_for"],
            },
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.UniqueConstraint(fields=("name",), name="uq_job_schedules_name"),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_jitter_seconds__gte", 0)),
                name="chk_job_schedules_jitter_nonnegative",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_jitter_seconds__lte", 86400)),
                name="chk_job_schedules_jitter_max",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("cron_expr__isnull", False), ("interval_seconds__isnull", True)),
                    models.Q(("cron_expr__isnull", True), ("interval_seconds__isnull", False)),
                    _connector="OR",
                ),
                name="chk_job_schedules_cron_or_interval",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("interval_seconds__isnull", True), ("interval_seconds__gt", 0), _connector="OR"
                ),
                name="chk_job_schedules_interval_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("catch_up__in", ["latest", "skip", "all"])),
                name="chk_job_schedules_catch_up",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("overlap__in", ["allow", "skip", "serialize"])),
                name="chk_job_schedules_overlap",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("catch_up_grace_seconds__gt", 0)),
                name="chk_job_schedules_grace_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobschedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("catch_up_limit__gte", 1), ("catch_up_limit__lte", 10000)),
                name="chk_job_schedules_catch_up_limit",
            ),
        ),
        migrations.AddConstraint(
            model_name="schedulefire",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["scheduled", "backfill", "manual"])),
                name="chk_schedule_fires_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="schedulefire",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("outcome__in", ["enqueued", "skipped_overlap", "skipped_late", "failed"])
                ),
                name="chk_schedule_fires_outcome",
            ),
        ),
        migrations.AddConstraint(
            model_name="schedulefire",
            constraint=models.CheckConstraint(
                condition=models.Q(("outcome", "enqueued"), ("job__isnull", True), _connector="OR"),
                name="chk_schedule_fires_job_only_when_enqueued",
            ),
        ),
        migrations.RunSQL(DATABASE_OBJECTS + DEFINITION_GUARD, DATABASE_OBJECTS_REVERSE),
    ]

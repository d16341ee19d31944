"""Workflows (issue 19): runs, steps, edges, appends, active keys and recoveries, and the
database objects the ORM cannot express: UUIDv7 defaults, foreign keys with database actions
(an edge's ends are composite (run, step) keys, so an edge cannot leave its run), the blank
CHECKs, the secondary indexes and the updated_at triggers. The job row gains only a nullable
``workflow_step_id``. Frozen history: never import application code here."""

import django.db.models.deletion
import django.db.models.expressions
from django.db import migrations, models

import runledger_django.uuid7

# As in 0002: the Unicode White_Space set spelled out, equal to the Python validation.
NOT_BLANK = r"U&'[^\0009-\000D\0020\0085\00A0\1680\2000-\200A\2028\2029\202F\205F\3000]'"

DATABASE_OBJECTS = f"""
ALTER TABLE runledger_workflow_runs ALTER COLUMN id SET DEFAULT runledger_uuidv7();
ALTER TABLE runledger_workflow_steps ALTER COLUMN id SET DEFAULT runledger_uuidv7();

ALTER TABLE runledger_workflow_steps ADD CONSTRAINT fk_workflow_steps_run
    FOREIGN KEY (workflow_run_id) REFERENCES runledger_workflow_runs (id) ON DELETE CASCADE;
-- Job retention may delete a finished step's job; the step keeps its outcome and output.
ALTER TABLE runledger_workflow_steps ADD CONSTRAINT fk_workflow_steps_job
    FOREIGN KEY (job_id) REFERENCES runledger_job_queue (id) ON DELETE SET NULL;
ALTER TABLE runledger_workflow_steps ADD CONSTRAINT uq_workflow_steps_run_id
    UNIQUE (workflow_run_id, id);
ALTER TABLE runledger_job_queue ADD CONSTRAINT fk_job_queue_workflow_step
    FOREIGN KEY (workflow_step_id) REFERENCES runledger_workflow_steps (id) ON DELETE SET NULL;
-- The FK's lookup when steps go; plain jobs (NULL) are not in it.
CREATE INDEX idx_job_queue_workflow_step ON runledger_job_queue (workflow_step_id)
    WHERE workflow_step_id IS NOT NULL;

-- The edge's run needs no key of its own: both composite keys name it, through its steps.
ALTER TABLE runledger_workflow_step_dependencies ADD CONSTRAINT fk_workflow_edges_prerequisite
    FOREIGN KEY (workflow_run_id, prerequisite_step_id)
    REFERENCES runledger_workflow_steps (workflow_run_id, id) ON DELETE CASCADE;
ALTER TABLE runledger_workflow_step_dependencies ADD CONSTRAINT fk_workflow_edges_dependent
    FOREIGN KEY (workflow_run_id, dependent_step_id)
    REFERENCES runledger_workflow_steps (workflow_run_id, id) ON DELETE CASCADE;
CREATE INDEX idx_workflow_edges_dependent
    ON runledger_workflow_step_dependencies (dependent_step_id);

ALTER TABLE runledger_workflow_run_mutations ADD CONSTRAINT fk_workflow_mutations_run
    FOREIGN KEY (workflow_run_id) REFERENCES runledger_workflow_runs (id) ON DELETE CASCADE;
ALTER TABLE runledger_workflow_active_claims ADD CONSTRAINT fk_workflow_active_claims_run
    FOREIGN KEY (workflow_run_id) REFERENCES runledger_workflow_runs (id) ON DELETE CASCADE;
-- Deleting only a recovery run is refused while its source exists (NO ACTION, checked at the
-- end of the statement); deleting the source removes the lineage, so both together work.
ALTER TABLE runledger_workflow_recoveries ADD CONSTRAINT fk_workflow_recoveries_recovery_run
    FOREIGN KEY (recovery_run_id) REFERENCES runledger_workflow_runs (id);
ALTER TABLE runledger_workflow_recoveries ADD CONSTRAINT fk_workflow_recoveries_source_run
    FOREIGN KEY (source_run_id) REFERENCES runledger_workflow_runs (id) ON DELETE CASCADE;
ALTER TABLE runledger_workflow_recoveries ADD CONSTRAINT fk_workflow_recoveries_source_step
    FOREIGN KEY (source_step_id) REFERENCES runledger_workflow_steps (id) ON DELETE SET NULL;

ALTER TABLE runledger_workflow_runs ADD CONSTRAINT chk_workflow_runs_type_not_blank
    CHECK (workflow_type ~ {NOT_BLANK});
ALTER TABLE runledger_workflow_runs ADD CONSTRAINT chk_workflow_runs_idempotency_not_blank
    CHECK (idempotency_key IS NULL OR idempotency_key ~ {NOT_BLANK});
ALTER TABLE runledger_workflow_runs ADD CONSTRAINT chk_workflow_runs_active_key_not_blank
    CHECK (active_key IS NULL OR (active_key ~ {NOT_BLANK} AND octet_length(active_key) <= 512));
ALTER TABLE runledger_workflow_runs ADD CONSTRAINT chk_workflow_runs_finished
    CHECK ((status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED'))
           = (finished_at IS NOT NULL));
ALTER TABLE runledger_workflow_steps ADD CONSTRAINT chk_workflow_steps_key_not_blank
    CHECK (step_key ~ {NOT_BLANK});
ALTER TABLE runledger_workflow_steps ADD CONSTRAINT chk_workflow_steps_resource_key
    CHECK (execution_resource_key IS NULL
           OR (execution_resource_key ~ {NOT_BLANK}
               AND octet_length(execution_resource_key) <= 512));
ALTER TABLE runledger_workflow_run_mutations ADD CONSTRAINT chk_workflow_mutations_key_not_blank
    CHECK (mutation_key ~ {NOT_BLANK});
ALTER TABLE runledger_workflow_active_claims ADD CONSTRAINT chk_workflow_active_claims_key
    CHECK (active_key ~ {NOT_BLANK} AND octet_length(active_key) <= 512);
ALTER TABLE runledger_workflow_recoveries ADD CONSTRAINT chk_workflow_recoveries_request_key
    CHECK (request_key ~ {NOT_BLANK} AND octet_length(request_key) <= 512);
ALTER TABLE runledger_workflow_recoveries ADD CONSTRAINT chk_workflow_recoveries_reason
    CHECK (reason ~ {NOT_BLANK});

-- The admin's changelist and the scoped reads: newest first, by status, type or tenant.
CREATE INDEX idx_workflow_runs_created ON runledger_workflow_runs (created_at DESC, id DESC);
CREATE INDEX idx_workflow_runs_status ON runledger_workflow_runs (status, created_at DESC);
CREATE INDEX idx_workflow_runs_type ON runledger_workflow_runs (workflow_type, created_at DESC);
CREATE INDEX idx_workflow_runs_organization
    ON runledger_workflow_runs (organization_id, created_at DESC)
    WHERE organization_id IS NOT NULL;
CREATE INDEX idx_workflow_recoveries_source ON runledger_workflow_recoveries (source_run_id);

CREATE TRIGGER trg_workflow_runs_set_updated_at BEFORE UPDATE ON runledger_workflow_runs
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
CREATE TRIGGER trg_workflow_steps_set_updated_at BEFORE UPDATE ON runledger_workflow_steps
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
"""

DATABASE_OBJECTS_REVERSE = """
DROP TRIGGER IF EXISTS trg_workflow_steps_set_updated_at ON runledger_workflow_steps;
DROP TRIGGER IF EXISTS trg_workflow_runs_set_updated_at ON runledger_workflow_runs;
ALTER TABLE runledger_job_queue DROP CONSTRAINT IF EXISTS fk_job_queue_workflow_step;
DROP INDEX IF EXISTS idx_job_queue_workflow_step;
ALTER TABLE runledger_workflow_recoveries
    DROP CONSTRAINT IF EXISTS fk_workflow_recoveries_recovery_run,
    DROP CONSTRAINT IF EXISTS fk_workflow_recoveries_source_run,
    DROP CONSTRAINT IF EXISTS fk_workflow_recoveries_source_step;
ALTER TABLE runledger_workflow_step_dependencies
    DROP CONSTRAINT IF EXISTS fk_workflow_edges_prerequisite,
    DROP CONSTRAINT IF EXISTS fk_workflow_edges_dependent;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0010_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowRun",
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
                ("workflow_type", models.TextField()),
                ("organization_id", models.UUIDField(blank=True, null=True)),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("RUNNING", "Running"),
                            ("WAITING_FOR_EXTERNAL", "Waiting For External"),
                            ("SUCCEEDED", "Succeeded"),
                            ("COMPLETED_WITH_ERRORS", "Completed With Errors"),
                            ("CANCELED", "Canceled"),
                        ],
                        db_default="RUNNING",
                        default="RUNNING",
                    ),
                ),
                ("idempotency_key", models.TextField(blank=True, null=True)),
                ("active_key", models.TextField(blank=True, null=True)),
                (
                    "metadata",
                    models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict),
                ),
                ("enqueue_request", models.JSONField(blank=True, null=True)),
                ("fail_fast", models.BooleanField(db_default=False, default=False)),
                ("result_step_key", models.TextField(blank=True, null=True)),
                ("result", models.JSONField(blank=True, null=True)),
                ("steps_total", models.IntegerField(db_default=0, default=0)),
                ("steps_waiting", models.IntegerField(db_default=0, default=0)),
                ("steps_succeeded", models.IntegerField(db_default=0, default=0)),
                ("steps_failed", models.IntegerField(db_default=0, default=0)),
                ("steps_canceled", models.IntegerField(db_default=0, default=0)),
                (
                    "started_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField())
                    ),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
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
            ],
            options={
                "db_table": "runledger_workflow_runs",
                "permissions": [
                    ("cancel_workflowrun", "Can cancel a workflow run"),
                    ("retry_workflowrun", "Can retry a workflow run"),
                ],
            },
        ),
        migrations.CreateModel(
            name="WorkflowRunMutation",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("mutation_key", models.TextField()),
                (
                    "mutation_kind",
                    models.TextField(db_default="APPEND_STEPS", default="APPEND_STEPS"),
                ),
                (
                    "metadata",
                    models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict),
                ),
                ("request", models.JSONField()),
                (
                    "step_ids",
                    models.JSONField(db_default=models.Value([], models.JSONField()), default=list),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
            ],
            options={
                "db_table": "runledger_workflow_run_mutations",
            },
        ),
        migrations.CreateModel(
            name="WorkflowStep",
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
                ("step_key", models.TextField()),
                (
                    "execution_kind",
                    models.TextField(choices=[("JOB", "Job"), ("EXTERNAL", "External")]),
                ),
                ("job_type", models.TextField(blank=True, null=True)),
                ("organization_id", models.UUIDField(blank=True, null=True)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("priority", models.IntegerField(blank=True, null=True)),
                ("max_attempts", models.IntegerField(blank=True, null=True)),
                ("timeout_seconds", models.IntegerField(blank=True, null=True)),
                ("stage", models.TextField(blank=True, null=True)),
                ("execution_resource_key", models.TextField(blank=True, null=True)),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("BLOCKED", "Blocked"),
                            ("ENQUEUED", "Enqueued"),
                            ("WAITING_FOR_EXTERNAL", "Waiting For External"),
                            ("SUCCEEDED", "Succeeded"),
                            ("FAILED", "Failed"),
                            ("CANCELED", "Canceled"),
                        ],
                        db_default="BLOCKED",
                        default="BLOCKED",
                    ),
                ),
                ("released_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("dependency_count_total", models.IntegerField(db_default=0, default=0)),
                ("dependency_count_pending", models.IntegerField(db_default=0, default=0)),
                ("dependency_count_unsatisfied", models.IntegerField(db_default=0, default=0)),
                ("status_reason", models.TextField(blank=True, null=True)),
                ("last_error_code", models.TextField(blank=True, null=True)),
                ("last_error_message", models.TextField(blank=True, null=True)),
                ("output", models.JSONField(blank=True, null=True)),
                (
                    "allow_handler_continuation",
                    models.BooleanField(db_default=False, default=False),
                ),
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
            ],
            options={
                "db_table": "runledger_workflow_steps",
                "ordering": ["workflow_run_id", "id"],
            },
        ),
        migrations.CreateModel(
            name="WorkflowStepDependency",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "release_mode",
                    models.TextField(
                        choices=[("ON_SUCCESS", "On Success"), ("ON_TERMINAL", "On Terminal")],
                        db_default="ON_SUCCESS",
                        default="ON_SUCCESS",
                    ),
                ),
            ],
            options={
                "db_table": "runledger_workflow_step_dependencies",
            },
        ),
        migrations.AddField(
            model_name="job",
            name="workflow_step_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="WorkflowActiveClaim",
            fields=[
                (
                    "workflow_run",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="active_claim",
                        serialize=False,
                        to="runledger.workflowrun",
                    ),
                ),
                ("scope", models.TextField()),
                ("active_key", models.TextField()),
                ("release_pending", models.BooleanField(db_default=False, default=False)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
            ],
            options={
                "db_table": "runledger_workflow_active_claims",
            },
        ),
        migrations.CreateModel(
            name="WorkflowRecovery",
            fields=[
                (
                    "recovery_run",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="recovered_from",
                        serialize=False,
                        to="runledger.workflowrun",
                    ),
                ),
                ("request_key", models.TextField()),
                (
                    "mode",
                    models.TextField(
                        choices=[("FULL_REPLAY", "Full Replay"), ("RESUME", "Resume")]
                    ),
                ),
                ("reason", models.TextField()),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
            ],
            options={
                "db_table": "runledger_workflow_recoveries",
            },
        ),
        migrations.AddConstraint(
            model_name="workflowrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("idempotency_key__isnull", False), ("organization_id__isnull", False)
                ),
                fields=("workflow_type", "organization_id", "idempotency_key"),
                name="uq_workflow_runs_org_idempotency",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("idempotency_key__isnull", False), ("organization_id__isnull", True)
                ),
                fields=("workflow_type", "idempotency_key"),
                name="uq_workflow_runs_global_idempotency",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "RUNNING",
                            "WAITING_FOR_EXTERNAL",
                            "SUCCEEDED",
                            "COMPLETED_WITH_ERRORS",
                            "CANCELED",
                        ],
                    )
                ),
                name="chk_workflow_runs_status",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("idempotency_key__isnull", True),
                    ("enqueue_request__isnull", False),
                    _connector="OR",
                ),
                name="chk_workflow_runs_idempotency_request",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("steps_waiting__gte", 0),
                    ("steps_succeeded__gte", 0),
                    ("steps_failed__gte", 0),
                    ("steps_canceled__gte", 0),
                    (
                        "steps_total__gte",
                        django.db.models.expressions.CombinedExpression(
                            django.db.models.expressions.CombinedExpression(
                                django.db.models.expressions.CombinedExpression(
                                    models.F("steps_waiting"), "+", models.F("steps_succeeded")
                                ),
                                "+",
                                models.F("steps_failed"),
                            ),
                            "+",
                            models.F("steps_canceled"),
                        ),
                    ),
                ),
                name="chk_workflow_runs_counters",
            ),
        ),
        migrations.AddField(
            model_name="workflowrunmutation",
            name="workflow_run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="mutations",
                to="runledger.workflowrun",
            ),
        ),
        migrations.AddField(
            model_name="workflowstep",
            name="job",
            field=models.OneToOneField(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="runledger.job",
            ),
        ),
        migrations.AddField(
            model_name="workflowstep",
            name="workflow_run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="steps",
                to="runledger.workflowrun",
            ),
        ),
        migrations.AddField(
            model_name="workflowstepdependency",
            name="dependent_step",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="prerequisite_edges",
                to="runledger.workflowstep",
            ),
        ),
        migrations.AddField(
            model_name="workflowstepdependency",
            name="prerequisite_step",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="dependent_edges",
                to="runledger.workflowstep",
            ),
        ),
        migrations.AddField(
            model_name="workflowstepdependency",
            name="workflow_run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="edges",
                to="runledger.workflowrun",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowactiveclaim",
            constraint=models.UniqueConstraint(
                fields=("scope", "active_key"), name="uq_workflow_active_claims_scope_key"
            ),
        ),
        migrations.AddField(
            model_name="workflowrecovery",
            name="source_run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="recoveries",
                to="runledger.workflowrun",
            ),
        ),
        migrations.AddField(
            model_name="workflowrecovery",
            name="source_step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="runledger.workflowstep",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrunmutation",
            constraint=models.UniqueConstraint(
                fields=("workflow_run", "mutation_key"), name="uq_workflow_run_mutations_key"
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrunmutation",
            constraint=models.CheckConstraint(
                condition=models.Q(("mutation_kind", "APPEND_STEPS")),
                name="chk_workflow_run_mutations_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.UniqueConstraint(
                fields=("workflow_run", "step_key"), name="uq_workflow_steps_run_step_key"
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "BLOCKED",
                            "ENQUEUED",
                            "WAITING_FOR_EXTERNAL",
                            "SUCCEEDED",
                            "FAILED",
                            "CANCELED",
                        ],
                    )
                ),
                name="chk_workflow_steps_status",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.CheckConstraint(
                condition=models.Q(("execution_kind__in", ["JOB", "EXTERNAL"])),
                name="chk_workflow_steps_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("execution_kind", "JOB"),
                        ("job_type__isnull", False),
                        ("max_attempts__isnull", False),
                        ("priority__isnull", False),
                        ("stage__isnull", False),
                        ("timeout_seconds__isnull", False),
                    ),
                    models.Q(
                        ("allow_handler_continuation", False),
                        ("execution_kind", "EXTERNAL"),
                        ("job__isnull", True),
                        ("job_type__isnull", True),
                        ("max_attempts__isnull", True),
                        ("priority__isnull", True),
                        ("stage__isnull", True),
                        ("timeout_seconds__isnull", True),
                    ),
                    _connector="OR",
                ),
                name="chk_workflow_steps_shape",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("dependency_count_pending__gte", 0),
                    ("dependency_count_pending__lte", models.F("dependency_count_total")),
                    ("dependency_count_unsatisfied__gte", 0),
                    ("dependency_count_unsatisfied__lte", models.F("dependency_count_total")),
                ),
                name="chk_workflow_steps_counters",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstepdependency",
            constraint=models.UniqueConstraint(
                fields=("prerequisite_step", "dependent_step"),
                name="uq_workflow_step_dependencies_edge",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstepdependency",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("prerequisite_step", models.F("dependent_step")), _negated=True
                ),
                name="chk_workflow_step_dependencies_no_self",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstepdependency",
            constraint=models.CheckConstraint(
                condition=models.Q(("release_mode__in", ["ON_SUCCESS", "ON_TERMINAL"])),
                name="chk_workflow_step_dependencies_mode",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrecovery",
            constraint=models.UniqueConstraint(
                fields=("source_run", "request_key"), name="uq_workflow_recoveries_request_key"
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowrecovery",
            constraint=models.CheckConstraint(
                condition=models.Q(("mode__in", ["FULL_REPLAY", "RESUME"])),
                name="chk_workflow_recoveries_mode",
            ),
        ),
        migrations.RunSQL(DATABASE_OBJECTS, DATABASE_OBJECTS_REVERSE),
    ]

"""Workflow intents (issue 19, checklist item 10): a run requested inside the caller's
transaction and promoted later into exactly one keyed run, once every job type it names has
an enabled definition. A new small table: nothing on the queue changes. Frozen history: never
import application code here."""

from django.db import migrations, models

import runledger_django.uuid7

DATABASE_OBJECTS = """
ALTER TABLE runledger_workflow_intents ALTER COLUMN id SET DEFAULT runledger_uuidv7();
CREATE TRIGGER trg_workflow_intents_set_updated_at BEFORE UPDATE ON runledger_workflow_intents
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
"""
DATABASE_OBJECTS_REVERSE = """
DROP TRIGGER IF EXISTS trg_workflow_intents_set_updated_at ON runledger_workflow_intents;
ALTER TABLE runledger_workflow_intents ALTER COLUMN id DROP DEFAULT;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0017_limits_gcra"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowIntent",
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
                ("idempotency_key", models.TextField()),
                ("enqueue_request", models.JSONField()),
                (
                    "job_types",
                    models.JSONField(db_default=models.Value([], models.JSONField()), default=list),
                ),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("PENDING", "Pending"),
                            ("PROMOTED", "Promoted"),
                            ("CONFLICTED", "Conflicted"),
                        ],
                        db_default="PENDING",
                        default="PENDING",
                    ),
                ),
                ("workflow_run_id", models.UUIDField(blank=True, null=True)),
                ("promotion_attempts", models.IntegerField(db_default=0, default=0)),
                (
                    "next_promotion_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField())
                    ),
                ),
                ("last_attempted_at", models.DateTimeField(blank=True, null=True)),
                ("promoted_at", models.DateTimeField(blank=True, null=True)),
                ("conflicted_at", models.DateTimeField(blank=True, null=True)),
                ("last_error_code", models.TextField(blank=True, null=True)),
                ("last_error_message", models.TextField(blank=True, null=True)),
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
                "db_table": "runledger_workflow_intents",
                "indexes": [
                    models.Index(
                        condition=models.Q(("status", "PENDING")),
                        fields=["next_promotion_at", "created_at", "id"],
                        name="idx_workflow_intents_pending",
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("organization_id__isnull", False)),
                        fields=("workflow_type", "organization_id", "idempotency_key"),
                        name="uq_workflow_intents_org_idempotency",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("organization_id__isnull", True)),
                        fields=("workflow_type", "idempotency_key"),
                        name="uq_workflow_intents_global_idempotency",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("status__in", ["PENDING", "PROMOTED", "CONFLICTED"])),
                        name="chk_workflow_intents_status",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("status", "PROMOTED"), ("workflow_run_id__isnull", False)),
                            models.Q(("status", "PROMOTED"), _negated=True),
                            _connector="OR",
                        ),
                        name="chk_workflow_intents_promoted_run",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("promotion_attempts__gte", 0)),
                        name="chk_workflow_intents_attempts",
                    ),
                ],
            },
        ),
        migrations.RunSQL(DATABASE_OBJECTS, DATABASE_OBJECTS_REVERSE),
    ]

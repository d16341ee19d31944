"""The benchmark baseline table."""

from django.db import migrations, models
from django.db.models.functions import Now

import runledger_django.uuid7


class Migration(migrations.Migration):
    initial = True

    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="PlainIntent",
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
                ("job_type", models.TextField()),
                ("organization_id", models.UUIDField(blank=True, null=True)),
                ("payload", models.JSONField()),
                ("priority", models.IntegerField(blank=True, null=True)),
                ("max_attempts", models.IntegerField(blank=True, null=True)),
                ("timeout_seconds", models.IntegerField(blank=True, null=True)),
                ("next_run_at", models.DateTimeField(blank=True, null=True)),
                ("idempotency_key", models.TextField()),
                ("stage", models.TextField(default="queued")),
                ("enqueue_request_version", models.SmallIntegerField(default=1)),
                ("enqueue_request", models.JSONField()),
                ("execution_resource_key", models.TextField(blank=True, null=True)),
                ("promotion_attempts", models.IntegerField(default=0)),
                ("next_promotion_at", models.DateTimeField(db_default=Now())),
                ("last_attempted_at", models.DateTimeField(blank=True, null=True)),
                ("status", models.TextField(default="PENDING")),
                ("promoted_job_id", models.UUIDField(blank=True, null=True)),
                ("promoted_at", models.DateTimeField(blank=True, null=True)),
                ("conflicted_at", models.DateTimeField(blank=True, null=True)),
                ("last_error_code", models.TextField(blank=True, null=True)),
                ("last_error_message", models.TextField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=Now())),
                ("updated_at", models.DateTimeField(db_default=Now())),
            ],
            options={"db_table": "bench_plain_intent"},
        ),
    ]

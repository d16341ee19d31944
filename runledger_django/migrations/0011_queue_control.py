"""Queue control (issue 21): the pause and the per-type limits on the job definition, and the
rate limit's log table. Nullable columns without defaults and CHECKs on the small definitions
table: instant on a busy queue. Counting a type's LEASED jobs walks the existing
idx_job_queue_type_status_created (job_type, status, ...): no new index on the queue. The log
column is an array, which the ORM cannot declare without django.contrib.postgres: RunSQL.
Frozen history: never import application code here."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0010_schedules"),
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
    ]

"""The admin dashboard (issue 21): the queue samples its depth and age charts read, their
indexes, and the dashboard's entry on the admin index (a proxy, no table). Frozen history:
never import application code here."""

from django.db import migrations, models

DATABASE_OBJECTS = """
ALTER TABLE runledger_queue_samples ADD CONSTRAINT chk_queue_samples_counts
    CHECK (due_count >= 0 AND scheduled_count >= 0 AND leased_count >= 0
           AND expired_lease_count >= 0 AND oldest_due_age_seconds >= 0);
-- One sample per job type and minute, and one total (job_type NULL) per minute: a second
-- sampler in the same minute inserts nothing. Each serves the charts' time-bounded reads as
-- an index-only scan (the counts are included), whatever the physical order of the rows.
CREATE UNIQUE INDEX uq_queue_samples_type_minute ON runledger_queue_samples
    (job_type, sampled_at)
    INCLUDE (due_count, scheduled_count, leased_count, oldest_due_age_seconds)
    WHERE job_type IS NOT NULL;
CREATE UNIQUE INDEX uq_queue_samples_total_minute ON runledger_queue_samples (sampled_at)
    INCLUDE (due_count, scheduled_count, leased_count, oldest_due_age_seconds)
    WHERE job_type IS NULL;
-- Retention removes the oldest samples first, whatever their type.
CREATE INDEX idx_queue_samples_sampled_at ON runledger_queue_samples (sampled_at, id);
"""

DROP_DATABASE_OBJECTS = """
DROP INDEX IF EXISTS idx_queue_samples_sampled_at;
DROP INDEX IF EXISTS uq_queue_samples_total_minute;
DROP INDEX IF EXISTS uq_queue_samples_type_minute;
ALTER TABLE runledger_queue_samples DROP CONSTRAINT IF EXISTS chk_queue_samples_counts;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0011_worker_registry"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueSample",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("sampled_at", models.DateTimeField()),
                ("job_type", models.TextField(blank=True, null=True)),
                ("due_count", models.BigIntegerField()),
                ("scheduled_count", models.BigIntegerField()),
                ("leased_count", models.BigIntegerField()),
                ("expired_lease_count", models.BigIntegerField()),
                ("oldest_due_age_seconds", models.FloatField()),
            ],
            options={
                "verbose_name": "queue sample",
                "verbose_name_plural": "queue samples",
                "db_table": "runledger_queue_samples",
                "default_permissions": (),
            },
        ),
        migrations.RunSQL(DATABASE_OBJECTS, reverse_sql=DROP_DATABASE_OBJECTS),
        migrations.CreateModel(
            name="DashboardPage",
            fields=[],
            options={
                "verbose_name": "dashboard",
                "verbose_name_plural": "dashboard",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("runledger.job",),
        ),
    ]

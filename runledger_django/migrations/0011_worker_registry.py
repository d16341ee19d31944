"""The worker registry (issue 21): ``runledger_workers``, one row per running worker, beaten by
its supervisor loop and deleted on a clean exit. The table stays as small as the fleet (stale
rows are pruned by the workers' beats), so it needs no index beyond its primary key. Frozen
history: never import application code here."""

from django.db import migrations, models

DATABASE_OBJECTS = """
ALTER TABLE runledger_workers ADD CONSTRAINT chk_workers_job_types_array
    CHECK (jsonb_typeof(job_types) = 'array');
"""

DROP_DATABASE_OBJECTS = """
ALTER TABLE runledger_workers DROP CONSTRAINT chk_workers_job_types_array;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0010_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerRecord",
            fields=[
                ("worker_id", models.TextField(primary_key=True, serialize=False)),
                ("hostname", models.TextField()),
                ("pid", models.IntegerField()),
                ("version", models.TextField()),
                ("job_types", models.JSONField(default=list)),
                ("concurrency", models.IntegerField()),
                ("heartbeat_seconds", models.FloatField()),
                (
                    "started_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField()),
                        editable=False,
                    ),
                ),
                (
                    "last_heartbeat_at",
                    models.DateTimeField(
                        db_default=models.Func(function="now", output_field=models.DateTimeField())
                    ),
                ),
            ],
            options={
                "verbose_name": "worker",
                "db_table": "runledger_workers",
                "ordering": ["worker_id"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("concurrency__gt", 0)),
                        name="chk_workers_concurrency_positive",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("heartbeat_seconds__gt", 0)),
                        name="chk_workers_heartbeat_positive",
                    ),
                ],
            },
        ),
        migrations.RunSQL(DATABASE_OBJECTS, DROP_DATABASE_OBJECTS),
    ]

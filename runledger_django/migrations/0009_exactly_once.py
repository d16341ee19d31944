"""Exactly-once completion, continuation and replay: the CONTINUED attempt outcome, the replay
permission, and the replay lineage table with its foreign keys (reference 5: the source's
lineage goes with it; a replay cannot be deleted alone while its source exists)."""

import django.db.models.deletion
from django.db import migrations, models

REPLAY_FOREIGN_KEYS = """
ALTER TABLE runledger_job_replays ADD CONSTRAINT fk_job_replays_source_job
    FOREIGN KEY (source_job_id) REFERENCES runledger_job_queue (id) ON DELETE CASCADE;
ALTER TABLE runledger_job_replays ADD CONSTRAINT fk_job_replays_replay_job
    FOREIGN KEY (replay_job_id) REFERENCES runledger_job_queue (id) ON DELETE NO ACTION;
"""

REPLAY_FOREIGN_KEYS_REVERSE = """
ALTER TABLE runledger_job_replays DROP CONSTRAINT fk_job_replays_replay_job;
ALTER TABLE runledger_job_replays DROP CONSTRAINT fk_job_replays_source_job;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runledger", "0008_record_intent_function"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobReplay",
            fields=[
                (
                    "replay_job",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="replayed_from",
                        serialize=False,
                        to="runledger.job",
                    ),
                ),
                ("source_run_number", models.IntegerField()),
                ("request_key", models.TextField()),
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
                "db_table": "runledger_job_replays",
            },
        ),
        migrations.AlterModelOptions(
            name="job",
            options={
                "permissions": [
                    ("cancel_job", "Can cancel a pending or leased job"),
                    ("requeue_job", "Can requeue a dead-lettered or canceled job"),
                    ("replay_job", "Can replay a succeeded job as a new job"),
                ]
            },
        ),
        migrations.RemoveConstraint(
            model_name="jobattempt",
            name="chk_job_attempts_outcome",
        ),
        migrations.AlterField(
            model_name="jobattempt",
            name="outcome",
            field=models.TextField(
                blank=True,
                choices=[
                    ("SUCCEEDED", "Succeeded"),
                    ("RETRY_SCHEDULED", "Retry Scheduled"),
                    ("DEAD_LETTERED", "Dead Lettered"),
                    ("CANCELED", "Canceled"),
                    ("INTERRUPTED", "Interrupted"),
                    ("CONTINUED", "Continued"),
                ],
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="jobattempt",
            constraint=models.CheckConstraint(
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
                            "CONTINUED",
                        ],
                    ),
                    _connector="OR",
                ),
                name="chk_job_attempts_outcome",
            ),
        ),
        migrations.AddField(
            model_name="jobreplay",
            name="source_job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="replays",
                to="runledger.job",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobreplay",
            constraint=models.UniqueConstraint(
                fields=("source_job", "source_run_number", "request_key"),
                name="uq_job_replays_source_run_request_key",
            ),
        ),
        migrations.RunSQL(REPLAY_FOREIGN_KEYS, REPLAY_FOREIGN_KEYS_REVERSE),
    ]

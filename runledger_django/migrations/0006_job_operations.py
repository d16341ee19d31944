"""Operating the queue: the indexes behind job metrics and the admin's dead letters, the admin's
proxy entries (job metrics, dead letters) and the cancel and requeue permissions.

The indexes are built CONCURRENTLY, so upgrading a busy queue never blocks enqueues, claims or
completions while they build; that needs a non-atomic migration with one statement per
operation. If a build fails, PostgreSQL leaves an INVALID index behind: drop it and migrate
again. Frozen history: never import application code here.
"""

from django.db import migrations

# PENDING jobs per scope and type, due or scheduled: job_metrics reads them index-only. Only a
# PENDING row version enters it (an enqueue, a retry, a requeue); claims and completions write
# LEASED and finished versions, which it skips.
PENDING_METRICS = """
CREATE INDEX CONCURRENTLY idx_job_queue_pending_metrics ON runledger_job_queue
    (organization_id, job_type, next_run_at) WHERE status = 'PENDING'
"""

# One day of finished attempts per type, tenant and outcome, read index-only by job_metrics. A
# completion's update of its attempt row now writes index entries (it can no longer be HOT):
# the price of counting a day of attempts without touching the table.
ATTEMPT_METRICS = """
CREATE INDEX CONCURRENTLY idx_job_attempts_finished_metrics ON runledger_job_attempts
    (finished_at) INCLUDE (job_type, organization_id, outcome)
    WHERE outcome IN ('SUCCEEDED', 'RETRY_SCHEDULED', 'DEAD_LETTERED')
"""

# The admin's dead letters (and cancelled jobs), newest first: a few among millions of finished
# jobs, which the changelist would otherwise look for by walking the whole creation order (and
# count by scanning the table). Only a dead-lettering or a cancellation writes it.
DEAD_OR_CANCELED = """
CREATE INDEX CONCURRENTLY idx_job_queue_dead_or_canceled ON runledger_job_queue
    (status, created_at DESC, id DESC) WHERE status IN ('DEAD_LETTERED', 'CANCELED')
"""


def drop(name: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {name}"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runledger", "0005_intent_path_performance")]

    operations = [
        migrations.CreateModel(
            name="DeadLetter",
            fields=[],
            options={
                "verbose_name": "dead letter",
                "verbose_name_plural": "dead letters",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("runledger.job",),
        ),
        migrations.CreateModel(
            name="JobMetricsPage",
            fields=[],
            options={
                "verbose_name": "job metrics",
                "verbose_name_plural": "job metrics",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("runledger.job",),
        ),
        migrations.AlterModelOptions(
            name="job",
            options={
                "permissions": [
                    ("cancel_job", "Can cancel a pending or leased job"),
                    ("requeue_job", "Can requeue a dead-lettered or canceled job"),
                ]
            },
        ),
        migrations.RunSQL(PENDING_METRICS, drop("idx_job_queue_pending_metrics")),
        migrations.RunSQL(ATTEMPT_METRICS, drop("idx_job_attempts_finished_metrics")),
        migrations.RunSQL(DEAD_OR_CANCELED, drop("idx_job_queue_dead_or_canceled")),
    ]

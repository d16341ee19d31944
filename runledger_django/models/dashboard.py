"""The dashboard's queue samples: depth and oldest-due age per job type, once a minute.

The jobs table cannot tell how deep the queue was an hour ago (rows change state and are
pruned), so a sampler pass writes what it sees; the dashboard charts read these rows back.
The indexes (one sample per type and minute, one total per minute, the retention order) are
RunSQL in migration 0012, like every secondary index of the app.
"""

from __future__ import annotations

from django.db import models


class QueueSample(models.Model):
    """The live queue of one job type (or, with ``job_type`` NULL, of every type together) at
    the minute ``sampled_at``. Written only by ``services.dashboard.sample_queue``."""

    id = models.BigAutoField(primary_key=True)
    sampled_at = models.DateTimeField()
    job_type = models.TextField(null=True, blank=True)
    """NULL: the row sums every type (and holds the highest oldest-due age)."""
    due_count = models.BigIntegerField()
    scheduled_count = models.BigIntegerField()
    leased_count = models.BigIntegerField()
    expired_lease_count = models.BigIntegerField()
    oldest_due_age_seconds = models.FloatField()
    """How long the longest-waiting due job had waited; 0 when nothing was due."""

    class Meta:
        db_table = "runledger_queue_samples"
        verbose_name = "queue sample"
        verbose_name_plural = "queue samples"
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.job_type or 'all types'} at {self.sampled_at:%Y-%m-%d %H:%M}"

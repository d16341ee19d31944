"""The worker registry: one row per running ``runledger_worker`` process.

Each worker inserts its row at start, beats it from its supervisor loop every
``WORKER_HEARTBEAT_SECONDS`` and deletes it on a clean exit. A worker killed outright
(SIGKILL, a lost node) leaves its row behind: it reads as stale once it has missed
``STALE_BEATS`` beats of its own cadence, and the next beat of any worker deletes it once it
is older than ``WORKER_RETENTION_SECONDS``. Writes go through ``services.worker_registry``.
"""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import ExpressionWrapper, F, Q, Value
from django.db.models.functions import Now

from .columns import TRANSACTION_NOW

STALE_BEATS = 3
"""A row whose worker missed this many beats of its own cadence is stale, not live."""


class WorkerRecord(models.Model):
    """A worker process as it last reported itself."""

    worker_id = models.TextField(primary_key=True)
    """The id the worker leases jobs under (``host-pid-random``)."""
    hostname = models.TextField()
    pid = models.IntegerField()
    version = models.TextField()
    """The runledger_django version the worker runs (a deploy marker)."""
    job_types = models.JSONField(default=list)
    """A JSON list of job types (an ``ArrayField`` would make hosts install
    ``django.contrib.postgres``)."""
    concurrency = models.IntegerField()
    heartbeat_seconds = models.FloatField()
    """The worker's beat cadence: staleness is judged against the worker's own setting."""
    started_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    last_heartbeat_at = models.DateTimeField(db_default=TRANSACTION_NOW)

    class Meta:
        db_table = "runledger_workers"
        ordering = ["worker_id"]
        verbose_name = "worker"
        constraints = [
            models.CheckConstraint(
                condition=Q(concurrency__gt=0), name="chk_workers_concurrency_positive"
            ),
            models.CheckConstraint(
                condition=Q(heartbeat_seconds__gt=0), name="chk_workers_heartbeat_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.worker_id


def live_condition() -> Q:
    """Rows whose worker beat within ``STALE_BEATS`` of its own cadence, by database time."""
    window = ExpressionWrapper(
        F("heartbeat_seconds") * Value(dt.timedelta(seconds=STALE_BEATS)),
        output_field=models.DurationField(),
    )
    return Q(last_heartbeat_at__gt=Now() - window)

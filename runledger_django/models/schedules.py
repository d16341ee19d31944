"""Periodic schedules and their fire ledger. Writes go through services/schedules.

``runledger_job_schedules`` follows the seed's ``job_schedules`` (reference 1.1) plus the
extensions of SPEC; ``runledger_schedule_fires`` holds one row per fire (unique on schedule and
``scheduled_for``), which job retention never removes: a pruned job leaves its fire with no
job, so that fire can never run again. The foreign keys, the blank and shape CHECKs, the
partial indexes and the definitions guard are RunSQL in migration 0010.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..domain import CatchUp, FireKind, FireOutcome, Overlap
from ..uuid7 import uuid7
from .columns import TRANSACTION_NOW
from .jobs import Job, JobDefinition


class JobSchedule(models.Model):
    """A cron or interval schedule that makes one job per fire."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    name = models.TextField()
    """Unique across the table, not per organization (the seed's rule)."""
    # The FK is created by RunSQL as fk_job_schedules_job_type, immediate, ON DELETE RESTRICT.
    job_type = models.ForeignKey(
        JobDefinition,
        on_delete=models.DO_NOTHING,
        db_column="job_type",
        db_constraint=False,
        db_index=False,
        related_name="schedules",
    )
    organization_id = models.UUIDField(null=True, blank=True)
    payload_template = models.JSONField(
        db_default=models.Value({}, models.JSONField()), default=dict
    )
    cron_expr = models.TextField(null=True, blank=True)
    interval_seconds = models.IntegerField(null=True, blank=True)
    timezone = models.TextField(db_default="UTC", default="UTC")
    is_active = models.BooleanField(db_default=True, default=True)
    """The declared (or saved) flag: ``enabled``."""
    paused_at = models.DateTimeField(null=True, blank=True)
    """Set while an operator has paused the schedule; a deploy never clears it."""
    next_fire_at = models.DateTimeField()
    """The cursor: when the next fire is due (jitter included; later after a failure)."""
    next_scheduled_for = models.DateTimeField()
    """The fire the cursor stands for (its ``scheduled_for``)."""
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_scheduled_for = models.DateTimeField(null=True, blank=True)
    last_job_id = models.UUIDField(null=True, blank=True)
    """The job of the last fire (no foreign key: retention may remove it)."""
    max_jitter_seconds = models.IntegerField(db_default=0, default=0)
    priority = models.IntegerField(null=True, blank=True)
    catch_up = models.TextField(
        choices=CatchUp.choices, db_default=CatchUp.LATEST.value, default=CatchUp.LATEST.value
    )
    catch_up_grace_seconds = models.IntegerField(db_default=60, default=60)
    catch_up_limit = models.IntegerField(db_default=100, default=100)
    overlap = models.TextField(
        choices=Overlap.choices, db_default=Overlap.ALLOW.value, default=Overlap.ALLOW.value
    )
    declared = models.BooleanField(db_default=False, default=False)
    """Declared with ``schedule(...)`` in code: the sync owns its fields."""
    fire_count = models.BigIntegerField(db_default=0, default=0)
    skip_count = models.BigIntegerField(db_default=0, default=0)
    coalesced_count = models.BigIntegerField(db_default=0, default=0)
    consecutive_failures = models.IntegerField(db_default=0, default=0)
    last_error_code = models.TextField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    created_by_user_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_schedules"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="uq_job_schedules_name"),
            models.CheckConstraint(
                condition=Q(max_jitter_seconds__gte=0),
                name="chk_job_schedules_jitter_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(max_jitter_seconds__lte=86_400), name="chk_job_schedules_jitter_max"
            ),
            models.CheckConstraint(
                condition=Q(cron_expr__isnull=False, interval_seconds__isnull=True)
                | Q(cron_expr__isnull=True, interval_seconds__isnull=False),
                name="chk_job_schedules_cron_or_interval",
            ),
            models.CheckConstraint(
                condition=Q(interval_seconds__isnull=True) | Q(interval_seconds__gt=0),
                name="chk_job_schedules_interval_positive",
            ),
            models.CheckConstraint(
                condition=Q(catch_up__in=CatchUp.values), name="chk_job_schedules_catch_up"
            ),
            models.CheckConstraint(
                condition=Q(overlap__in=Overlap.values), name="chk_job_schedules_overlap"
            ),
            models.CheckConstraint(
                condition=Q(catch_up_grace_seconds__gt=0),
                name="chk_job_schedules_grace_positive",
            ),
            models.CheckConstraint(
                condition=Q(catch_up_limit__gte=1, catch_up_limit__lte=10_000),
                name="chk_job_schedules_catch_up_limit",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def fires(self) -> bool:
        """Whether the scheduler takes it: declared (or saved) active and not paused."""
        return self.is_active and self.paused_at is None


class ScheduleFire(models.Model):
    """One fire of a schedule: its job, or why it has none."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Both FKs are RunSQL: fk_schedule_fires_schedule (ON DELETE CASCADE) and
    # fk_schedule_fires_job (ON DELETE SET NULL: retention keeps the fire).
    schedule = models.ForeignKey(
        JobSchedule,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="fires",
    )
    scheduled_for = models.DateTimeField()
    kind = models.TextField(
        choices=FireKind.choices,
        db_default=FireKind.SCHEDULED.value,
        default=FireKind.SCHEDULED.value,
    )
    outcome = models.TextField(choices=FireOutcome.choices)
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="schedule_fires",
    )
    attempts = models.IntegerField(db_default=1, default=1)
    error_code = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_schedule_fires"
        ordering = ["-scheduled_for"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=FireKind.values), name="chk_schedule_fires_kind"
            ),
            models.CheckConstraint(
                condition=Q(outcome__in=FireOutcome.values), name="chk_schedule_fires_outcome"
            ),
            models.CheckConstraint(
                condition=Q(outcome=FireOutcome.ENQUEUED.value) | Q(job__isnull=True),
                name="chk_schedule_fires_job_only_when_enqueued",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.scheduled_for.isoformat()}"

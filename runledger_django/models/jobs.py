"""The job tables: definitions, the queue, its attempts and events, and the execution resource
claims. Writes go through the services; models are schema plus reads.

Constraint and index names are contract (error classification and operators rely on them);
what the ORM cannot express lives in the migrations as RunSQL (see ``models/__init__.py``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..domain import (
    RATE_LIMIT_COUNT_MAX,
    UQ_JOB_QUEUE_GLOBAL,
    UQ_JOB_QUEUE_ORG,
    AttemptOutcome,
    FailureKind,
    JobEventType,
    JobStage,
    JobStatus,
)
from ..uuid7 import uuid7
from .columns import TRANSACTION_NOW


class JobDefinition(models.Model):
    """A job type the queue accepts, with the defaults promotion applies (reference 2.3)."""

    job_type = models.TextField(primary_key=True)
    version = models.IntegerField(db_default=1, default=1)
    max_attempts = models.IntegerField(db_default=8, default=8)
    default_timeout_seconds = models.IntegerField(db_default=900, default=900)
    default_priority = models.IntegerField(db_default=100, default=100)
    is_enabled = models.BooleanField(db_default=True, default=True)
    # Queue control (docs/queue-control.md): the operator's pause, and the limits the claim
    # enforces. Definition syncing never writes them on an existing row.
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    paused_reason = models.TextField(null=True, blank=True, editable=False)
    paused_by = models.TextField(null=True, blank=True, editable=False)
    max_concurrency = models.IntegerField(
        null=True,
        blank=True,
        help_text="At most this many LEASED jobs of the type across every worker (empty: no limit).",
    )
    rate_limit_count = models.IntegerField(
        null=True,
        blank=True,
        help_text="At most this many job starts per rate limit period (empty: no limit).",
    )
    rate_limit_period_seconds = models.IntegerField(
        null=True, blank=True, help_text="The rate limit's period, in seconds."
    )
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_definitions"
        ordering = ["job_type"]
        permissions = [
            ("pause_jobdefinition", "Can pause a job type"),
            ("resume_jobdefinition", "Can resume a paused job type"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(version__gt=0), name="chk_job_definitions_version_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gt=0), name="chk_job_definitions_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=Q(default_timeout_seconds__gt=0),
                name="chk_job_definitions_timeout_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gt=0),
                name="chk_job_definitions_max_concurrency_positive",
            ),
            models.CheckConstraint(
                condition=(
                    Q(rate_limit_count__isnull=True, rate_limit_period_seconds__isnull=True)
                    | Q(
                        rate_limit_count__gt=0,
                        rate_limit_count__lte=RATE_LIMIT_COUNT_MAX,
                        rate_limit_period_seconds__gt=0,
                    )
                ),
                name="chk_job_definitions_rate_limit_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.job_type


class JobRateLimitState(models.Model):
    """The rate limit's state per limited job type (docs/queue-control.md): GCRA's theoretical
    arrival time. With T = period / count, a claim at ``now`` admits the whole intervals T
    between the later of this time and ``now``, and ``now`` plus the period, and advances it
    by T per job it leased: a burst of up to the count after an idle period, then one start per
    T. Kept off the definition row so an admin save of a stale form never rewinds it; no
    foreign key, so a deleted definition leaves a harmless row. Only the limited claim writes
    it (migration 0017's function)."""

    job_type = models.TextField(primary_key=True)
    theoretical_arrival_at = models.DateTimeField()

    class Meta:
        db_table = "runledger_job_rate_limits"

    def __str__(self) -> str:
        return self.job_type


class Job(models.Model):
    """A row of the job queue (the parts of reference 2.2 that intents depend on)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # The FK is created by RunSQL as fk_job_queue_job_type, immediate and ON DELETE RESTRICT.
    job_type = models.ForeignKey(
        JobDefinition,
        on_delete=models.DO_NOTHING,
        db_column="job_type",
        db_constraint=False,
        db_index=False,
        related_name="jobs",
    )
    organization_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict)
    status = models.TextField(
        choices=JobStatus.choices, db_default=JobStatus.PENDING, default=JobStatus.PENDING
    )
    priority = models.IntegerField(db_default=100, default=100)
    run_number = models.IntegerField(db_default=1, default=1)
    attempt = models.IntegerField(db_default=0, default=0)
    max_attempts = models.IntegerField()
    timeout_seconds = models.IntegerField(db_default=900, default=900)
    next_run_at = models.DateTimeField(db_default=TRANSACTION_NOW)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stage = models.TextField(db_default=JobStage.QUEUED, default=JobStage.QUEUED)
    progress_done = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)
    idempotency_key = models.TextField(null=True, blank=True)
    status_reason = models.TextField(null=True, blank=True)
    last_error_code = models.TextField(null=True, blank=True)
    last_error_message = models.TextField(null=True, blank=True)
    enqueue_request = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    execution_resource_key = models.TextField(null=True, blank=True)
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    """The enqueuing span's propagation fields, copied from the intent at promotion; the run's
    span links to it (services/tracing.py)."""
    workflow_step_id = models.UUIDField(null=True, blank=True)
    """The workflow step this job runs (NULL for a plain job). The completion statements
    return it, and only a non-NULL value calls into workflows; the FK (ON DELETE SET NULL) is
    RunSQL in migration 0014."""
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_queue"
        permissions = [
            ("cancel_job", "Can cancel a pending or leased job"),
            ("requeue_job", "Can requeue a dead-lettered or canceled job"),
            ("replay_job", "Can replay a succeeded job as a new job"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job_type", "organization_id", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, organization_id__isnull=False),
                name=UQ_JOB_QUEUE_ORG,
            ),
            models.UniqueConstraint(
                fields=["job_type", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, organization_id__isnull=True),
                name=UQ_JOB_QUEUE_GLOBAL,
            ),
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="chk_job_queue_status"
            ),
            models.CheckConstraint(
                condition=Q(attempt__gte=0), name="chk_job_queue_attempt_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gt=0), name="chk_job_queue_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=Q(run_number__gt=0), name="chk_job_queue_run_number_positive"
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gt=0), name="chk_job_queue_timeout_positive"
            ),
            models.CheckConstraint(
                condition=(
                    (Q(progress_done__isnull=True) | Q(progress_done__gte=0))
                    & (Q(progress_total__isnull=True) | Q(progress_total__gte=0))
                    & (
                        Q(progress_done__isnull=True)
                        | Q(progress_total__isnull=True)
                        | Q(progress_done__lte=models.F("progress_total"))
                    )
                ),
                name="chk_job_queue_progress_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(idempotency_key__isnull=True) | Q(enqueue_request__isnull=False),
                name="ck_job_queue_idempotency_enqueue_request",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type_id} {self.id}"


class JobEvent(models.Model):
    """The append-only job audit trail; enqueue writes exactly one ENQUEUED row (reference 2.4)."""

    id = models.BigAutoField(primary_key=True)
    # The FK is created by RunSQL as fk_job_events_job with ON DELETE CASCADE in the database.
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="events",
    )
    run_number = models.IntegerField(db_default=1, default=1)
    attempt = models.IntegerField(null=True, blank=True)
    event_type = models.TextField(choices=JobEventType.choices)
    stage = models.TextField(null=True, blank=True)
    progress_done = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    payload = models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict)
    occurred_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_events"
        constraints = [
            models.CheckConstraint(
                condition=Q(event_type__in=JobEventType.values), name="chk_job_events_event_type"
            ),
            models.CheckConstraint(
                condition=Q(attempt__isnull=True) | Q(attempt__gt=0),
                name="chk_job_events_attempt_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.job_id}"


class JobAttempt(models.Model):
    """One lease of a job: who ran it, when, and how it ended (reference 1.4).

    ``job_type`` and ``organization_id`` are copied from the job (they never change) so the
    job metrics can count attempts per type and tenant without joining the queue.
    """

    id = models.BigAutoField(primary_key=True)
    # The FK is created by RunSQL as fk_job_attempts_job, immediate and ON DELETE CASCADE.
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="attempts",
    )
    job_type = models.TextField()
    organization_id = models.UUIDField(null=True, blank=True)
    run_number = models.IntegerField()
    attempt = models.IntegerField()
    worker_id = models.TextField()
    leased_at = models.DateTimeField(db_default=TRANSACTION_NOW)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.TextField(choices=AttemptOutcome.choices, null=True, blank=True)
    """NULL while the attempt runs."""
    failure_kind = models.TextField(choices=FailureKind.choices, null=True, blank=True)
    error_code = models.TextField(null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    error_class = models.TextField(null=True, blank=True)
    """The dotted path of the exception that failed the attempt."""
    error_traceback = models.TextField(null=True, blank=True)
    retry_delay_ms = models.IntegerField(null=True, blank=True)
    """The backoff policy's delay when the attempt was retried."""
    requested_retry_not_before = models.DateTimeField(null=True, blank=True)
    effective_next_run_at = models.DateTimeField(null=True, blank=True)
    retry_timing_source = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_attempts"
        ordering = ["job_id", "run_number", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "run_number", "attempt"], name="uq_job_attempts_job_run_attempt"
            ),
            models.CheckConstraint(
                condition=Q(attempt__gt=0), name="chk_job_attempts_attempt_positive"
            ),
            models.CheckConstraint(
                condition=Q(run_number__gt=0), name="chk_job_attempts_run_number_positive"
            ),
            models.CheckConstraint(
                condition=Q(outcome__isnull=True) | Q(outcome__in=AttemptOutcome.values),
                name="chk_job_attempts_outcome",
            ),
            models.CheckConstraint(
                condition=Q(failure_kind__isnull=True) | Q(failure_kind__in=FailureKind.values),
                name="chk_job_attempts_failure_kind",
            ),
            models.CheckConstraint(
                condition=Q(outcome__isnull=True, finished_at__isnull=True)
                | Q(outcome__isnull=False, finished_at__isnull=False),
                name="chk_job_attempts_finished_outcome",
            ),
            models.CheckConstraint(
                condition=Q(retry_delay_ms__isnull=True) | Q(retry_delay_ms__gte=0),
                name="chk_job_attempts_retry_delay_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(retry_timing_source__isnull=True)
                | Q(retry_timing_source__in=["POLICY", "HANDLER_NOT_BEFORE"]),
                name="chk_job_attempts_retry_timing_source",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} run {self.run_number} attempt {self.attempt}"


class JobExecutionResourceClaim(models.Model):
    """The durable owner of an execution resource key: at most one LEASED job per key.

    Rows are written by the claim and removed by triggers when the owning lease ends; a
    cancelled live lease keeps its row until ``release_after`` (reference 1.7).
    """

    resource_key = models.TextField(primary_key=True)
    # The FK is created by RunSQL as fk_job_execution_resource_claims_job, ON DELETE CASCADE.
    job = models.OneToOneField(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="resource_claim",
    )
    run_number = models.IntegerField()
    attempt = models.IntegerField()
    worker_id = models.TextField()
    lease_expires_at = models.DateTimeField()
    release_after = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_execution_resource_claims"

    def __str__(self) -> str:
        return f"{self.resource_key} -> {self.job_id}"


class JobReplay(models.Model):
    """Lineage of a replay: a new job made from a SUCCEEDED one (reference 5), one per source
    run and request key.

    The foreign keys are created by RunSQL: deleting the source removes its lineage
    (``fk_job_replays_source_job``, ON DELETE CASCADE); deleting only the replay is refused
    while its source exists (``fk_job_replays_replay_job``, NO ACTION, checked at the end of
    the statement, so deleting both in one statement works).
    """

    replay_job = models.OneToOneField(
        Job,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="replayed_from",
    )
    source_job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="replays",
    )
    source_run_number = models.IntegerField()
    request_key = models.TextField()
    reason = models.TextField()
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_replays"
        constraints = [
            models.UniqueConstraint(
                fields=["source_job", "source_run_number", "request_key"],
                name="uq_job_replays_source_run_request_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.replay_job_id} replays {self.source_job_id}"

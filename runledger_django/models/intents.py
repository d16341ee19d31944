"""The enqueue intents table, and the decoding of an intent's lifecycle columns into its state
(reference 5). Writes go through the services; models are schema plus reads.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from ..domain import IntentState, IntentStatus, JobStage, PromotionError
from ..errors import Code, RunledgerError
from ..uuid7 import uuid7
from .columns import TRANSACTION_NOW
from .jobs import Job


class JobEnqueueIntent(models.Model):
    """A durable, strictly idempotent request to enqueue one job later (reference 2.1)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    job_type = models.TextField()
    """Deliberately no foreign key: intents may name types that have no definition yet."""
    organization_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField()
    priority = models.IntegerField(null=True, blank=True)
    max_attempts = models.IntegerField(null=True, blank=True)
    timeout_seconds = models.IntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.TextField()
    stage = models.TextField(db_default=JobStage.QUEUED, default=JobStage.QUEUED)
    enqueue_request_version = models.SmallIntegerField(db_default=1, default=1)
    enqueue_request = models.JSONField()
    execution_resource_key = models.TextField(null=True, blank=True)
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    """The recording span's propagation fields (``traceparent``, ``tracestate``): never part
    of ``enqueue_request``, so a retry from another trace is still an identical request."""
    promotion_attempts = models.IntegerField(db_default=0, default=0)
    next_promotion_at = models.DateTimeField(db_default=TRANSACTION_NOW)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    status = models.TextField(
        choices=IntentStatus.choices, db_default=IntentStatus.PENDING, default=IntentStatus.PENDING
    )
    # The FK is created by RunSQL: immediate, ON DELETE RESTRICT (the retention fence).
    promoted_job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    promoted_at = models.DateTimeField(null=True, blank=True)
    conflicted_at = models.DateTimeField(null=True, blank=True)
    last_error_code = models.TextField(null=True, blank=True)
    last_error_message = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_job_enqueue_intents"
        verbose_name = "enqueue intent"
        constraints = [
            models.UniqueConstraint(
                fields=["job_type", "organization_id", "idempotency_key"],
                condition=Q(organization_id__isnull=False),
                name="uq_job_enqueue_intents_type_idempotency_org",
            ),
            models.UniqueConstraint(
                fields=["job_type", "idempotency_key"],
                condition=Q(organization_id__isnull=True),
                name="uq_job_enqueue_intents_type_idempotency_global",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__isnull=True) | Q(max_attempts__gt=0),
                name="chk_job_enqueue_intents_max_attempts_positive",
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__isnull=True) | Q(timeout_seconds__gt=0),
                name="chk_job_enqueue_intents_timeout_positive",
            ),
            models.CheckConstraint(
                condition=Q(enqueue_request_version=1),
                name="chk_job_enqueue_intents_enqueue_request_version",
            ),
            models.CheckConstraint(
                condition=Q(promotion_attempts__gte=0),
                name="chk_job_enqueue_intents_promotion_attempts",
            ),
            models.CheckConstraint(
                condition=Q(status__in=IntentStatus.values),
                name="chk_job_enqueue_intents_status",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.id}"

    @property
    def state(self) -> IntentState:
        """The typed lifecycle of this row (reference 5); impossible shapes raise."""
        return decode_intent_state(
            status=self.status,
            promotion_attempts=self.promotion_attempts,
            last_attempted_at=self.last_attempted_at,
            promoted_job_id=self.promoted_job_id,
            promoted_at=self.promoted_at,
            conflicted_at=self.conflicted_at,
            last_error_code=self.last_error_code,
            last_error_message=self.last_error_message,
        )


def _present(text: str | None) -> bool:
    return text is not None and text.strip(" ") != ""


def decode_intent_state(
    *,
    status: str,
    promotion_attempts: int,
    last_attempted_at: object,
    promoted_job_id: uuid.UUID | None,
    promoted_at: object,
    conflicted_at: object,
    last_error_code: str | None,
    last_error_message: str | None,
) -> IntentState:
    """Decode the lifecycle columns, rejecting every shape the state machine cannot produce."""
    import datetime as dt

    def ts(value: object) -> dt.datetime | None:
        return value if isinstance(value, dt.datetime) else None

    attempted = ts(last_attempted_at)
    no_error = last_error_code is None and last_error_message is None
    has_error = _present(last_error_code) and _present(last_error_message)
    error = (
        PromotionError(code=last_error_code, message=last_error_message)  # type: ignore[arg-type]
        if has_error
        else None
    )
    unpromoted = promoted_job_id is None and promoted_at is None
    if status == IntentStatus.PENDING and unpromoted and conflicted_at is None:
        if promotion_attempts == 0 and attempted is None and no_error:
            return IntentState(state="initial_pending")
        if promotion_attempts > 0 and attempted is not None and has_error:
            return IntentState(
                state="retry_pending",
                promotion_attempts=promotion_attempts,
                last_attempted_at=attempted,
                error=error,
            )
    elif status == IntentStatus.PROMOTED:
        if (
            promotion_attempts > 0
            and attempted is not None
            and promoted_job_id is not None
            and ts(promoted_at) is not None
            and conflicted_at is None
            and no_error
        ):
            return IntentState(
                state="promoted",
                promotion_attempts=promotion_attempts,
                last_attempted_at=attempted,
                job_id=promoted_job_id,
                promoted_at=ts(promoted_at),
            )
    elif status == IntentStatus.CONFLICTED:
        if (
            promotion_attempts > 0
            and attempted is not None
            and unpromoted
            and ts(conflicted_at) is not None
            and has_error
        ):
            return IntentState(
                state="conflicted",
                promotion_attempts=promotion_attempts,
                last_attempted_at=attempted,
                conflicted_at=ts(conflicted_at),
                error=error,
            )
    raise RunledgerError.for_code(
        Code.INTENT_INVALID_PERSISTED_ROW,
        f"job enqueue intent persisted lifecycle fields do not match status {status}",
    )

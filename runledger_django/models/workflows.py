"""Workflows (issue 19): runs, their steps and edges, appends, active keys and recoveries.
Writes go through services/workflows.

A run keeps counters of its steps by status and a step keeps counters of its prerequisites,
so every transition updates a fixed number of rows (reference 12, item 24). A blocked step
has no job row: its job is inserted when it is released, and the job row carries only
``workflow_step_id`` (migration 0014), which the completion path returns to decide whether
to call into workflows at all. Foreign keys with database actions, the composite keys that
keep an edge inside its run, blank and shape CHECKs and the indexes are RunSQL in 0015.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from ..domain import (
    IntentStatus,
    WorkflowRecoveryMode,
    WorkflowReleaseMode,
    WorkflowRunStatus,
    WorkflowStepKind,
    WorkflowStepStatus,
)
from ..uuid7 import uuid7
from .columns import TRANSACTION_NOW
from .jobs import Job


class WorkflowRun(models.Model):
    """One execution of a workflow type: a graph of steps and the counters of their states."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    workflow_type = models.TextField()
    organization_id = models.UUIDField(null=True, blank=True)
    status = models.TextField(
        choices=WorkflowRunStatus.choices,
        db_default=WorkflowRunStatus.RUNNING,
        default=WorkflowRunStatus.RUNNING,
    )
    idempotency_key = models.TextField(null=True, blank=True)
    active_key = models.TextField(null=True, blank=True)
    metadata = models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict)
    enqueue_request = models.JSONField(null=True, blank=True)
    """The canonical start request: a keyed retry must match it exactly."""
    fail_fast = models.BooleanField(db_default=False, default=False)
    """Cancel every unfinished step when any step fails."""
    result_step_key = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    """The result step's output once the run SUCCEEDED; NULL otherwise."""
    steps_total = models.IntegerField(db_default=0, default=0)
    steps_waiting = models.IntegerField(db_default=0, default=0)
    """Steps WAITING_FOR_EXTERNAL."""
    steps_succeeded = models.IntegerField(db_default=0, default=0)
    steps_failed = models.IntegerField(db_default=0, default=0)
    steps_canceled = models.IntegerField(db_default=0, default=0)
    started_at = models.DateTimeField(db_default=TRANSACTION_NOW)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_runs"
        permissions = [
            ("cancel_workflowrun", "Can cancel a workflow run"),
            ("retry_workflowrun", "Can retry a workflow run"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_type", "organization_id", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, organization_id__isnull=False),
                name="uq_workflow_runs_org_idempotency",
            ),
            models.UniqueConstraint(
                fields=["workflow_type", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, organization_id__isnull=True),
                name="uq_workflow_runs_global_idempotency",
            ),
            models.CheckConstraint(
                condition=Q(status__in=WorkflowRunStatus.values), name="chk_workflow_runs_status"
            ),
            models.CheckConstraint(
                condition=Q(idempotency_key__isnull=True) | Q(enqueue_request__isnull=False),
                name="chk_workflow_runs_idempotency_request",
            ),
            models.CheckConstraint(
                condition=Q(steps_waiting__gte=0)
                & Q(steps_succeeded__gte=0)
                & Q(steps_failed__gte=0)
                & Q(steps_canceled__gte=0)
                & Q(
                    steps_total__gte=F("steps_waiting")
                    + F("steps_succeeded")
                    + F("steps_failed")
                    + F("steps_canceled")
                ),
                name="chk_workflow_runs_counters",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_type} {self.id}"


class WorkflowStep(models.Model):
    """A node of a run: a JOB step (one job once released) or an EXTERNAL gate."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # The FK is created by RunSQL as fk_workflow_steps_run, ON DELETE CASCADE.
    workflow_run = models.ForeignKey(
        WorkflowRun,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="steps",
    )
    step_key = models.TextField()
    execution_kind = models.TextField(choices=WorkflowStepKind.choices)
    job_type = models.TextField(null=True, blank=True)
    organization_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField(null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    max_attempts = models.IntegerField(null=True, blank=True)
    timeout_seconds = models.IntegerField(null=True, blank=True)
    stage = models.TextField(null=True, blank=True)
    execution_resource_key = models.TextField(null=True, blank=True)
    status = models.TextField(
        choices=WorkflowStepStatus.choices,
        db_default=WorkflowStepStatus.BLOCKED,
        default=WorkflowStepStatus.BLOCKED,
    )
    # The FK is created by RunSQL as fk_workflow_steps_job, ON DELETE SET NULL (retention).
    job = models.OneToOneField(
        Job,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    released_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    dependency_count_total = models.IntegerField(db_default=0, default=0)
    dependency_count_pending = models.IntegerField(db_default=0, default=0)
    dependency_count_unsatisfied = models.IntegerField(db_default=0, default=0)
    status_reason = models.TextField(null=True, blank=True)
    last_error_code = models.TextField(null=True, blank=True)
    last_error_message = models.TextField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    allow_handler_continuation = models.BooleanField(db_default=False, default=False)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_steps"
        ordering = ["workflow_run_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_run", "step_key"], name="uq_workflow_steps_run_step_key"
            ),
            models.CheckConstraint(
                condition=Q(status__in=WorkflowStepStatus.values),
                name="chk_workflow_steps_status",
            ),
            models.CheckConstraint(
                condition=Q(execution_kind__in=WorkflowStepKind.values),
                name="chk_workflow_steps_kind",
            ),
            models.CheckConstraint(
                condition=(
                    Q(
                        execution_kind=WorkflowStepKind.JOB,
                        job_type__isnull=False,
                        priority__isnull=False,
                        max_attempts__isnull=False,
                        timeout_seconds__isnull=False,
                        stage__isnull=False,
                    )
                    | Q(
                        execution_kind=WorkflowStepKind.EXTERNAL,
                        job_type__isnull=True,
                        priority__isnull=True,
                        max_attempts__isnull=True,
                        timeout_seconds__isnull=True,
                        stage__isnull=True,
                        job__isnull=True,
                        allow_handler_continuation=False,
                    )
                ),
                name="chk_workflow_steps_shape",
            ),
            models.CheckConstraint(
                condition=Q(dependency_count_pending__gte=0)
                & Q(dependency_count_pending__lte=F("dependency_count_total"))
                & Q(dependency_count_unsatisfied__gte=0)
                & Q(dependency_count_unsatisfied__lte=F("dependency_count_total")),
                name="chk_workflow_steps_counters",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_key} of {self.workflow_run_id}"


class WorkflowStepDependency(models.Model):
    """An edge prerequisite -> dependent. Both ends are composite (run, step) foreign keys
    (RunSQL), so an edge cannot leave its run."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(
        WorkflowRun,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="edges",
    )
    prerequisite_step = models.ForeignKey(
        WorkflowStep,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="dependent_edges",
    )
    dependent_step = models.ForeignKey(
        WorkflowStep,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="prerequisite_edges",
    )
    release_mode = models.TextField(
        choices=WorkflowReleaseMode.choices,
        db_default=WorkflowReleaseMode.ON_SUCCESS,
        default=WorkflowReleaseMode.ON_SUCCESS,
    )

    class Meta:
        db_table = "runledger_workflow_step_dependencies"
        constraints = [
            models.UniqueConstraint(
                fields=["prerequisite_step", "dependent_step"],
                name="uq_workflow_step_dependencies_edge",
            ),
            models.CheckConstraint(
                condition=~Q(prerequisite_step=F("dependent_step")),
                name="chk_workflow_step_dependencies_no_self",
            ),
            models.CheckConstraint(
                condition=Q(release_mode__in=WorkflowReleaseMode.values),
                name="chk_workflow_step_dependencies_mode",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prerequisite_step_id} -> {self.dependent_step_id}"


class WorkflowRunMutation(models.Model):
    """One applied append of steps, idempotent per (run, mutation key)."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(
        WorkflowRun,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="mutations",
    )
    mutation_key = models.TextField()
    mutation_kind = models.TextField(db_default="APPEND_STEPS", default="APPEND_STEPS")
    metadata = models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict)
    request = models.JSONField()
    """The canonical append request (a retry with the same key must match it)."""
    step_ids = models.JSONField(db_default=models.Value([], models.JSONField()), default=list)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_run_mutations"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_run", "mutation_key"], name="uq_workflow_run_mutations_key"
            ),
            models.CheckConstraint(
                condition=Q(mutation_kind="APPEND_STEPS"),
                name="chk_workflow_run_mutations_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.mutation_key} on {self.workflow_run_id}"


class WorkflowActiveClaim(models.Model):
    """At most one run holds a (scope, active key) while it is not terminal."""

    workflow_run = models.OneToOneField(
        WorkflowRun,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="active_claim",
    )
    scope = models.TextField()
    """``global`` or ``organization:<uuid>``; the workflow type is not part of it."""
    active_key = models.TextField()
    release_pending = models.BooleanField(db_default=False, default=False)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_active_claims"
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "active_key"], name="uq_workflow_active_claims_scope_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.active_key}"


class WorkflowRecovery(models.Model):
    """Lineage of a recovery run (``retry_workflow``): deleting only the recovery run is
    refused while its source exists (RunSQL, NO ACTION); deleting both together works."""

    recovery_run = models.OneToOneField(
        WorkflowRun,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="recovered_from",
    )
    source_run = models.ForeignKey(
        WorkflowRun,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="recoveries",
    )
    source_step = models.ForeignKey(
        WorkflowStep,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    request_key = models.TextField()
    mode = models.TextField(choices=WorkflowRecoveryMode.choices)
    reason = models.TextField()
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_recoveries"
        constraints = [
            models.UniqueConstraint(
                fields=["source_run", "request_key"], name="uq_workflow_recoveries_request_key"
            ),
            models.CheckConstraint(
                condition=Q(mode__in=WorkflowRecoveryMode.values),
                name="chk_workflow_recoveries_mode",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recovery_run_id} recovers {self.source_run_id}"


class WorkflowIntent(models.Model):
    """A run requested in the caller's transaction (``record_workflow_intent``), promoted into
    exactly one keyed run once every job type it names has an enabled definition.

    ``workflow_run_id`` carries no foreign key: retention may delete the run while the intent
    still deduplicates its key, as a promoted job intent does."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    workflow_type = models.TextField()
    organization_id = models.UUIDField(null=True, blank=True)
    idempotency_key = models.TextField()
    enqueue_request = models.JSONField()
    """The canonical start request (the run stores the same one)."""
    job_types = models.JSONField(db_default=models.Value([], models.JSONField()), default=list)
    """The job types of its JOB steps: promotion waits until each has an enabled definition."""
    status = models.TextField(
        choices=IntentStatus.choices,
        db_default=IntentStatus.PENDING,
        default=IntentStatus.PENDING,
    )
    workflow_run_id = models.UUIDField(null=True, blank=True)
    promotion_attempts = models.IntegerField(db_default=0, default=0)
    next_promotion_at = models.DateTimeField(db_default=TRANSACTION_NOW)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    conflicted_at = models.DateTimeField(null=True, blank=True)
    last_error_code = models.TextField(null=True, blank=True)
    last_error_message = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)
    updated_at = models.DateTimeField(db_default=TRANSACTION_NOW, editable=False)

    class Meta:
        db_table = "runledger_workflow_intents"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_type", "organization_id", "idempotency_key"],
                condition=Q(organization_id__isnull=False),
                name="uq_workflow_intents_org_idempotency",
            ),
            models.UniqueConstraint(
                fields=["workflow_type", "idempotency_key"],
                condition=Q(organization_id__isnull=True),
                name="uq_workflow_intents_global_idempotency",
            ),
            models.CheckConstraint(
                condition=Q(status__in=IntentStatus.values), name="chk_workflow_intents_status"
            ),
            models.CheckConstraint(
                condition=Q(status=IntentStatus.PROMOTED, workflow_run_id__isnull=False)
                | ~Q(status=IntentStatus.PROMOTED),
                name="chk_workflow_intents_promoted_run",
            ),
            models.CheckConstraint(
                condition=Q(promotion_attempts__gte=0),
                name="chk_workflow_intents_attempts",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_promotion_at", "created_at", "id"],
                condition=Q(status=IntentStatus.PENDING),
                name="idx_workflow_intents_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_type} {self.idempotency_key}"

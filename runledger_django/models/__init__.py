"""The runledger tables. Writes go through the services; models are schema plus reads.

Constraint and index names are contract (error classification and operators rely on them).
What the ORM cannot express (Unicode blank CHECKs, the lifecycle CHECK, triggers, immediate
ON DELETE RESTRICT/CASCADE foreign keys, UUIDv7 defaults) lives in migration 0002 as RunSQL,
and so do the secondary indexes: their contract names are longer than the 30 characters
Django allows in Meta.indexes. Migration 0007 adds the CHECKs that keep every stored time
readable by Python and every counter below the integer maximum (validated without a long
lock, which Meta.constraints cannot do), and the key-prefix indexes of the admin's search.

One module per table family: ``jobs`` (definitions, jobs, attempts, events, resource claims,
replay lineage), ``intents`` (enqueue intents), ``schedules`` (periodic schedules and their
fire ledger), ``workers`` (the worker registry), ``dashboard`` (the queue samples behind the
dashboard's charts), ``workflows`` (runs, steps, edges, appends, active keys, recoveries),
``admin_pages`` (the proxies behind admin index entries). Every model is re-exported here, so
``from runledger_django.models import Job`` keeps working.
"""

from __future__ import annotations

from ..domain import FK_INTENT_PROMOTED_JOB
from .admin_pages import DashboardPage, DeadLetter, IntentMetricsPage, JobMetricsPage
from .dashboard import QueueSample
from .intents import JobEnqueueIntent
from .jobs import (
    Job,
    JobAttempt,
    JobDefinition,
    JobEvent,
    JobExecutionResourceClaim,
    JobRateLimitState,
    JobReplay,
)
from .schedules import JobSchedule, ScheduleFire
from .workers import WorkerRecord
from .workflows import (
    WorkflowActiveClaim,
    WorkflowIntent,
    WorkflowRecovery,
    WorkflowRun,
    WorkflowRunMutation,
    WorkflowStep,
    WorkflowStepDependency,
)

__all__ = [
    "FK_INTENT_PROMOTED_JOB",
    "DashboardPage",
    "DeadLetter",
    "IntentMetricsPage",
    "Job",
    "JobAttempt",
    "JobDefinition",
    "JobEnqueueIntent",
    "JobEvent",
    "JobExecutionResourceClaim",
    "JobMetricsPage",
    "JobRateLimitState",
    "JobReplay",
    "JobSchedule",
    "QueueSample",
    "ScheduleFire",
    "WorkerRecord",
    "WorkflowActiveClaim",
    "WorkflowIntent",
    "WorkflowRecovery",
    "WorkflowRun",
    "WorkflowRunMutation",
    "WorkflowStep",
    "WorkflowStepDependency",
]

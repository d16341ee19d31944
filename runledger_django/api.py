"""The public API of runledger_django; everything here is also importable from the package."""

from __future__ import annotations

from .domain import (
    BackfillReport,
    EnqueueOutcome,
    IntentMetrics,
    IntentOutcome,
    IntentStatus,
    JobMetrics,
    JobTarget,
    PromotionReport,
    ReadScope,
    ReplayOutcome,
    ScheduleMetrics,
    SchedulePassReport,
    TargetSpec,
    WorkflowRunStatus,
    WorkflowStart,
    WorkflowStepStatus,
    WorkReport,
)
from .errors import RunledgerError
from .services.enqueue import enqueue_job
from .services.intents import get_intent, list_intents, record_intent
from .services.job_control import cancel_job, requeue_job
from .services.job_metrics import job_metrics
from .services.metrics import intent_metrics
from .services.promotion import promote_intents
from .services.replay import replay_job
from .services.retention import delete_promoted_intents_before, delete_promoted_intents_for_jobs
from .services.schedules import (
    backfill_schedule,
    delete_schedule,
    get_schedule,
    list_schedules,
    next_fires,
    pause_schedule,
    resume_schedule,
    retime_schedule,
    run_schedule_pass,
    save_schedule,
    schedule_metrics,
    trigger_schedule,
)
from .services.workflows import (
    StepHandle,
    Workflow,
    WorkflowHandle,
    cancel_workflow,
    complete_external_step,
    get_workflow_run,
    list_workflow_runs,
    list_workflow_steps,
    retry_workflow,
    start_workflow,
    workflow_handle,
)
from .worker.context import JobContext
from .worker.outcomes import ContinueJob, RetryJob, TerminalJobError
from .worker.registry import job_handler
from .worker.run import run_jobs
from .worker.scheduler import schedule

__all__ = [
    "BackfillReport",
    "ContinueJob",
    "EnqueueOutcome",
    "IntentMetrics",
    "IntentOutcome",
    "IntentStatus",
    "JobContext",
    "JobMetrics",
    "JobTarget",
    "PromotionReport",
    "ReadScope",
    "ReplayOutcome",
    "RetryJob",
    "RunledgerError",
    "ScheduleMetrics",
    "SchedulePassReport",
    "StepHandle",
    "TargetSpec",
    "TerminalJobError",
    "WorkReport",
    "Workflow",
    "WorkflowHandle",
    "WorkflowRunStatus",
    "WorkflowStart",
    "WorkflowStepStatus",
    "backfill_schedule",
    "cancel_job",
    "cancel_workflow",
    "complete_external_step",
    "delete_promoted_intents_before",
    "delete_promoted_intents_for_jobs",
    "delete_schedule",
    "enqueue_job",
    "get_intent",
    "get_schedule",
    "get_workflow_run",
    "intent_metrics",
    "job_handler",
    "job_metrics",
    "list_intents",
    "list_schedules",
    "list_workflow_runs",
    "list_workflow_steps",
    "next_fires",
    "pause_schedule",
    "promote_intents",
    "record_intent",
    "replay_job",
    "requeue_job",
    "resume_schedule",
    "retime_schedule",
    "retry_workflow",
    "run_jobs",
    "run_schedule_pass",
    "save_schedule",
    "schedule",
    "schedule_metrics",
    "start_workflow",
    "trigger_schedule",
    "workflow_handle",
]

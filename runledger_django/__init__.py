"""runledger_django: a durable, transactional, strictly idempotent job queue on PostgreSQL.

The public names are re-exported lazily from ``runledger_django.api`` so that importing the
package during app loading never touches models.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

try:
    __version__ = metadata.version("runledger-django")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from .api import *  # noqa: F403

_API_NAMES = frozenset(
    {
        "BackfillReport",
        "ContinueJob",
        "EnqueueOutcome",
        "IntentMetrics",
        "IntentOutcome",
        "IntentRequest",
        "IntentStatus",
        "JobContext",
        "JobMetrics",
        "JobRequest",
        "JobTarget",
        "JobTypeControl",
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
        "WorkflowIntentOutcome",
        "WorkflowPromotionReport",
        "WorkflowRunStatus",
        "WorkflowStart",
        "WorkflowStepStatus",
        "append_workflow_steps",
        "backfill_schedule",
        "cancel_job",
        "cancel_workflow",
        "complete_external_step",
        "delete_promoted_intents_before",
        "delete_promoted_intents_for_jobs",
        "delete_schedule",
        "enqueue_job",
        "enqueue_jobs",
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
        "pause_job_type",
        "pause_schedule",
        "promote_intents",
        "promote_workflow_intents",
        "record_intent",
        "record_intents",
        "record_workflow_intent",
        "replay_job",
        "requeue_job",
        "resume_job_type",
        "resume_schedule",
        "retime_schedule",
        "retry_workflow",
        "run_jobs",
        "run_schedule_pass",
        "save_schedule",
        "schedule",
        "schedule_metrics",
        "set_job_type_limits",
        "start_workflow",
        "trigger_schedule",
        "workflow_handle",
    }
)

__all__ = sorted(_API_NAMES)


def __getattr__(name: str) -> Any:
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API_NAMES])

"""The public API of runledger_django; everything here is also importable from the package."""

from __future__ import annotations

from .domain import (
    EnqueueOutcome,
    IntentMetrics,
    IntentOutcome,
    IntentStatus,
    JobMetrics,
    PromotionReport,
    ReadScope,
    ReplayOutcome,
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
from .worker.context import JobContext
from .worker.outcomes import ContinueJob, RetryJob, TerminalJobError
from .worker.registry import job_handler
from .worker.run import run_jobs

__all__ = [
    "ContinueJob",
    "EnqueueOutcome",
    "IntentMetrics",
    "IntentOutcome",
    "IntentStatus",
    "JobContext",
    "JobMetrics",
    "PromotionReport",
    "ReadScope",
    "ReplayOutcome",
    "RetryJob",
    "RunledgerError",
    "TerminalJobError",
    "WorkReport",
    "cancel_job",
    "delete_promoted_intents_before",
    "delete_promoted_intents_for_jobs",
    "enqueue_job",
    "get_intent",
    "intent_metrics",
    "job_handler",
    "job_metrics",
    "list_intents",
    "promote_intents",
    "record_intent",
    "replay_job",
    "requeue_job",
    "run_jobs",
]

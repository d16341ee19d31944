"""The public API of runledger_django; everything here is also importable from the package."""

from __future__ import annotations

from .domain import (
    EnqueueOutcome,
    IntentMetrics,
    IntentOutcome,
    IntentStatus,
    PromotionReport,
    ReadScope,
)
from .errors import RunledgerError
from .services.enqueue import enqueue_job
from .services.intents import get_intent, list_intents, record_intent
from .services.metrics import intent_metrics
from .services.promotion import promote_intents
from .services.retention import delete_promoted_intents_before, delete_promoted_intents_for_jobs

__all__ = [
    "EnqueueOutcome",
    "IntentMetrics",
    "IntentOutcome",
    "IntentStatus",
    "PromotionReport",
    "ReadScope",
    "RunledgerError",
    "delete_promoted_intents_before",
    "delete_promoted_intents_for_jobs",
    "enqueue_job",
    "get_intent",
    "intent_metrics",
    "list_intents",
    "promote_intents",
    "record_intent",
]

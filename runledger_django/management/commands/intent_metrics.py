"""``manage.py intent_metrics``: per-job-type intent health, as a table or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...domain import IntentMetrics
from ...services.metrics import intent_metrics
from ..metrics_command import MetricsCommand


class Command(MetricsCommand):
    help = (
        "Print per-job-type intent metrics: pending and retrying counts, the highest promotion "
        "attempt count, conflicts and promotions in the last 24 hours, and the oldest pending "
        "intent. Every row by default; --organization or --global narrow the scope."
    )
    noun = "intents"
    record = "IntentMetrics"
    columns = (
        "job_type",
        "pending_count",
        "retrying_count",
        "max_promotion_attempts",
        "conflicted_24h",
        "promoted_24h",
        "oldest_pending_at",
    )

    def fetch(self, **arguments: Any) -> Sequence[IntentMetrics]:
        return intent_metrics(**arguments)

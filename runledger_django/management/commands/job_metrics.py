"""``manage.py job_metrics``: per-job-type queue health, as a table or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...domain import JobMetrics
from ...services.job_metrics import job_metrics
from ..metrics_command import MetricsCommand


class Command(MetricsCommand):
    help = (
        "Print per-job-type job metrics: due, scheduled, leased and expired-lease counts, "
        "attempts that succeeded, were retried or were dead-lettered in the last 24 hours, and "
        "the oldest due job, and whether the type is paused. Every row by default; --organization or --global narrow the scope."
    )
    noun = "jobs"
    record = "JobMetrics"
    columns = (
        "job_type",
        "due_count",
        "scheduled_count",
        "leased_count",
        "expired_lease_count",
        "succeeded_24h",
        "retried_24h",
        "dead_lettered_24h",
        "paused",
        "oldest_due_at",
    )

    def fetch(self, **arguments: Any) -> Sequence[JobMetrics]:
        return job_metrics(**arguments)

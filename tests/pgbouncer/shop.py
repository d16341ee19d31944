"""The example shop's job types and readers of their rows, for the PgBouncer tests."""

from __future__ import annotations

import uuid
from typing import Any

from runledger_django.models import Job, JobAttempt

RECEIPT = "shop.send_receipt"
WAREHOUSE = "shop.notify_warehouse"
WAREHOUSE_RUN_1 = [(1, 1, "RETRY_SCHEDULED"), (1, 2, "RETRY_SCHEDULED"), (1, 3, "DEAD_LETTERED")]
"""The attempts of a warehouse job's first run: the demo warehouse never answers it."""


def jobs_of(job_type: str) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in Job.objects.filter(job_type=job_type)
        .order_by("idempotency_key")
        .values("id", "idempotency_key", "status", "run_number", "attempt", "output")
    ]


def statuses(job_type: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs_of(job_type):
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    return counts


def attempt_outcomes(job_id: uuid.UUID) -> list[tuple[int, int, str | None]]:
    return list(
        JobAttempt.objects.filter(job_id=job_id)
        .order_by("run_number", "attempt")
        .values_list("run_number", "attempt", "outcome")
    )


def warehouse_attempts_so_far(job_id: uuid.UUID) -> bool:
    """Whether the job ran at least once, each attempt as its first run's story goes (the
    retries fall due 300 ms apart, so how many a burst worker reaches depends on the machine)."""
    outcomes = attempt_outcomes(job_id)
    return bool(outcomes) and outcomes == WAREHOUSE_RUN_1[: len(outcomes)]

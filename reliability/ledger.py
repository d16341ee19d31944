"""Reading a job's whole record (queue row, attempts, events) in one JSON-ready shape.

Retention reads it for the jobs it is about to delete (their evidence outlives them in its
journal), and the checks read it for every job left at the end; ``job_checks`` takes both.
Imported only after ``django.setup()``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.db import connection

# The harness reads the library's tables directly: it checks them, so it must not trust the
# library's own readers. ``ids`` NULL reads every job.
_JOBS = """
SELECT id::text, job_type, organization_id::text, idempotency_key, status, run_number, attempt,
       output::text, execution_resource_key, lease_expires_at, last_error_code
FROM runledger_job_queue
WHERE CAST(%(ids)s AS uuid[]) IS NULL OR id = ANY(CAST(%(ids)s AS uuid[]))
"""
_ATTEMPTS = """
SELECT job_id::text, run_number, attempt, worker_id, leased_at, finished_at, outcome,
       failure_kind, error_code, error_class, retry_delay_ms, requested_retry_not_before,
       effective_next_run_at, retry_timing_source
FROM runledger_job_attempts
WHERE CAST(%(ids)s AS uuid[]) IS NULL OR job_id = ANY(CAST(%(ids)s AS uuid[]))
"""
_EVENTS = """
SELECT id, job_id::text, run_number, attempt, event_type
FROM runledger_job_events
WHERE CAST(%(ids)s AS uuid[]) IS NULL OR job_id = ANY(CAST(%(ids)s AS uuid[]))
ORDER BY id
"""
JOB_FIELDS = (
    "id",
    "job_type",
    "organization_id",
    "key",
    "status",
    "run_number",
    "attempt",
    "output",
    "resource_key",
    "lease_expires_at",
    "last_error_code",
)
ATTEMPT_FIELDS = (
    "job_id",
    "run_number",
    "attempt",
    "worker_id",
    "leased_at",
    "finished_at",
    "outcome",
    "failure_kind",
    "error_code",
    "error_class",
    "retry_delay_ms",
    "requested_retry_not_before",
    "effective_next_run_at",
    "retry_timing_source",
)
EVENT_FIELDS = ("id", "job_id", "run_number", "attempt", "event_type")


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def _rows(sql: str, ids: list[str] | None, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": ids})
        return [
            {name: _plain(value) for name, value in zip(fields, row, strict=True)}
            for row in cursor.fetchall()
        ]


def read_ledger(ids: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Jobs (``ids``, or every job), their attempts and their events, as JSON-ready dicts
    (timestamps in ISO 8601, the output decoded)."""
    jobs = _rows(_JOBS, ids, JOB_FIELDS)
    for job in jobs:
        if job["output"] is not None:
            job["output"] = json.loads(job["output"])
    return {
        "jobs": jobs,
        "attempts": _rows(_ATTEMPTS, ids, ATTEMPT_FIELDS),
        "events": _rows(_EVENTS, ids, EVENT_FIELDS),
    }

"""Fixtures and row readers shared by the worker-runtime tests.

The readers return whole rows as dicts so a test compares everything a transition wrote (the
queue row, the attempt rows, the events in order), as the intent tests do.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections

from runledger_django import enqueue_job
from runledger_django.domain import ClaimedJob, JobLease
from runledger_django.models import Job, JobAttempt, JobEvent, JobExecutionResourceClaim
from runledger_django.services.claim import claim_jobs
from runledger_django.worker.registry import Handler, HandlerFunc, registry
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, run_sql
from tests.worker.processes import WorkerProcess, stop_all
from tests.worker_app import BLOCK, FLAKY, NOOP

TYPE = TEST_JOB_TYPE
WORKER = "worker-a"
OTHER_WORKER = "worker-b"
LEASE = 60

LIFECYCLE_CAPS: dict[str, Any] = {
    "cap_lock_ms": 5000,
    "cap_lock_text": "5000ms",
    "cap_statement_ms": 30000,
    "cap_statement_text": "30000ms",
}
"""Parameters of CAP_LIFECYCLE_TIMEOUTS as every transition sends them (for EXPLAIN tests)."""

Enqueue = Callable[..., uuid.UUID]
Register = Callable[..., None]

# Every column a transition may touch; the generated progress_pct and the timestamps the row
# keeps from its insert (created_at, updated_at) are left out.
JOB_FIELDS = (
    "status",
    "run_number",
    "attempt",
    "max_attempts",
    "timeout_seconds",
    "priority",
    "next_run_at",
    "lease_expires_at",
    "last_heartbeat_at",
    "worker_id",
    "started_at",
    "finished_at",
    "stage",
    "progress_done",
    "progress_total",
    "checkpoint",
    "status_reason",
    "last_error_code",
    "last_error_message",
    "output",
)

ATTEMPT_FIELDS = (
    "job_type",
    "organization_id",
    "run_number",
    "attempt",
    "worker_id",
    "leased_at",
    "finished_at",
    "outcome",
    "failure_kind",
    "error_code",
    "error_message",
    "error_class",
    "retry_delay_ms",
    "requested_retry_not_before",
    "effective_next_run_at",
    "retry_timing_source",
)

EVENT_FIELDS = (
    "event_type",
    "run_number",
    "attempt",
    "stage",
    "progress_done",
    "progress_total",
    "payload",
)


def job_row(job_id: uuid.UUID) -> dict[str, Any]:
    return dict(Job.objects.values(*JOB_FIELDS).get(id=job_id))


def attempt_rows(job_id: uuid.UUID) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in JobAttempt.objects.filter(job_id=job_id)
        .order_by("run_number", "attempt")
        .values(*ATTEMPT_FIELDS)
    ]


def event_rows(job_id: uuid.UUID, *, since: int = 0) -> list[dict[str, Any]]:
    """The job's events in the order they were written, from position ``since`` on."""
    rows = JobEvent.objects.filter(job_id=job_id).order_by("id").values(*EVENT_FIELDS)
    return [dict(row) for row in rows][since:]


def event_types(job_id: uuid.UUID) -> list[str]:
    return [row["event_type"] for row in event_rows(job_id)]


def resource_claims() -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in JobExecutionResourceClaim.objects.order_by("resource_key").values(
            "resource_key", "job_id", "run_number", "attempt", "worker_id", "release_after"
        )
    ]


def db_now() -> dt.datetime:
    """``now()``: inside the per-test transaction, the time every statement of the test sees."""
    return run_sql("SELECT now()")[0][0]  # type: ignore[no-any-return]


def db_clock() -> dt.datetime:
    return run_sql("SELECT clock_timestamp()")[0][0]  # type: ignore[no-any-return]


def stamp(value: dt.datetime) -> str:
    """A timestamp as jsonb_build_object writes it into an event payload."""
    return run_sql("SELECT to_jsonb(%s::timestamptz) #>> '{}'", [value])[0][0]  # type: ignore[no-any-return]


def expire_lease(job_id: uuid.UUID) -> None:
    """Make a lease expired for the fence (clock_timestamp) and the reaper (now()) alike; a
    worker that stopped heartbeating reaches the same state by waiting."""
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '1 second' "
        "WHERE id = %s",
        [job_id],
    )


def make_due(job_id: uuid.UUID) -> None:
    """Skip a retry's wait: the tests assert when a job is due, not how long time takes."""
    run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])


def claim_one(
    *,
    worker_id: str = WORKER,
    lease_seconds: int = LEASE,
    job_types: list[str] | None = None,
) -> ClaimedJob:
    claimed = claim_jobs(
        job_types or [TYPE], worker_id=worker_id, limit=1, lease_seconds=lease_seconds
    )
    assert len(claimed) == 1, claimed
    return claimed[0]


def other_lease(lease: JobLease, **changes: Any) -> JobLease:
    values = {
        "job_id": lease.job_id,
        "run_number": lease.run_number,
        "attempt": lease.attempt,
        "worker_id": lease.worker_id,
        **changes,
    }
    return JobLease(**values)


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return it. The deadline is
    generous: under load it only bounds a failure, never the speed of a pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate!r}")
        time.sleep(interval)


@pytest.fixture
def definition(make_definition: MakeDefinition) -> None:
    """The test job type: 3 attempts, 60 s timeout, priority 100."""
    make_definition()


@pytest.fixture
def enqueue(definition: None) -> Enqueue:
    """Enqueue an unkeyed job of the test type; keyword arguments go to enqueue_job."""

    def enqueue_(payload: Any = None, **kwargs: Any) -> uuid.UUID:
        job_type = kwargs.pop("job_type", TYPE)
        outcome = enqueue_job(job_type, {} if payload is None else payload, **kwargs)
        return outcome.job_id

    return enqueue_


@pytest.fixture
def register() -> Iterator[Register]:
    """Register handlers in the process-wide registry (what run_jobs and the command read);
    unregistered at teardown so no other test sees them."""
    added: list[str] = []

    def register_(job_type: str, func: HandlerFunc, **options: Any) -> None:
        registry.register(Handler(job_type=job_type, func=func, **options))
        added.append(job_type)

    yield register_
    for job_type in added:
        registry.unregister(job_type)


@pytest.fixture
def backend_pids() -> Callable[[], set[int]]:
    """The backends of this database other than the test's own connection."""

    def pids() -> set[int]:
        return {
            row[0]
            for row in run_sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        }

    return pids


def connection_pid() -> int:
    connection.ensure_connection()
    return int(run_sql("SELECT pg_backend_pid()")[0][0])


SpawnWorker = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker() -> Iterator[SpawnWorker]:
    """Start ``manage.py runledger_worker`` subprocesses; killed at teardown if still alive.

    ``settings`` become RUNLEDGER keys of the subprocess (LEASE_SECONDS=2, ...)."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, **settings: Any) -> WorkerProcess:
        process = WorkerProcess(list(args), settings)
        started.append(process)
        return process

    yield spawn
    stop_all(started)


@pytest.fixture
def app_definitions(make_definition: MakeDefinition) -> None:
    """Definitions for the worker app's types, as a worker start would create them."""
    make_definition(NOOP, max_attempts=3, default_timeout_seconds=60)
    make_definition(BLOCK, max_attempts=3, default_timeout_seconds=60)
    make_definition(FLAKY, max_attempts=5, default_timeout_seconds=60)


def race_claims(
    claimers: int, claim: Callable[[int], list[ClaimedJob]]
) -> tuple[list[list[ClaimedJob]], list[BaseException]]:
    """``claim(n)`` in ``claimers`` threads released at once by a barrier, each on its own
    connection (closed after); the batches they claimed, and what any of them raised."""
    barrier = threading.Barrier(claimers)
    results: list[list[ClaimedJob]] = []
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            barrier.wait()
            results.append(claim(n))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results, errors

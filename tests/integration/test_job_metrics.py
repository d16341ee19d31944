"""job_metrics: the live queue (due, scheduled, leased, expired) and one day of attempts, per
job type and scope, with stable paging, an exact filter and index-backed plans.

Jobs reach their states through the real services (enqueue, claim, complete); only time is
moved, with raw UPDATEs: a future ``next_run_at``, an expired lease, an attempt that finished
two days ago. ``now()`` is the test transaction's start, so the windows are exact.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoAssertNumQueries

from runledger_django import ReadScope, RunledgerError, cancel_job, enqueue_job, job_metrics
from runledger_django.domain import FailureKind, JobFailure, format_timestamp
from runledger_django.models import JobDefinition
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import run_sql
from tests.integration.test_reads import MALFORMED_SCOPES, _index_names, _seq_scans, explain

pytestmark = pytest.mark.django_db

TYPE_A = "jobs.test.job_metrics.a"
TYPE_B = "jobs.test.job_metrics.b"
TYPE_OLD = "jobs.test.job_metrics.old"
ORG = uuid.UUID("0190a6b2-0000-7000-8000-00000000a0a0")
OTHER_ORG = uuid.UUID("0190a6b2-0000-7000-8000-00000000b0b0")
WORKER = "metrics-worker"


def db_now() -> dt.datetime:
    return run_sql("SELECT now()")[0][0]  # type: ignore[no-any-return]


def enqueue(job_type: str, *, org: uuid.UUID | None = None) -> uuid.UUID:
    return enqueue_job(job_type, {"n": str(uuid.uuid4())}, organization_id=org).job_id


def claim(job_type: str) -> Any:
    [claimed] = claim_jobs([job_type], worker_id=WORKER, limit=1, lease_seconds=60)
    return claimed


def finish(job_type: str, outcome: str, *, org: uuid.UUID | None = None) -> uuid.UUID:
    """Enqueue a job and run one attempt of it to ``outcome``; return the job id. Call it
    before enqueueing the jobs a test wants to leave PENDING (a claim takes any due job)."""
    job_id = enqueue(job_type, org=org)
    lease = claim(job_type).lease
    assert lease.job_id == job_id
    if outcome == "succeeded":
        complete_job_success(lease, output={"ok": True})
    else:
        kind = FailureKind.RETRYABLE if outcome == "retried" else FailureKind.TERMINAL
        failure = JobFailure(
            kind=kind, code="job.handler_failed", message="boom", policy_retry_delay_ms=60_000
        )
        complete_job_failure(lease, failure)
    return job_id


def set_next_run(job_id: uuid.UUID, delta: str) -> None:
    run_sql(
        "UPDATE runledger_job_queue SET next_run_at = now() + %s::interval WHERE id = %s",
        [delta, job_id],
    )


def age_attempts(job_id: uuid.UUID, delta: str) -> None:
    run_sql(
        "UPDATE runledger_job_attempts SET finished_at = now() - %s::interval, "
        "leased_at = now() - %s::interval WHERE job_id = %s",
        [delta, delta, job_id],
    )


def expire_lease(job_id: uuid.UUID) -> None:
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '1 second' "
        "WHERE id = %s",
        [job_id],
    )


def metrics(scope: ReadScope = ReadScope.ADMIN, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return {row.job_type: row.to_dict() for row in job_metrics(scope=scope, **kwargs)}


def zero(job_type: str, **counts: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_type": job_type,
        "due_count": 0,
        "scheduled_count": 0,
        "leased_count": 0,
        "expired_lease_count": 0,
        "succeeded_24h": 0,
        "retried_24h": 0,
        "dead_lettered_24h": 0,
        "oldest_due_at": None,
        "paused": False,
    }
    row.update(counts)
    return row


def stamp(value: dt.datetime) -> str | None:
    """How ``to_dict()`` writes a timestamp."""
    return format_timestamp(value)


@pytest.fixture
def definitions() -> None:
    for job_type in (TYPE_A, TYPE_B, TYPE_OLD):
        JobDefinition.objects.create(job_type=job_type, max_attempts=3)


@pytest.fixture
def populations(definitions: None) -> dict[str, Any]:
    """TYPE_A has one row in every population; TYPE_B one success, for an organization;
    TYPE_OLD only history older than a day. Returns the ids and times the tests compare."""
    finish(TYPE_A, "succeeded")
    finish(TYPE_A, "succeeded")
    retried = finish(TYPE_A, "retried")  # PENDING again, its retry a minute away: scheduled
    finish(TYPE_A, "dead_lettered")
    live = enqueue(TYPE_A)
    claim(TYPE_A)
    expired = enqueue(TYPE_A)
    claim(TYPE_A)
    expire_lease(expired)
    oldest_due = enqueue(TYPE_A)
    set_next_run(oldest_due, "-10 minutes")
    newer_due = enqueue(TYPE_A)
    set_next_run(newer_due, "-1 minute")
    later = enqueue(TYPE_A)
    set_next_run(later, "1 hour")
    finish(TYPE_B, "succeeded", org=ORG)
    old = finish(TYPE_OLD, "succeeded")
    age_attempts(old, "2 days")
    old_dead = finish(TYPE_OLD, "dead_lettered", org=ORG)
    age_attempts(old_dead, "25 hours")
    return {"live": live, "expired": expired, "retried": retried, "now": db_now()}


def test_job_metrics__every_population__counted_per_type(populations: dict[str, Any]) -> None:
    rows = metrics()

    assert rows == {
        TYPE_A: zero(
            TYPE_A,
            due_count=2,
            scheduled_count=2,
            leased_count=2,
            expired_lease_count=1,
            succeeded_24h=2,
            retried_24h=1,
            dead_lettered_24h=1,
            oldest_due_at=stamp(populations["now"] - dt.timedelta(minutes=10)),
        ),
        TYPE_B: zero(TYPE_B, succeeded_24h=1),
    }


def test_job_metrics__scopes__select_rows_by_organization(populations: dict[str, Any]) -> None:
    assert list(metrics(ReadScope.GLOBAL)) == [TYPE_A]
    assert metrics(ReadScope.organization(ORG)) == {TYPE_B: zero(TYPE_B, succeeded_24h=1)}
    assert metrics(ReadScope.organization(OTHER_ORG)) == {}


def test_job_metrics__attempt_window__exactly_24_hours_counts(definitions: None) -> None:
    inside = finish(TYPE_A, "succeeded")
    age_attempts(inside, "24 hours")
    outside = finish(TYPE_B, "succeeded")
    age_attempts(outside, "24 hours 1 microsecond")

    assert metrics() == {TYPE_A: zero(TYPE_A, succeeded_24h=1)}


def test_job_metrics__due_boundary__next_run_at_now_is_due(definitions: None) -> None:
    now_job = enqueue(TYPE_A)
    set_next_run(now_job, "0 seconds")
    future = enqueue(TYPE_A)
    set_next_run(future, "1 microsecond")

    [row] = job_metrics(scope=ReadScope.ADMIN)

    assert (row.due_count, row.scheduled_count, row.oldest_due_at) == (1, 1, db_now())


def test_job_metrics__canceled_pending_job__leaves_the_queue(definitions: None) -> None:
    """Cancelled before it ran: no longer due, and no attempt to count."""
    job_id = enqueue(TYPE_A)
    assert metrics()[TYPE_A]["due_count"] == 1

    cancel_job(job_id, scope=ReadScope.ADMIN)

    assert metrics() == {}


def test_job_metrics__job_type_filter__is_exact(populations: dict[str, Any]) -> None:
    assert list(metrics(job_type=TYPE_B)) == [TYPE_B]
    assert metrics(job_type="jobs.test.job_metrics") == {}
    assert metrics(job_type=TYPE_B.upper()) == {}


def test_job_metrics__pages__stable_job_type_order(definitions: None) -> None:
    types = [f"jobs.test.job_metrics.page.{n}" for n in range(5)]
    for job_type in reversed(types):
        JobDefinition.objects.create(job_type=job_type)
        enqueue(job_type)

    first = [row.job_type for row in job_metrics(scope=ReadScope.ADMIN, limit=2)]
    second = [row.job_type for row in job_metrics(scope=ReadScope.ADMIN, limit=2, offset=2)]
    rest = [row.job_type for row in job_metrics(scope=ReadScope.ADMIN, limit=10, offset=4)]

    assert first + second + rest == types


def test_job_metrics__to_dict__json_ready(populations: dict[str, Any]) -> None:
    [row] = job_metrics(scope=ReadScope.ADMIN, job_type=TYPE_A)

    data = json.loads(json.dumps(row.to_dict()))

    assert list(data) == [
        "job_type",
        "due_count",
        "scheduled_count",
        "leased_count",
        "expired_lease_count",
        "succeeded_24h",
        "retried_24h",
        "dead_lettered_24h",
        "oldest_due_at",
        "paused",
    ]
    assert data["oldest_due_at"].endswith("Z")


@pytest.mark.parametrize("bad_scope", MALFORMED_SCOPES)
def test_job_metrics__malformed_scope__invalid_argument_before_any_sql(
    bad_scope: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        job_metrics(scope=bad_scope)
    assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"limit": 0}, "job.invalid_pagination"),
        ({"limit": 1001}, "job.invalid_pagination"),
        ({"offset": -1}, "job.invalid_pagination"),
        ({"limit": True}, "job.invalid_pagination"),
        ({"job_type": 7}, "job.invalid_argument"),
        ({"job_type": "x" * 5000}, "job.invalid_argument"),
    ],
)
def test_job_metrics__bad_arguments__validation_error_before_any_sql(
    kwargs: dict[str, Any], code: str, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        job_metrics(scope=ReadScope.ADMIN, **kwargs)
    assert info.value.code == code


# --- plans ---------------------------------------------------------------------------------


@pytest.fixture
def bulk_history(definitions: None) -> list[uuid.UUID]:
    """Thousands of jobs over 400 hours (mostly finished, a few pending or leased) and their
    attempts, over many tenants and a global share, then ANALYZE: the planner's own costs must
    pick the indexes, as they would on a large queue."""
    orgs = [uuid.uuid4() for _ in range(20)]
    run_sql(
        """
        INSERT INTO runledger_job_queue (
            job_type, organization_id, payload, status, max_attempts, next_run_at, attempt,
            worker_id, lease_expires_at, finished_at, created_at)
        SELECT %(type)s, org, '{}', s.status, 3,
               now() - make_interval(hours => n), 1,
               CASE WHEN s.status = 'LEASED' THEN 'w' END,
               CASE WHEN s.status = 'LEASED' THEN now() + interval '1 minute' END,
               CASE WHEN s.status = 'SUCCEEDED' THEN now() - make_interval(hours => n) END,
               now() - make_interval(hours => n)
        FROM unnest(%(orgs)s::uuid[] || ARRAY[NULL::uuid]) AS org,
             generate_series(1, 400) AS n,
             LATERAL (SELECT CASE WHEN n %% 50 = 0 THEN 'PENDING'
                                  WHEN n %% 97 = 0 THEN 'LEASED'
                                  ELSE 'SUCCEEDED' END AS status) AS s
        """,
        {"type": TYPE_A, "orgs": orgs},
    )
    run_sql(
        """
        INSERT INTO runledger_job_attempts (
            job_id, job_type, organization_id, run_number, attempt, worker_id, leased_at,
            finished_at, outcome)
        SELECT id, job_type, organization_id, 1, 1, 'w', finished_at, finished_at, 'SUCCEEDED'
        FROM runledger_job_queue WHERE status = 'SUCCEEDED'
        """
    )
    run_sql("ANALYZE runledger_job_queue")
    run_sql("ANALYZE runledger_job_attempts")
    return orgs


@pytest.mark.parametrize("scope_name", ["admin", "global", "organization"])
def test_job_metrics__large_queue__every_population_read_from_an_index(
    bulk_history: list[uuid.UUID], scope_name: str
) -> None:
    scope = {
        "admin": ReadScope.ADMIN,
        "global": ReadScope.GLOBAL,
        "organization": ReadScope.organization(bulk_history[3]),
    }[scope_name]
    with CaptureQueriesContext(connection) as queries:
        [row] = job_metrics(scope=scope)
    (query,) = queries.captured_queries
    plan = explain(query["sql"])

    # A day is n <= 24 (an hour apart); none of those is pending (n % 50) or leased (n % 97).
    assert row.succeeded_24h == (24 * 21 if scope_name == "admin" else 24)
    # The few LEASED rows come from idx_job_queue_leased_expiry or, for a tenant's handful, an
    # index the planner prefers for that scope: any index (no table scan, asserted below).
    expected = {"idx_job_attempts_finished_metrics"}
    if scope_name != "admin":
        # The scope fixes the pending index's leading column: one tenant's rows, not all.
        expected.add("idx_job_queue_pending_metrics")
    assert _index_names(plan) >= expected
    assert _seq_scans(plan) == set()

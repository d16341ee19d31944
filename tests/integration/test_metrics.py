"""intent_metrics: the three populations, 24-hour windows, scopes, stable paging, exact filter
and index-backed plans.

Fixtures set states and timestamps with raw UPDATEs that respect the lifecycle CHECK; the
windows use the transaction's ``now()``, so inside the test's transaction they are exact. One
test runs with ``transaction=True`` because it reaches the conflicted state through a real
promotion, which refuses to run inside an atomic block.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoAssertNumQueries

from runledger_django import (
    IntentMetrics,
    IntentStatus,
    ReadScope,
    RunledgerError,
    enqueue_job,
    get_intent,
    intent_metrics,
    promote_intents,
    record_intent,
)
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobDefinition
from tests.integration.test_reads import MALFORMED_SCOPES, _index_names, _seq_scans, explain

pytestmark = pytest.mark.django_db

TYPE_A = "jobs.test.metrics.a"
TYPE_B = "jobs.test.metrics.b"
TYPE_C = "jobs.test.metrics.c"
TYPE_OLD = "jobs.test.metrics.old"
ORG_A = uuid.UUID("0190a6b2-0000-7000-8000-000000000a0a")
ORG_B = uuid.UUID("0190a6b2-0000-7000-8000-000000000b0b")
ORG_UNKNOWN = uuid.UUID("0190a6b2-0000-7000-8000-000000000c0c")
SCOPES = {
    "global": ReadScope.GLOBAL,
    "org-a": ReadScope.organization(ORG_A),
    "org-b": ReadScope.organization(ORG_B),
    "org-unknown": ReadScope.organization(ORG_UNKNOWN),
    "admin": ReadScope.ADMIN,
}
TERMINAL_ATTEMPTS = 7
"""Larger than any pending row's attempts: leaking terminal rows into max would show."""


def _sql(statement: str, params: list[Any] | dict[str, Any] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        row = cursor.fetchone()
    assert row is not None
    return dt.datetime.fromisoformat(str(row[0])) if not isinstance(row[0], dt.datetime) else row[0]


@pytest.fixture
def job_id(make_definition: Callable[..., JobDefinition]) -> uuid.UUID:
    """A job for promoted intents to point at (the foreign key is immediate)."""
    make_definition(TYPE_A)
    return Job.objects.create(job_type_id=TYPE_A, max_attempts=1).id


_ERROR = (
    "last_error_code = 'job.idempotency_conflict',"
    " last_error_message = 'Job enqueue retry conflicts with the existing idempotency key.'"
)
_STATE_SQL = {
    "fresh": "",
    "retry": (
        ", promotion_attempts = 3, last_attempted_at = now() - %(at)s,"
        " last_error_code = 'db.query_failed', last_error_message = 'Database operation failed.'"
    ),
    "conflicted": (
        ", status = 'CONFLICTED', promotion_attempts = %(attempts)s,"
        " last_attempted_at = now() - %(at)s, conflicted_at = now() - %(at)s, " + _ERROR
    ),
    "promoted": (
        ", status = 'PROMOTED', promotion_attempts = %(attempts)s,"
        " last_attempted_at = now() - %(at)s, promoted_at = now() - %(at)s,"
        " promoted_job_id = %(job_id)s"
    ),
}
"""What each state's UPDATE sets besides created_at (the lifecycle CHECK holds throughout)."""


@pytest.fixture
def make_intent(job_id: uuid.UUID) -> Callable[..., uuid.UUID]:
    """Record an intent, then age it and move it to a lifecycle state with one raw UPDATE."""

    def make(
        job_type: str,
        org: uuid.UUID | None,
        state: str = "fresh",
        *,
        created_hours_ago: float = 0,
        at: dt.timedelta = dt.timedelta(hours=1),
    ) -> uuid.UUID:
        intent_id = record_intent(
            job_type, {}, idempotency_key=str(uuid.uuid4()), organization_id=org
        ).intent_id
        _sql(
            "UPDATE runledger_job_enqueue_intents SET created_at = now() - %(created)s"
            + _STATE_SQL[state]
            + " WHERE id = %(id)s",
            {
                "created": dt.timedelta(hours=created_hours_ago),
                "at": at,
                "attempts": TERMINAL_ATTEMPTS,
                "job_id": job_id,
                "id": intent_id,
            },
        )
        return intent_id

    return make


def _metrics(scope: ReadScope, **kwargs: Any) -> list[IntentMetrics]:
    return intent_metrics(scope=scope, **kwargs)


def _row(
    job_type: str,
    pending: int = 0,
    retrying: int = 0,
    max_attempts: int = 0,
    conflicted: int = 0,
    promoted: int = 0,
    oldest: dt.datetime | None = None,
) -> IntentMetrics:
    return IntentMetrics(
        job_type=job_type,
        pending_count=pending,
        retrying_count=retrying,
        max_promotion_attempts=max_attempts,
        conflicted_24h=conflicted,
        promoted_24h=promoted,
        oldest_pending_at=oldest,
    )


# --- the exact fixture of reference 8.1 ---------------------------------------------------

OLD = dt.timedelta(hours=25)


@pytest.fixture
def populations(make_intent: Callable[..., uuid.UUID]) -> dt.datetime:
    """Per scope (global n=1, tenant A n=2, tenant B n=4), for type a: n retry-pending rows
    created 1..n hours ago, one fresh pending row, n+1 recent conflicted and n+2 recent
    promoted rows, and one old (25 h) conflicted and promoted row each (created 30 days ago);
    old terminal rows for the old type; a recent promoted row for b; a fresh pending row for c.
    Returns the base time (the transaction's now())."""
    for org, n in ((None, 1), (ORG_A, 2), (ORG_B, 4)):
        for hours in range(1, n + 1):
            make_intent(TYPE_A, org, "retry", created_hours_ago=hours)
        make_intent(TYPE_A, org)
        for _ in range(n + 1):
            make_intent(TYPE_A, org, "conflicted", created_hours_ago=2)
        for _ in range(n + 2):
            make_intent(TYPE_A, org, "promoted", created_hours_ago=2)
        for job_type in (TYPE_A, TYPE_OLD):
            make_intent(job_type, org, "conflicted", created_hours_ago=720, at=OLD)
            make_intent(job_type, org, "promoted", created_hours_ago=720, at=OLD)
        make_intent(TYPE_B, org, "promoted")
        make_intent(TYPE_C, org)
    return _now()


EXPECTED_A = {
    "global": (2, 1, 3, 2, 3, 1),
    "org-a": (3, 2, 3, 3, 4, 2),
    "org-b": (5, 4, 3, 5, 6, 4),
    "admin": (10, 7, 3, 10, 13, 4),
}
"""pending, retrying, max attempts, conflicted_24h, promoted_24h, oldest (hours before base)."""


@pytest.mark.parametrize("scope_name", EXPECTED_A)
def test_intent_metrics__every_scope__counts_each_population(
    populations: dt.datetime, scope_name: str
) -> None:
    base = populations
    scope = SCOPES[scope_name]
    pending, retrying, max_attempts, conflicted, promoted, oldest = EXPECTED_A[scope_name]
    scopes_counted = 3 if scope_name == "admin" else 1

    rows = _metrics(scope)

    assert rows == [
        _row(
            TYPE_A,
            pending,
            retrying,
            max_attempts,
            conflicted,
            promoted,
            base - dt.timedelta(hours=oldest),
        ),
        _row(TYPE_B, promoted=scopes_counted),
        _row(TYPE_C, pending=scopes_counted, oldest=base),
    ]
    assert _metrics(scope, job_type=TYPE_A) == rows[:1]
    assert _metrics(scope, limit=1, offset=1) == rows[1:2]
    assert _metrics(scope, limit=2, offset=2) == rows[2:]
    assert _metrics(scope, offset=3) == []


def test_intent_metrics__unknown_organization__no_rows(populations: dt.datetime) -> None:
    assert _metrics(SCOPES["org-unknown"]) == []


def test_intent_metrics__job_type_filter__is_exact(populations: dt.datetime) -> None:
    """Old-only types, prefixes, LIKE patterns and other cases match nothing, in every scope."""
    misses = [
        TYPE_OLD,
        "jobs.test.metrics",
        "jobs.test.metrics.%",
        "jobs.test.metrics._",
        "%",
        "JOBS.TEST.METRICS.A",
        "",
    ]
    for scope in SCOPES.values():
        for job_type in misses:
            assert _metrics(scope, job_type=job_type) == [], (scope, job_type)


def test_intent_metrics__terminal_rows_only_older_than_a_day__type_omitted(
    make_intent: Callable[..., uuid.UUID],
) -> None:
    make_intent(TYPE_OLD, None, "conflicted", at=OLD)
    make_intent(TYPE_OLD, None, "promoted", at=OLD)

    assert _metrics(ReadScope.ADMIN) == []


def test_intent_metrics__window_boundary__exactly_24_hours_counts(
    make_intent: Callable[..., uuid.UUID],
) -> None:
    day = dt.timedelta(hours=24)
    just_over = day + dt.timedelta(microseconds=1)
    make_intent(TYPE_A, ORG_A, "conflicted", at=day)
    make_intent(TYPE_A, ORG_A, "conflicted", at=just_over)
    make_intent(TYPE_A, ORG_A, "promoted", at=day)
    make_intent(TYPE_A, ORG_A, "promoted", at=just_over)

    assert _metrics(ReadScope.organization(ORG_A)) == [_row(TYPE_A, conflicted=1, promoted=1)]


def test_intent_metrics__only_recent_promotions__zero_pending_and_no_oldest(
    make_intent: Callable[..., uuid.UUID],
) -> None:
    make_intent(TYPE_B, None, "promoted")

    (row,) = _metrics(ReadScope.GLOBAL)

    assert row == _row(TYPE_B, promoted=1)
    assert row.oldest_pending_at is None
    assert row.to_dict() == {
        "job_type": TYPE_B,
        "pending_count": 0,
        "retrying_count": 0,
        "max_promotion_attempts": 0,
        "conflicted_24h": 0,
        "promoted_24h": 1,
        "oldest_pending_at": None,
    }


def test_intent_metrics__pending_rows__oldest_and_json(
    make_intent: Callable[..., uuid.UUID],
) -> None:
    make_intent(TYPE_C, None, created_hours_ago=2)
    make_intent(TYPE_C, None, "retry")
    base = _now()

    (row,) = _metrics(ReadScope.GLOBAL)

    assert row == _row(TYPE_C, 2, 1, 3, oldest=base - dt.timedelta(hours=2))
    data = row.to_dict()
    assert data["oldest_pending_at"] == (base - dt.timedelta(hours=2)).astimezone(dt.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    assert json.loads(json.dumps(data)) == data


def test_intent_metrics__no_definition_needed__missing_types_stay_visible() -> None:
    record_intent("jobs.test.metrics.undefined", {}, idempotency_key="k")

    assert [row.job_type for row in _metrics(ReadScope.ADMIN)] == ["jobs.test.metrics.undefined"]
    assert not JobDefinition.objects.exists()


# --- bounded, stable pages ---------------------------------------------------------------


def test_intent_metrics__pages__bounded_in_stable_job_type_order(
    make_intent: Callable[..., uuid.UUID],
) -> None:
    for job_type in (TYPE_C, TYPE_A, TYPE_B):
        make_intent(job_type, ORG_A)
    make_intent("jobs.test.metrics.global", None)
    scope = ReadScope.organization(ORG_A)

    assert [row.job_type for row in _metrics(scope, limit=2)] == [TYPE_A, TYPE_B]
    assert [row.job_type for row in _metrics(scope, limit=2, offset=2)] == [TYPE_C]
    assert [row.job_type for row in _metrics(scope, job_type=TYPE_B)] == [TYPE_B]
    assert [row.job_type for row in _metrics(ReadScope.GLOBAL)] == ["jobs.test.metrics.global"]


@pytest.mark.parametrize("scope_name", SCOPES)
@pytest.mark.parametrize(
    ("limit", "offset"),
    [(0, 0), (-1, 0), (1001, 0), (1, -1), (True, 0), (1, True), (2.0, 0), ("1", 0), (None, 0)],
)
def test_intent_metrics__invalid_page__invalid_pagination(
    scope_name: str, limit: Any, offset: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        intent_metrics(scope=SCOPES[scope_name], limit=limit, offset=offset)
    assert (info.value.code, info.value.category) == (
        "job.invalid_pagination",
        ErrorCategory.VALIDATION,
    )


@pytest.mark.parametrize(("limit", "offset"), [(1, 0), (1000, 0), (1000, 2**63 - 1)])
def test_intent_metrics__page_bounds__accepted(limit: int, offset: int) -> None:
    assert intent_metrics(scope=ReadScope.ADMIN, limit=limit, offset=offset) == []


@pytest.mark.parametrize("bad_scope", MALFORMED_SCOPES)
def test_intent_metrics__malformed_scope__invalid_argument(
    make_intent: Callable[..., uuid.UUID],
    bad_scope: Any,
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    """Fails closed: an inconsistent hand-built scope is never read as admin."""
    make_intent(TYPE_A, None)
    make_intent(TYPE_A, ORG_A)

    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        intent_metrics(scope=bad_scope)
    assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scope": ReadScope.ADMIN, "job_type": 42},
        {"scope": ReadScope.ADMIN, "job_type": "a\x00"},
        {"scope": ReadScope.ADMIN, "job_type": "x" * 256},
    ],
)
def test_intent_metrics__bad_argument__invalid_argument(kwargs: dict[str, Any]) -> None:
    with pytest.raises(RunledgerError) as info:
        intent_metrics(**kwargs)
    assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


# --- the conflicted population through a real promotion ---------------------------------


@pytest.mark.django_db(transaction=True)
def test_intent_metrics__conflict_from_promotion__counted_for_24_hours_only(
    make_definition: Callable[..., JobDefinition],
) -> None:
    make_definition(TYPE_A)
    enqueue_job(TYPE_A, {"direct": True}, idempotency_key="k", organization_id=ORG_A)
    intent_id = record_intent(
        TYPE_A, {"intent": True}, idempotency_key="k", organization_id=ORG_A
    ).intent_id
    scope = ReadScope.organization(ORG_A)
    (before,) = _metrics(scope)
    assert (before.pending_count, before.conflicted_24h) == (1, 0)

    report = promote_intents([TYPE_A], limit=1)

    assert (report.conflicted, report.total_promoted) == (1, 0)
    assert _metrics(scope) == [_row(TYPE_A, conflicted=1)]
    _sql(
        "UPDATE runledger_job_enqueue_intents "
        "SET conflicted_at = now() - interval '25 hours' WHERE id = %s",
        [intent_id],
    )
    assert _metrics(scope) == []
    intent = get_intent(intent_id, scope=scope)
    assert intent is not None
    assert intent.status == IntentStatus.CONFLICTED
    assert intent.state.error is not None
    assert intent.state.error.code == "job.idempotency_conflict"


@pytest.mark.django_db(transaction=True)
def test_intent_metrics__promotion__moves_pending_to_promoted_24h(
    make_definition: Callable[..., JobDefinition],
) -> None:
    make_definition(TYPE_A)
    intent_id = record_intent(TYPE_A, {}, idempotency_key="k", organization_id=ORG_A).intent_id
    scope = ReadScope.organization(ORG_A)
    (before,) = _metrics(scope)
    assert (before.pending_count, before.retrying_count, before.max_promotion_attempts) == (1, 0, 0)
    assert before.oldest_pending_at is not None

    assert promote_intents([TYPE_A]).inserted_jobs == 1

    assert _metrics(scope) == [_row(TYPE_A, promoted=1)]
    _sql(
        "UPDATE runledger_job_enqueue_intents "
        "SET promoted_at = now() - interval '25 hours' WHERE id = %s",
        [intent_id],
    )
    assert _metrics(scope) == []


# --- plans ---------------------------------------------------------------------------------


@pytest.fixture
def bulk_populations(job_id: uuid.UUID) -> list[uuid.UUID]:
    """A few thousand intents in all three states over many tenants plus a global share, then
    ANALYZE: the planner's own costs (no disabled seq scans) must pick the partial indexes."""
    orgs = [uuid.uuid4() for _ in range(40)]
    _sql(
        """
        INSERT INTO runledger_job_enqueue_intents
            (job_type, organization_id, payload, idempotency_key, enqueue_request, created_at,
             status, promotion_attempts, last_attempted_at, promoted_job_id, promoted_at,
             conflicted_at, last_error_code, last_error_message)
        SELECT 'jobs.test.plan.' || (n %% 7), org, '{}', 'k' || n, '{}',
               now() - make_interval(mins => n), s.status,
               CASE WHEN s.status = 'PENDING' THEN 0 ELSE 1 END,
               CASE WHEN s.status = 'PENDING' THEN NULL ELSE now() - make_interval(mins => n) END,
               CASE WHEN s.status = 'PROMOTED' THEN %s::uuid END,
               CASE WHEN s.status = 'PROMOTED' THEN now() - make_interval(mins => n) END,
               CASE WHEN s.status = 'CONFLICTED' THEN now() - make_interval(mins => n) END,
               CASE WHEN s.status = 'CONFLICTED' THEN 'job.idempotency_conflict' END,
               CASE WHEN s.status = 'CONFLICTED' THEN 'conflict' END
        FROM unnest(%s::uuid[] || ARRAY[NULL::uuid]) AS org,
             generate_series(1, 100) AS n,
             LATERAL (SELECT CASE n %% 4 WHEN 0 THEN 'PENDING' WHEN 1 THEN 'CONFLICTED'
                                  ELSE 'PROMOTED' END AS status) AS s
        """,
        [job_id, orgs],
    )
    _sql("ANALYZE runledger_job_enqueue_intents")
    return orgs


def test_intent_metrics__global_scope__pending_population_uses_the_global_partial_index(
    bulk_populations: list[uuid.UUID],
) -> None:
    """Without it the global pending count ANDs two bitmaps over every pending row."""
    with CaptureQueriesContext(connection) as queries:
        intent_metrics(scope=ReadScope.GLOBAL)
    (query,) = queries.captured_queries
    plan = explain(query["sql"])

    assert "idx_job_enqueue_intents_global_pending_metrics" in _index_names(plan)
    assert _seq_scans(plan) == set()


def test_intent_metrics__organization_scope__plan_uses_the_org_partial_indexes(
    bulk_populations: list[uuid.UUID],
) -> None:
    org = bulk_populations[5]

    with CaptureQueriesContext(connection) as queries:
        rows = intent_metrics(scope=ReadScope.organization(org))
    (query,) = queries.captured_queries
    plan = explain(query["sql"])

    assert sum(row.pending_count for row in rows) == 25
    assert _index_names(plan) >= {
        "idx_job_enqueue_intents_org_pending_metrics",
        "idx_job_enqueue_intents_org_conflicted_metrics",
        "idx_job_enqueue_intents_org_promoted_metrics",
    }
    assert _seq_scans(plan) == set()

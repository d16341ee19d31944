"""get_intent and list_intents: explicit scopes, filters, order, pagination, lifecycle decoding
and index-backed plans.

Every test runs in the test's rolled-back transaction: reads need no committed visibility.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoAssertNumQueries

from runledger_django import (
    IntentStatus,
    ReadScope,
    RunledgerError,
    get_intent,
    list_intents,
    record_intent,
)
from runledger_django.domain import IntentState, PromotionError
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from tests.conftest import insert_raw_intent

pytestmark = pytest.mark.django_db

READ_TYPE = "jobs.test.read_scope"
OTHER_TYPE = "jobs.test.other"
ORG_A = uuid.UUID("0190a6b2-0000-7000-8000-0000000000aa")
ORG_B = uuid.UUID("0190a6b2-0000-7000-8000-0000000000bb")
ORG_UNKNOWN = uuid.UUID("0190a6b2-0000-7000-8000-0000000000cc")
AT = dt.datetime(2026, 5, 22, 10, 30, 45, 123456, tzinfo=dt.UTC)
SCOPES = {
    "global": ReadScope.GLOBAL,
    "org-a": ReadScope.organization(ORG_A),
    "org-b": ReadScope.organization(ORG_B),
    "org-unknown": ReadScope.organization(ORG_UNKNOWN),
    "admin": ReadScope.ADMIN,
}


def _sql(statement: str, params: list[Any] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@dataclass(frozen=True)
class Fixture:
    """Intents per organization (None = global), newest first."""

    by_org: dict[uuid.UUID | None, list[uuid.UUID]]

    def visible(self, scope: ReadScope) -> list[uuid.UUID]:
        newest_first = self.newest_first()
        if scope.kind == "admin":
            return newest_first
        owner = scope.organization_id if scope.kind == "organization" else None
        return [i for i in newest_first if i in self.by_org.get(owner, [])]

    def newest_first(self) -> list[uuid.UUID]:
        ids = [i for ids in self.by_org.values() for i in ids]
        return sorted(ids, key=lambda i: _ORDER[i])


_ORDER: dict[uuid.UUID, int] = {}


@pytest.fixture
def scoped() -> Fixture:
    """Two intents per scope (global, tenant A, tenant B), interleaved in time.

    created_at runs back one minute per row in recording order, so the newest-first order is
    the recording order.
    """
    by_org: dict[uuid.UUID | None, list[uuid.UUID]] = {None: [], ORG_A: [], ORG_B: []}
    position = 0
    for job_type in (READ_TYPE, OTHER_TYPE):
        for org in (None, ORG_A, ORG_B):
            outcome = record_intent(
                job_type, {"org": str(org)}, idempotency_key="same-key", organization_id=org
            )
            by_org[org].append(outcome.intent_id)
            _sql(
                "UPDATE runledger_job_enqueue_intents "
                "SET created_at = now() - make_interval(mins => %s) WHERE id = %s",
                [position, outcome.intent_id],
            )
            _ORDER[outcome.intent_id] = position
            position += 1
    return Fixture(by_org)


# --- point reads ------------------------------------------------------------------------


@pytest.mark.parametrize("scope_name", SCOPES)
def test_get_intent__each_scope__sees_exactly_its_rows(scoped: Fixture, scope_name: str) -> None:
    scope = SCOPES[scope_name]
    visible = set(scoped.visible(scope))

    for intent_id in scoped.newest_first():
        found = get_intent(intent_id, scope=scope)
        if intent_id in visible:
            assert found is not None
            assert found.id == intent_id
        else:
            assert found is None
    assert get_intent(uuid.uuid4(), scope=scope) is None
    assert get_intent(str(uuid.uuid4()), scope=scope) is None


def test_get_intent__visible_row__carries_every_column(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    outcome = record_intent(
        READ_TYPE,
        {"a": [1, 2]},
        idempotency_key="k",
        organization_id=ORG_A,
        priority=-5,
        max_attempts=4,
        timeout_seconds=45,
        next_run_at=AT,
        stage="scheduled",
        execution_resource_key="res:1",
    )

    with django_assert_num_queries(1):
        intent = get_intent(str(outcome.intent_id), scope=ReadScope.organization(str(ORG_A)))

    assert intent is not None
    assert (intent.id, intent.job_type, intent.organization_id) == (
        outcome.intent_id,
        READ_TYPE,
        ORG_A,
    )
    assert (intent.payload, intent.priority, intent.max_attempts, intent.timeout_seconds) == (
        {"a": [1, 2]},
        -5,
        4,
        45,
    )
    assert (intent.next_run_at, intent.stage, intent.execution_resource_key) == (
        AT,
        "scheduled",
        "res:1",
    )
    assert (intent.idempotency_key, intent.enqueue_request_version, intent.status) == (
        "k",
        1,
        "PENDING",
    )
    assert intent.promoted_job_id is None
    assert intent.state == IntentState(state="initial_pending")


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", 42, None, b"\x00" * 16])
def test_get_intent__malformed_id__invalid_argument(bad_id: Any) -> None:
    with pytest.raises(RunledgerError) as info:
        get_intent(bad_id, scope=ReadScope.ADMIN)
    assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


MALFORMED_SCOPES = [
    pytest.param(None, id="none"),
    pytest.param("admin", id="text"),
    pytest.param(ORG_A, id="bare-uuid"),
    pytest.param(ReadScope(kind="organization"), id="organization-without-tenant"),
    pytest.param(
        ReadScope(kind="organization", organization_id=cast(Any, str(ORG_A))), id="tenant-as-text"
    ),
    pytest.param(ReadScope(kind="global", organization_id=ORG_A), id="global-with-tenant"),
    pytest.param(ReadScope(kind="admin", organization_id=ORG_A), id="admin-with-tenant"),
    pytest.param(ReadScope(kind=cast(Any, "Admin")), id="unknown-kind"),
]
"""Scopes a careless caller can build; each must fail closed, never read as admin or global."""


@pytest.mark.parametrize("bad_scope", MALFORMED_SCOPES)
def test_reads__malformed_scope__invalid_argument_and_nothing_read(
    scoped: Fixture, bad_scope: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    """A scope is never implied: a missing, stringly or hand-built inconsistent scope is a
    caller bug, refused before any SQL."""
    some_id = scoped.newest_first()[0]
    for read in (
        lambda: get_intent(some_id, scope=bad_scope),
        lambda: list_intents(scope=bad_scope),
    ):
        with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
            read()
        assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


# --- lists ------------------------------------------------------------------------------


@pytest.mark.parametrize("scope_name", SCOPES)
def test_list_intents__each_scope__exactly_its_rows_newest_first(
    scoped: Fixture, scope_name: str
) -> None:
    scope = SCOPES[scope_name]

    rows = list_intents(scope=scope)

    assert [row.id for row in rows] == scoped.visible(scope)


def test_list_intents__equal_created_at__ties_break_on_id_descending(scoped: Fixture) -> None:
    _sql("UPDATE runledger_job_enqueue_intents SET created_at = %s", [AT])

    rows = list_intents(scope=ReadScope.ADMIN)

    assert [row.id for row in rows] == sorted(scoped.newest_first(), reverse=True)


@pytest.mark.parametrize("scope_name", SCOPES)
def test_list_intents__pages__concatenate_to_the_full_list(
    scoped: Fixture, scope_name: str
) -> None:
    scope = SCOPES[scope_name]
    pages = [
        [row.id for row in list_intents(scope=scope, limit=2, offset=offset)]
        for offset in range(0, 8, 2)
    ]

    assert [i for page in pages for i in page] == scoped.visible(scope)
    assert all(len(page) <= 2 for page in pages)
    assert list_intents(scope=scope, limit=1000, offset=2**63 - 1) == []


@pytest.mark.parametrize("scope_name", SCOPES)
@pytest.mark.parametrize(
    ("limit", "offset"),
    [
        (0, 0),
        (-1, 0),
        (1001, 0),
        (1, -1),
        (True, 0),
        (1, False),
        (1.5, 0),
        ("10", 0),
        (None, 0),
        (10, None),
        (10, 2**63),
    ],
)
def test_list_intents__invalid_page__invalid_pagination(
    scope_name: str, limit: Any, offset: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        list_intents(scope=SCOPES[scope_name], limit=limit, offset=offset)
    assert (info.value.code, info.value.category) == ("job.invalid_pagination", "validation")
    assert str(info.value) == "Pagination limit and offset are invalid."


@pytest.mark.parametrize(
    "query", ["TEST.READ_SCOPE", "read_scope", "Read_Sc", "jobs.test.read_scope", "SCOPE"]
)
def test_list_intents__job_type_query__case_insensitive_substring(
    scoped: Fixture, query: str
) -> None:
    rows = list_intents(scope=ReadScope.ADMIN, job_type_query=query)

    assert {row.job_type for row in rows} == {READ_TYPE}
    assert len(rows) == 3


def test_list_intents__like_wildcards_in_query__match_literally() -> None:
    """``%`` and ``_`` are characters to find, not LIKE wildcards."""
    types = ["jobs.test.read_scope", "jobs.test.readXscope", "jobs.test.100%", "jobs.test.1000"]
    for job_type in types:
        record_intent(job_type, {}, idempotency_key="k")

    def found(query: str) -> set[str]:
        return {row.job_type for row in list_intents(scope=ReadScope.ADMIN, job_type_query=query)}

    assert found("read_scope") == {"jobs.test.read_scope"}
    assert found("_") == {"jobs.test.read_scope"}
    assert found("%") == {"jobs.test.100%"}
    assert found("100%") == {"jobs.test.100%"}
    assert found("1%0") == set()
    assert found("\\") == set()
    assert found("") == set(types)


@pytest.mark.parametrize(
    ("query", "code"),
    [
        (42, "job.invalid_argument"),
        ("x" * 256, "job.invalid_argument"),
        ("a\x00", "job.invalid_argument"),
    ],
)
def test_list_intents__bad_job_type_query__invalid_argument(query: Any, code: str) -> None:
    with pytest.raises(RunledgerError) as info:
        list_intents(scope=ReadScope.ADMIN, job_type_query=query)
    assert (info.value.code, info.value.category) == (code, "validation")


@pytest.fixture
def lifecycle(make_definition: Callable[..., JobDefinition]) -> dict[str, uuid.UUID]:
    """One intent in each lifecycle state, set with raw UPDATEs that respect the CHECK."""
    make_definition(READ_TYPE)
    job = Job.objects.create(job_type_id=READ_TYPE, max_attempts=1)
    ids = {
        state: record_intent(READ_TYPE, {"s": state}, idempotency_key=state).intent_id
        for state in ("initial_pending", "retry_pending", "promoted", "conflicted")
    }
    _sql(
        "UPDATE runledger_job_enqueue_intents SET promotion_attempts = 1, last_attempted_at = %s,"
        " last_error_code = 'db.query_failed', last_error_message = 'Database operation failed.'"
        " WHERE id = %s",
        [AT, ids["retry_pending"]],
    )
    _sql(
        "UPDATE runledger_job_enqueue_intents SET status = 'PROMOTED', promotion_attempts = 2,"
        " last_attempted_at = %s, promoted_job_id = %s, promoted_at = %s WHERE id = %s",
        [AT, job.id, AT, ids["promoted"]],
    )
    _sql(
        "UPDATE runledger_job_enqueue_intents SET status = 'CONFLICTED', promotion_attempts = 3,"
        " last_attempted_at = %s, conflicted_at = %s, last_error_code = 'job.idempotency_conflict',"
        " last_error_message = 'Job enqueue retry conflicts with the existing idempotency key.'"
        " WHERE id = %s",
        [AT, AT, ids["conflicted"]],
    )
    ids["job"] = job.id
    return ids


@pytest.mark.parametrize("status", list(IntentStatus))
def test_list_intents__status_filter__only_that_status(
    lifecycle: dict[str, uuid.UUID], status: IntentStatus
) -> None:
    by_enum = list_intents(scope=ReadScope.GLOBAL, status=status)
    by_text = list_intents(scope=ReadScope.GLOBAL, status=status.value)

    assert {row.status for row in by_enum} == {status.value}
    assert [row.id for row in by_enum] == [row.id for row in by_text]
    assert len(by_enum) == (2 if status == IntentStatus.PENDING else 1)
    assert list_intents(scope=ReadScope.organization(ORG_A), status=status) == []


@pytest.mark.parametrize("status", ["pending", "UNKNOWN", "", 1])
def test_list_intents__unknown_status__invalid_argument(status: Any) -> None:
    with pytest.raises(RunledgerError) as info:
        list_intents(scope=ReadScope.ADMIN, status=status)
    assert (info.value.code, info.value.category) == ("job.invalid_argument", "validation")


def test_list_intents__status_and_query_together__both_apply(
    lifecycle: dict[str, uuid.UUID],
) -> None:
    record_intent(OTHER_TYPE, {}, idempotency_key="other")

    rows = list_intents(scope=ReadScope.ADMIN, status="PENDING", job_type_query="READ")

    assert {row.id for row in rows} == {lifecycle["initial_pending"], lifecycle["retry_pending"]}


# --- lifecycle state (reference 5) -------------------------------------------------------


def test_intent_state__each_lifecycle__decodes_to_its_json_shape(
    lifecycle: dict[str, uuid.UUID],
) -> None:
    stamp = "2026-05-22T10:30:45.123456Z"
    expected = {
        "initial_pending": {"state": "initial_pending"},
        "retry_pending": {
            "state": "retry_pending",
            "promotion_attempts": 1,
            "last_attempted_at": stamp,
            "error": {"code": "db.query_failed", "message": "Database operation failed."},
        },
        "promoted": {
            "state": "promoted",
            "promotion_attempts": 2,
            "last_attempted_at": stamp,
            "job_id": str(lifecycle["job"]),
            "promoted_at": stamp,
        },
        "conflicted": {
            "state": "conflicted",
            "promotion_attempts": 3,
            "last_attempted_at": stamp,
            "conflicted_at": stamp,
            "error": {
                "code": "job.idempotency_conflict",
                "message": "Job enqueue retry conflicts with the existing idempotency key.",
            },
        },
    }

    for name, shape in expected.items():
        intent = get_intent(lifecycle[name], scope=ReadScope.GLOBAL)
        assert intent is not None
        assert intent.state.to_dict() == shape
        assert json.loads(json.dumps(intent.state.to_dict())) == shape
    promoted = get_intent(lifecycle["promoted"], scope=ReadScope.GLOBAL)
    assert promoted is not None
    assert promoted.state == IntentState(
        state="promoted",
        promotion_attempts=2,
        last_attempted_at=AT,
        job_id=lifecycle["job"],
        promoted_at=AT,
    )
    assert promoted.state.status == IntentStatus.PROMOTED
    conflicted = get_intent(lifecycle["conflicted"], scope=ReadScope.GLOBAL)
    assert conflicted is not None
    assert conflicted.state.error == PromotionError(
        code="job.idempotency_conflict",
        message="Job enqueue retry conflicts with the existing idempotency key.",
    )


_INITIAL: dict[str, Any] = {
    "status": "PENDING",
    "promotion_attempts": 0,
    "last_attempted_at": None,
    "promoted_job_id": None,
    "promoted_at": None,
    "conflicted_at": None,
    "last_error_code": None,
    "last_error_message": None,
}
_ERROR = {"last_error_code": "db.query_failed", "last_error_message": "Database operation failed."}
_ATTEMPTED = {"promotion_attempts": 1, "last_attempted_at": AT}
_JOB = uuid.UUID(int=99)


@pytest.mark.parametrize(
    "columns",
    [
        pytest.param({"status": "UNKNOWN"}, id="unknown-status"),
        pytest.param({"status": "pending"}, id="lowercase-status"),
        pytest.param({"last_attempted_at": AT}, id="attempted-initial"),
        pytest.param({"promotion_attempts": 1}, id="attempts-without-time-or-error"),
        pytest.param({**_ATTEMPTED}, id="retry-without-error"),
        pytest.param({**_ATTEMPTED, "last_error_code": "x"}, id="retry-without-message"),
        pytest.param({**_ATTEMPTED, **_ERROR, "last_error_code": " "}, id="blank-error-code"),
        pytest.param({**_ATTEMPTED, **_ERROR, "last_error_message": ""}, id="empty-message"),
        pytest.param({**_ERROR}, id="error-on-initial"),
        pytest.param({**_ATTEMPTED, **_ERROR, "conflicted_at": AT}, id="pending-with-conflict"),
        pytest.param({"promoted_job_id": _JOB}, id="pending-with-job"),
        pytest.param({"status": "PROMOTED", **_ATTEMPTED, "promoted_at": AT}, id="promoted-no-job"),
        pytest.param(
            {"status": "PROMOTED", **_ATTEMPTED, "promoted_job_id": _JOB}, id="promoted-no-time"
        ),
        pytest.param(
            {"status": "PROMOTED", "promoted_job_id": _JOB, "promoted_at": AT},
            id="promoted-no-attempt",
        ),
        pytest.param(
            {
                "status": "PROMOTED",
                **_ATTEMPTED,
                "promoted_job_id": _JOB,
                "promoted_at": AT,
                **_ERROR,
            },
            id="promoted-with-error",
        ),
        pytest.param(
            {
                "status": "PROMOTED",
                **_ATTEMPTED,
                "promoted_job_id": _JOB,
                "promoted_at": AT,
                "conflicted_at": AT,
            },
            id="promoted-and-conflicted",
        ),
        pytest.param({"status": "CONFLICTED", **_ATTEMPTED, **_ERROR}, id="conflicted-no-time"),
        pytest.param(
            {"status": "CONFLICTED", **_ATTEMPTED, "conflicted_at": AT}, id="conflicted-no-error"
        ),
        pytest.param(
            {
                "status": "CONFLICTED",
                **_ATTEMPTED,
                "conflicted_at": AT,
                **_ERROR,
                "promoted_job_id": _JOB,
            },
            id="conflicted-with-job",
        ),
        pytest.param(
            {
                "status": "CONFLICTED",
                **_ATTEMPTED,
                "conflicted_at": AT,
                **_ERROR,
                "promoted_at": AT,
            },
            id="conflicted-with-promoted-at",
        ),
        pytest.param(
            {"status": "CONFLICTED", "conflicted_at": AT, **_ERROR}, id="conflicted-no-attempt"
        ),
    ],
)
def test_intent_state__impossible_lifecycle__invalid_persisted_row(columns: dict[str, Any]) -> None:
    intent = JobEnqueueIntent(**{**_INITIAL, **columns})

    with pytest.raises(RunledgerError) as info:
        intent.state  # noqa: B018

    assert (info.value.code, info.value.category) == (
        "job.intent_invalid_persisted_row",
        ErrorCategory.INTERNAL,
    )
    assert str(info.value) == "Job enqueue intent contains invalid persisted state."


def test_reads__row_breaking_the_lifecycle_check__invalid_persisted_row() -> None:
    """Only a row written behind the CHECK's back (here: with it dropped) can be this corrupt."""
    intent_id = record_intent(READ_TYPE, {}, idempotency_key="corrupt").intent_id
    _sql(
        "ALTER TABLE runledger_job_enqueue_intents "
        "DROP CONSTRAINT chk_job_enqueue_intents_state_fields"
    )
    _sql(
        "UPDATE runledger_job_enqueue_intents SET last_attempted_at = now() WHERE id = %s",
        [intent_id],
    )

    for read in (
        lambda: get_intent(intent_id, scope=ReadScope.GLOBAL),
        lambda: list_intents(scope=ReadScope.ADMIN),
    ):
        with pytest.raises(RunledgerError) as info:
            read()
        assert (info.value.code, info.value.category) == (
            "job.intent_invalid_persisted_row",
            ErrorCategory.INTERNAL,
        )


def test_reads__unknown_persisted_stage__internal_invalid_stage() -> None:
    """The database allows any non-blank stage; a row from a newer writer fails to decode."""
    intent_id = insert_raw_intent(job_type=READ_TYPE, stage="future_stage")

    with pytest.raises(RunledgerError) as info:
        get_intent(intent_id, scope=ReadScope.ADMIN)

    assert (info.value.code, info.value.category) == ("job.invalid_stage", ErrorCategory.INTERNAL)
    assert str(info.value) == "Job stage in persisted row is invalid."


def test_reads__blank_persisted_job_type__internal_invalid_job_type() -> None:
    intent_id = record_intent(READ_TYPE, {}, idempotency_key="blank-type").intent_id
    _sql(
        "ALTER TABLE runledger_job_enqueue_intents "
        "DROP CONSTRAINT chk_job_enqueue_intents_job_type_not_blank"
    )
    _sql("UPDATE runledger_job_enqueue_intents SET job_type = '\u00a0' WHERE id = %s", [intent_id])

    with pytest.raises(RunledgerError) as info:
        get_intent(intent_id, scope=ReadScope.GLOBAL)

    assert (info.value.code, info.value.category) == (
        "job.invalid_job_type",
        ErrorCategory.INTERNAL,
    )
    assert str(info.value) == "Job type in persisted row is invalid."


def test_reads__long_persisted_job_type__still_readable() -> None:
    """The 255-byte limit guards new requests; reading an existing row must not fail with a
    validation error the caller cannot fix."""
    long_type = "jobs." + "x" * 300
    intent_id = insert_raw_intent(job_type=long_type)

    intent = get_intent(intent_id, scope=ReadScope.GLOBAL)

    assert intent is not None
    assert intent.job_type == long_type
    assert [row.id for row in list_intents(scope=ReadScope.GLOBAL)] == [intent_id]


# --- plans ---------------------------------------------------------------------------------


def _index_names(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for value in plan.values():
            found |= _index_names(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _index_names(value)
    return found


def _seq_scans(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan":
            found.add(plan.get("Relation Name", "?"))
        for value in plan.values():
            found |= _seq_scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _seq_scans(value)
    return found


def explain(sql: str) -> Any:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        row = cursor.fetchone()
    assert row is not None
    return row[0] if not isinstance(row[0], str) else json.loads(row[0])


def bulk_intents(tenants: int = 40, per_tenant: int = 100) -> list[uuid.UUID]:
    """A few thousand intents over many tenants and a global share, then ANALYZE, so the
    planner's own cost model (not a disabled seq scan) decides for the indexes."""
    orgs = [uuid.uuid4() for _ in range(tenants)]
    _sql(
        """
        INSERT INTO runledger_job_enqueue_intents
            (job_type, organization_id, payload, idempotency_key, enqueue_request, created_at)
        SELECT 'jobs.test.plan.' || (n %% 7), org, '{}', 'k' || n, '{}',
               now() - make_interval(secs => n)
        FROM unnest(%s::uuid[] || ARRAY[NULL::uuid]) AS org, generate_series(1, %s) AS n
        """,
        [orgs, per_tenant],
    )
    _sql("ANALYZE runledger_job_enqueue_intents")
    return orgs


def test_list_intents__organization_scope__plan_uses_org_created_index() -> None:
    orgs = bulk_intents()
    scope = ReadScope.organization(orgs[3])

    with CaptureQueriesContext(connection) as queries:
        rows = list_intents(scope=scope, limit=50)
    (query,) = queries.captured_queries
    plan = explain(query["sql"])

    assert len(rows) == 50
    assert {row.organization_id for row in rows} == {orgs[3]}
    assert "idx_job_enqueue_intents_org_created" in _index_names(plan)
    assert _seq_scans(plan) == set()


def test_list_intents__admin_scope__plan_uses_created_index() -> None:
    bulk_intents()

    with CaptureQueriesContext(connection) as queries:
        list_intents(scope=ReadScope.ADMIN, limit=50, offset=100)
    (query,) = queries.captured_queries
    plan = explain(query["sql"])

    assert "idx_job_enqueue_intents_created" in _index_names(plan)
    assert _seq_scans(plan) == set()

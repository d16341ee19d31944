"""record_intent: insert-or-resolve, strict idempotency, scopes, transactions and validation.

Most tests run inside the test's rolled-back transaction, which record_intent joins. Tests
marked ``transaction=True`` need what that cannot give: the owned-transaction path (no atomic
block around the call), a session default or isolation level set before the transaction
starts, committed rows seen from another session, or promotion (which refuses to run inside
an atomic block).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any, LiteralString

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from psycopg.types.json import Jsonb
from pytest_django import DjangoAssertNumQueries
from pytest_django import Settings as SettingsWrapper

from example_project.shop.models import Order
from runledger_django import (
    IntentOutcome,
    IntentStatus,
    ReadScope,
    RunledgerError,
    enqueue_job,
    get_intent,
    promote_intents,
    record_intent,
)
from runledger_django.domain import JobStage
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent, JobEvent
from runledger_django.services.intents import decode_outcome_status
from tests.conftest import TEST_JOB_TYPE

pytestmark = pytest.mark.django_db

JOB_TYPE = TEST_JOB_TYPE
ORG_A = uuid.UUID("0190a6b2-0000-7000-8000-00000000000a")
ORG_B = uuid.UUID("0190a6b2-0000-7000-8000-00000000000b")
RUN_AT = dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)


def _record(
    payload: Any = None, *, key: str = "key-1", job_type: str = JOB_TYPE, **kwargs: Any
) -> IntentOutcome:
    return record_intent(
        job_type, {"n": 1} if payload is None else payload, idempotency_key=key, **kwargs
    )


def _row(intent_id: uuid.UUID) -> dict[str, Any]:
    return dict(JobEnqueueIntent.objects.values().get(id=intent_id))


def _count(key: str = "key-1") -> int:
    return JobEnqueueIntent.objects.filter(idempotency_key=key).count()


def _assert_error(error: RunledgerError, code: str, category: ErrorCategory) -> None:
    assert (error.code, error.category) == (code, category)


# --- recording and strict idempotency ------------------------------------------------------


def test_record_intent__no_definition__inserts_pending_row_only() -> None:
    """Recording needs no job definition and creates no job, event or definition."""
    outcome = _record({"order": 7})

    assert outcome.status == IntentStatus.PENDING
    assert (outcome.disposition, outcome.job_id) == ("inserted", None)
    row = _row(outcome.intent_id)
    for volatile in ("created_at", "updated_at", "next_promotion_at"):
        assert isinstance(row.pop(volatile), dt.datetime)
    assert row == {
        "id": outcome.intent_id,
        "job_type": JOB_TYPE,
        "organization_id": None,
        "payload": {"order": 7},
        "priority": None,
        "max_attempts": None,
        "timeout_seconds": None,
        "next_run_at": None,
        "idempotency_key": "key-1",
        "stage": "queued",
        "enqueue_request_version": 1,
        "enqueue_request": {
            "payload": {"order": 7},
            "priority": None,
            "max_attempts": None,
            "timeout_seconds": None,
            "next_run_at": None,
            "stage": "queued",
        },
        "execution_resource_key": None,
        "trace_context": None,
        "promotion_attempts": 0,
        "last_attempted_at": None,
        "status": "PENDING",
        "promoted_job_id": None,
        "promoted_at": None,
        "conflicted_at": None,
        "last_error_code": None,
        "last_error_message": None,
    }
    assert (Job.objects.count(), JobEvent.objects.count(), JobDefinition.objects.count()) == (
        0,
        0,
        0,
    )


def test_record_intent__every_field__stored_with_golden_snapshot() -> None:
    outcome = _record(
        {"kind": "golden"},
        organization_id=str(ORG_A),
        priority=10,
        max_attempts=3,
        timeout_seconds=30,
        next_run_at=dt.datetime(2026, 5, 22, 12, 30, 45, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        stage=JobStage.SCHEDULED,
        execution_resource_key="analytics:account:acct_1",
    )

    row = _row(outcome.intent_id)
    assert row["organization_id"] == ORG_A
    assert (row["priority"], row["max_attempts"], row["timeout_seconds"]) == (10, 3, 30)
    assert row["next_run_at"] == dt.datetime(2026, 5, 22, 10, 30, 45, tzinfo=dt.UTC)
    assert (row["stage"], row["execution_resource_key"]) == (
        "scheduled",
        "analytics:account:acct_1",
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT enqueue_request::text FROM runledger_job_enqueue_intents WHERE id = %s",
            [outcome.intent_id],
        )
        (snapshot_text,) = cursor.fetchone() or ("",)
    assert json.loads(snapshot_text) == {
        "payload": {"kind": "golden"},
        "priority": 10,
        "max_attempts": 3,
        "timeout_seconds": 30,
        "next_run_at": "2026-05-22T10:30:45.000000Z",
        "stage": "scheduled",
        "execution_resource_key": "analytics:account:acct_1",
    }


def test_record_intent__identical_retry__returns_existing_same_intent(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    """Inside a caller's transaction a new key costs one statement, a retry three
    (insert, isolation check, lookup)."""
    with django_assert_num_queries(1):
        first = _record(priority=5, next_run_at=RUN_AT)
    with django_assert_num_queries(3):
        retry = _record(priority=5, next_run_at=RUN_AT)

    assert retry == IntentOutcome(
        intent_id=first.intent_id, status=IntentStatus.PENDING, job_id=None, disposition="existing"
    )
    assert _count() == 1


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        pytest.param({"value": 1.7e18}, {"value": 1700000000000000000}, id="numeric-exponent"),
        pytest.param({"value": 1.0}, {"value": 1}, id="numeric-scale"),
        pytest.param({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, id="key-order"),
        pytest.param({"items": (1, 2)}, {"items": [1, 2]}, id="tuple-is-array"),
    ],
)
def test_record_intent__jsonb_equal_payload__resolves_existing(first: Any, retry: Any) -> None:
    """Equality is jsonb ``=`` in PostgreSQL, which normalises numbers and key order."""
    inserted = _record(first)
    existing = _record(retry)

    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        pytest.param({}, {"stage": None}, id="default-stage"),
        pytest.param({"stage": "queued"}, {"stage": JobStage.QUEUED}, id="stage-enum"),
        pytest.param(
            {"next_run_at": RUN_AT},
            {"next_run_at": RUN_AT.astimezone(dt.timezone(dt.timedelta(hours=-7)))},
            id="same-instant-other-offset",
        ),
        pytest.param({"organization_id": ORG_A}, {"organization_id": str(ORG_A)}, id="org-as-text"),
    ],
)
def test_record_intent__equivalent_request__resolves_existing(
    first: dict[str, Any], retry: dict[str, Any]
) -> None:
    inserted = _record(**first)
    existing = _record(**retry)

    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"payload": {"n": 2}}, id="payload"),
        pytest.param({"payload": {"n": True}}, id="bool-is-not-int"),
        pytest.param({"payload": {"n": 1, "extra": None}}, id="extra-null-key"),
        pytest.param({"priority": 1}, id="priority"),
        pytest.param({"max_attempts": 2}, id="max_attempts"),
        pytest.param({"timeout_seconds": 9}, id="timeout_seconds"),
        pytest.param({"next_run_at": RUN_AT}, id="next_run_at"),
        pytest.param({"stage": "scheduled"}, id="stage"),
        pytest.param({"execution_resource_key": "res"}, id="execution_resource_key"),
    ],
)
def test_record_intent__same_key_other_request__conflict(changed: dict[str, Any]) -> None:
    """Every requested field is part of the snapshot; the caller's transaction survives."""
    original = _record({"n": 1})
    payload = changed.pop("payload", {"n": 1})

    with transaction.atomic():
        with pytest.raises(RunledgerError) as info:
            _record(payload, **changed)
        # The conflict is decided after a successful lookup: the transaction is still usable.
        assert _count() == 1

    _assert_error(info.value, "job.intent_idempotency_conflict", ErrorCategory.CONFLICT)
    assert _row(original.intent_id)["payload"] == {"n": 1}


def test_record_intent__new_and_existing_key__take_no_lock_on_job_definitions() -> None:
    with transaction.atomic():
        _record()
        _record()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
                " AND relation = 'runledger_job_definitions'::regclass"
            )
            assert cursor.fetchone() == (0,)


def test_record_intent__conflict__secret_key_stays_out_of_error_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sensitive = "secret-idempotency-key-4711"
    _record({"n": 1}, key=sensitive)

    with (
        caplog.at_level(logging.DEBUG, logger="runledger_django"),
        pytest.raises(RunledgerError) as info,
    ):
        _record({"n": 2}, key=sensitive)

    assert sensitive not in repr(info.value)
    assert sensitive not in str(info.value)
    assert sensitive not in info.value.internal_message
    assert JOB_TYPE in info.value.internal_message
    ours = [r for r in caplog.records if r.name.startswith("runledger_django")]
    assert all(sensitive not in r.getMessage() and sensitive not in str(r.__dict__) for r in ours)


def test_record_intent__global_and_organization_scopes__keep_same_key_independent() -> None:
    global_first = _record()
    org_a_first = _record(organization_id=ORG_A)
    org_b_first = _record(organization_id=ORG_B)
    other_type = _record(job_type="jobs.test.other")

    ids = {global_first.intent_id, org_a_first.intent_id, org_b_first.intent_id}
    assert len(ids | {other_type.intent_id}) == 4
    assert _record().intent_id == global_first.intent_id
    assert _record(organization_id=ORG_A).intent_id == org_a_first.intent_id
    assert _record(organization_id=ORG_B).intent_id == org_b_first.intent_id
    assert get_intent(global_first.intent_id, scope=ReadScope.organization(ORG_A)) is None
    assert get_intent(org_a_first.intent_id, scope=ReadScope.GLOBAL) is None
    # A different request in one scope does not conflict with the other scopes.
    assert _record({"other": True}, organization_id=ORG_A, key="key-2").disposition == "inserted"
    assert _record({"other": True}, key="key-2").disposition == "inserted"


def test_record_intent__nil_organization__is_an_ordinary_tenant() -> None:
    nil = uuid.UUID(int=0)
    tenant = _record(organization_id=nil)
    global_ = _record()

    assert tenant.intent_id != global_.intent_id
    assert _row(tenant.intent_id)["organization_id"] == nil


def test_record_intent__caller_rolls_back__intent_is_gone() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        outcome = _record()
        raise RuntimeError("business failure after recording")

    assert get_intent(outcome.intent_id, scope=ReadScope.ADMIN) is None
    assert _record().disposition == "inserted"


def test_record_intent__with_business_row__commit_and_rollback_together() -> None:
    """What a view does: the order and the request for its receipt share one transaction."""
    with pytest.raises(RuntimeError), transaction.atomic():
        lost = Order.objects.create(
            reference="lost", customer_email="a@example.com", total_cents=100
        )
        record_intent("shop.send_receipt", {"order_id": lost.pk}, idempotency_key=f"r:{lost.pk}")
        raise RuntimeError("payment declined")

    with transaction.atomic():
        kept = Order.objects.create(
            reference="kept", customer_email="b@example.com", total_cents=200
        )
        outcome = record_intent(
            "shop.send_receipt", {"order_id": kept.pk}, idempotency_key=f"r:{kept.pk}"
        )

    assert list(Order.objects.values_list("pk", flat=True)) == [kept.pk]
    assert list(JobEnqueueIntent.objects.values_list("id", "payload")) == [
        (outcome.intent_id, {"order_id": kept.pk})
    ]


# --- the resolution loop ------------------------------------------------------------------


@pytest.fixture
def delete_existing_once() -> Iterator[None]:
    """A one-shot AFTER INSERT statement trigger: the next INSERT statement deletes the row that
    made it conflict, so the lookup that follows finds nothing."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE test_b_one_shot (armed boolean)")
        cursor.execute("INSERT INTO test_b_one_shot VALUES (true)")
        cursor.execute(
            """
            CREATE FUNCTION test_b_delete_existing_once() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM test_b_one_shot;
                IF FOUND THEN
                    DELETE FROM runledger_job_enqueue_intents WHERE idempotency_key = 'key-1';
                END IF;
                RETURN NULL;
            END $$
            """
        )
    yield
    # The test transaction rolls back every object created here.


def _arm(
    trigger: str, function: str, timing: str = "AFTER INSERT", each: str = "STATEMENT"
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TRIGGER {trigger} {timing} ON runledger_job_enqueue_intents "
            f"FOR EACH {each} EXECUTE FUNCTION {function}()"
        )


def test_record_intent__existing_vanishes_before_lookup__retries_and_inserts(
    delete_existing_once: None,
) -> None:
    first = _record()
    _arm("test_b_vanish", "test_b_delete_existing_once")

    with CaptureQueriesContext(connection) as queries:
        retry = _record()

    assert retry.disposition == "inserted"
    assert retry.status == IntentStatus.PENDING
    assert retry.intent_id != first.intent_id
    assert list(JobEnqueueIntent.objects.values_list("id", flat=True)) == [retry.intent_id]
    inserts = [q for q in queries.captured_queries if _kind(q["sql"]) == "RECORD"]
    assert len(inserts) == 2


def test_record_intent__existing_vanishes_twice__missing_existing_error() -> None:
    """At most two resolution attempts: an insert that never lands and a lookup that never finds
    anything end in an internal error, not a loop."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_b_skip_insert() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RETURN NULL; END $$"
        )
    _arm("test_b_skip", "test_b_skip_insert", timing="BEFORE INSERT", each="ROW")

    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as info:
            _record()
        assert _count() == 0  # still usable

    _assert_error(
        info.value, "job.intent_idempotency_conflict_missing_existing", ErrorCategory.INTERNAL
    )
    sqls = [q["sql"] for q in queries.captured_queries]
    assert sum(_kind(sql) == "RECORD" for sql in sqls) == 2
    assert sum("FOR KEY SHARE" in sql for sql in sqls) == 2


def test_record_intent__database_error__classified_and_caller_block_rolls_back() -> None:
    """A failing statement aborts the caller's transaction; its atomic block must roll back
    rather than try to commit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_b_fail() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$"
        )
    _arm("test_b_fail", "test_b_fail", timing="BEFORE INSERT", each="ROW")

    with pytest.raises(RunledgerError) as info, transaction.atomic():
        Order.objects.create(reference="e", customer_email="e@example.com", total_cents=1)
        _record()

    _assert_error(info.value, "db.query_failed", ErrorCategory.INTERNAL)
    assert info.value.sqlstate == "P0001"
    assert "boom" not in str(info.value)
    assert Order.objects.count() == 0


# --- raw inserts meet the blank CHECKs --------------------------------------------------------


@pytest.mark.parametrize("blank", ["\t", "\u00a0", "\u3000"], ids=["tab", "nbsp", "ideographic"])
@pytest.mark.parametrize("column", ["job_type", "idempotency_key", "stage"])
def test_database__blank_text_insert__rejected_by_its_check(column: str, blank: str) -> None:
    """The database keeps the Unicode blank rule for writers that bypass validation."""
    values = {"job_type": "jobs.raw", "idempotency_key": "k", "stage": "queued", column: blank}

    with pytest.raises(IntegrityError) as info, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runledger_job_enqueue_intents"
            " (job_type, idempotency_key, stage, payload, enqueue_request)"
            " VALUES (%(job_type)s, %(idempotency_key)s, %(stage)s, '{}', '{}')",
            values,
        )
    cause = info.value.__cause__
    assert isinstance(cause, psycopg.Error)
    assert cause.diag.constraint_name == f"chk_job_enqueue_intents_{column}_not_blank"


# --- promoted and conflicted intents -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_record_intent__identical_retry_of_promoted__returns_promoted_with_job(
    make_definition: Callable[..., JobDefinition],
) -> None:
    make_definition()
    first = _record()
    assert promote_intents([JOB_TYPE]).inserted_jobs == 1
    job_id = JobEnqueueIntent.objects.get(id=first.intent_id).promoted_job_id

    retry = _record()

    assert retry == IntentOutcome(
        intent_id=first.intent_id,
        status=IntentStatus.PROMOTED,
        job_id=job_id,
        disposition="existing",
    )
    assert retry.to_dict()["state"] == {"state": "promoted", "job_id": str(job_id)}
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_record_intent__identical_retry_of_conflicted__returns_conflicted_without_raising(
    make_definition: Callable[..., JobDefinition],
) -> None:
    make_definition()
    enqueue_job(JOB_TYPE, {"direct": True}, idempotency_key="key-1")
    first = _record()
    assert promote_intents([JOB_TYPE]).conflicted == 1

    retry = _record()

    assert retry == IntentOutcome(
        intent_id=first.intent_id,
        status=IntentStatus.CONFLICTED,
        job_id=None,
        disposition="existing",
    )
    with pytest.raises(RunledgerError) as info:
        _record({"n": 2})
    _assert_error(info.value, "job.intent_idempotency_conflict", ErrorCategory.CONFLICT)


# --- transactions --------------------------------------------------------------------------


def _committed_count(observer: psycopg.Connection[Any], key: str = "key-1") -> int:
    row = observer.execute(
        "SELECT count(*) FROM runledger_job_enqueue_intents WHERE idempotency_key = %s", [key]
    ).fetchone()
    return int(row[0]) if row else -1


@pytest.mark.django_db(transaction=True)
def test_record_intent__inside_atomic__commits_nothing_itself(
    observer: psycopg.Connection[Any],
) -> None:
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            _record()
        assert _committed_count(observer) == 0
    assert _committed_count(observer) == 1
    assert [_kind(q["sql"]) for q in queries.captured_queries] == ["RECORD"]  # no COMMIT

    with pytest.raises(RuntimeError), transaction.atomic():
        _record(key="key-2")
        raise RuntimeError
    assert _committed_count(observer, "key-2") == 0


def _kind(sql: str) -> str:
    """RECORD for record_intent's insert (a call of runledger_record_intent_v2), else the
    statement's first word."""
    return "RECORD" if "runledger_record_intent_v2(" in sql else sql.split()[0].upper()


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """The kind of each statement, without transaction control (which Django 6 logs and 5.2
    does not)."""
    words = [_kind(q["sql"]) for q in queries.captured_queries]
    return [word for word in words if word not in {"BEGIN", "COMMIT", "ROLLBACK"}]


@pytest.mark.django_db(transaction=True)
def test_record_intent__outside_atomic__commits_in_its_own_transaction(
    observer: psycopg.Connection[Any], settings: SettingsWrapper
) -> None:
    # The wake-up NOTIFY that follows the commit is a query of its own, coalesced in time
    # (tests/worker/test_wakeup.py covers it); here only the recording itself is counted.
    settings.RUNLEDGER = {"WAKEUP_NOTIFY": False}
    with CaptureQueriesContext(connection) as new_key:
        inserted = _record()
    assert _committed_count(observer) == 1
    with CaptureQueriesContext(connection) as retry:
        existing = _record()

    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")
    # A new key is one autocommit statement; resolving an existing key needs the owned
    # READ COMMITTED transaction (the lone statement found the key taken).
    assert _statements(new_key) == ["RECORD"]
    assert _statements(retry) == [
        "RECORD",
        "SET",
        "RECORD",
        "SHOW",
        "SELECT",
    ]
    assert not connection.in_atomic_block
    assert connection.get_autocommit()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_record_intent__caller_transaction_not_read_committed__rejected_and_usable(
    level: str,
) -> None:
    """Both for a new key and for an existing one; input validation still comes first."""
    for key in ("fresh", "key-1"):
        if key == "key-1":
            _record()
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
            with pytest.raises(RunledgerError) as invalid:
                _record(key=" ")
            assert invalid.value.code == "job.intent_invalid_idempotency_key"
            with pytest.raises(RunledgerError) as info:
                _record(key=key)
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                assert cursor.fetchone() == (1,)
        _assert_error(
            info.value, "job.intent_idempotency_unsupported_isolation", ErrorCategory.VALIDATION
        )
    assert JobEnqueueIntent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_record_intent__caller_read_uncommitted__accepted() -> None:
    """PostgreSQL runs READ UNCOMMITTED as READ COMMITTED."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        first = _record()
        assert _record().intent_id == first.intent_id


@pytest.fixture
def repeatable_read_default(request: pytest.FixtureRequest) -> Iterator[str]:
    """Make the Django connection start its transactions at REPEATABLE READ, either as the
    server session default or the way Django's OPTIONS["isolation_level"] does (psycopg's
    BEGIN ISOLATION LEVEL)."""
    how: str = request.param
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    original = raw.isolation_level
    if how == "session":
        with connection.cursor() as cursor:
            cursor.execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
            )
    else:
        raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        yield how
    finally:
        raw.isolation_level = original
        with connection.cursor() as cursor:
            cursor.execute("RESET default_transaction_isolation")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("repeatable_read_default", ["session", "driver"], indirect=True)
def test_record_intent__repeatable_read_default__owns_read_committed_transaction(
    repeatable_read_default: str,
) -> None:
    """The owned transaction must be READ COMMITTED whatever the connection's default: the
    resolution's lookup must see a winner that committed while the insert waited."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        assert cursor.fetchone() == ("repeatable read",)

    with CaptureQueriesContext(connection) as queries:
        inserted = _record()
        existing = _record()

    assert inserted.disposition == "inserted"
    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")
    assert any(
        q["sql"] == "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
        for q in queries.captured_queries
    )
    assert JobEnqueueIntent.objects.count() == 1


# --- validation before any SQL --------------------------------------------------------------


class _Opaque:
    """Not JSON-native."""


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _self_referencing() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


FAR_FUTURE = dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
FAR_PAST = dt.datetime(1, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))

INVALID_REQUESTS = [
    # job_type
    ("job.invalid_job_type", {"job_type": "\t"}),
    ("job.invalid_job_type", {"job_type": "\u00a0"}),
    ("job.invalid_job_type", {"job_type": "\u2028\u3000 \u205f"}),
    ("job.invalid_job_type", {"job_type": ""}),
    ("job.invalid_job_type", {"job_type": None}),
    ("job.invalid_job_type", {"job_type": 42}),
    ("job.invalid_job_type", {"job_type": b"jobs.test"}),
    ("job.invalid_job_type", {"job_type": "jobs\x00test"}),
    ("job.invalid_job_type", {"job_type": "jobs\ud800"}),
    ("job.invalid_job_type_length", {"job_type": "j" * 256}),
    ("job.invalid_job_type_length", {"job_type": "\u00e9" * 128}),
    # idempotency key
    ("job.intent_invalid_idempotency_key", {"key": "   "}),
    ("job.intent_invalid_idempotency_key", {"key": ""}),
    ("job.intent_invalid_idempotency_key", {"key": "\t\u00a0\u1680"}),
    ("job.intent_invalid_idempotency_key", {"key": None}),
    ("job.intent_invalid_idempotency_key", {"key": 7}),
    ("job.intent_invalid_idempotency_key", {"key": uuid.UUID(int=1)}),
    ("job.intent_invalid_idempotency_key", {"key": "k\x00"}),
    ("job.intent_invalid_idempotency_key", {"key": "k\udfff"}),
    ("job.invalid_idempotency_key_length", {"key": "k" * 1025}),
    ("job.invalid_idempotency_key_length", {"key": "\u00e9" * 513}),
    # max_attempts / timeout_seconds
    ("job.intent_invalid_max_attempts", {"max_attempts": 0}),
    ("job.intent_invalid_max_attempts", {"max_attempts": -1}),
    ("job.intent_invalid_max_attempts", {"max_attempts": 2**31}),
    ("job.intent_invalid_max_attempts", {"max_attempts": True}),
    ("job.intent_invalid_max_attempts", {"max_attempts": 3.0}),
    ("job.intent_invalid_max_attempts", {"max_attempts": "3"}),
    ("job.intent_invalid_timeout", {"timeout_seconds": 0}),
    ("job.intent_invalid_timeout", {"timeout_seconds": -30}),
    ("job.intent_invalid_timeout", {"timeout_seconds": 2**31}),
    ("job.intent_invalid_timeout", {"timeout_seconds": False}),
    ("job.intent_invalid_timeout", {"timeout_seconds": 30.0}),
    ("job.intent_invalid_timeout", {"timeout_seconds": decimal.Decimal(30)}),
    # priority
    ("job.invalid_priority", {"priority": 2**31}),
    ("job.invalid_priority", {"priority": -(2**31) - 1}),
    ("job.invalid_priority", {"priority": True}),
    ("job.invalid_priority", {"priority": 1.5}),
    ("job.invalid_priority", {"priority": "1"}),
    # organization_id
    ("job.invalid_organization_id", {"organization_id": "not-a-uuid"}),
    ("job.invalid_organization_id", {"organization_id": ""}),
    ("job.invalid_organization_id", {"organization_id": 12345}),
    ("job.invalid_organization_id", {"organization_id": ORG_A.bytes}),
    # next_run_at
    ("job.invalid_next_run_at", {"next_run_at": dt.datetime(2030, 1, 1)}),
    ("job.invalid_next_run_at", {"next_run_at": dt.date(2030, 1, 1)}),
    ("job.invalid_next_run_at", {"next_run_at": "2030-01-01T00:00:00Z"}),
    ("job.invalid_next_run_at", {"next_run_at": 1_900_000_000}),
    ("job.invalid_next_run_at", {"next_run_at": FAR_FUTURE}),
    ("job.invalid_next_run_at", {"next_run_at": FAR_PAST}),
    # stage
    ("job.invalid_stage", {"stage": "QUEUED"}),
    ("job.invalid_stage", {"stage": "future_stage"}),
    ("job.invalid_stage", {"stage": ""}),
    ("job.invalid_stage", {"stage": 1}),
    # execution_resource_key
    ("job.invalid_execution_resource_key", {"execution_resource_key": "   "}),
    ("job.invalid_execution_resource_key", {"execution_resource_key": ""}),
    ("job.invalid_execution_resource_key", {"execution_resource_key": "\u00e9" * 257}),
    ("job.invalid_execution_resource_key", {"execution_resource_key": "r" * 513}),
    ("job.invalid_execution_resource_key", {"execution_resource_key": "r\x00"}),
    ("job.invalid_execution_resource_key", {"execution_resource_key": 5}),
    # payload
    ("job.invalid_payload", {"payload": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}),
    ("job.invalid_payload", {"payload": {"at": dt.date(2030, 1, 1)}}),
    ("job.invalid_payload", {"payload": {"amount": decimal.Decimal("1.50")}}),
    ("job.invalid_payload", {"payload": {"tags": {"a", "b"}}}),
    ("job.invalid_payload", {"payload": {"tags": frozenset()}}),
    ("job.invalid_payload", {"payload": {"id": uuid.UUID(int=3)}}),
    ("job.invalid_payload", {"payload": {"blob": b"bytes"}}),
    ("job.invalid_payload", {"payload": bytearray(b"x")}),
    ("job.invalid_payload", {"payload": _Opaque()}),
    ("job.invalid_payload", {"payload": {"order": Order(customer_email="x@example.com")}}),
    ("job.invalid_payload", {"payload": {"z": 1j}}),
    ("job.invalid_payload", {"payload": {"v": float("nan")}}),
    ("job.invalid_payload", {"payload": [float("inf")]}),
    ("job.invalid_payload", {"payload": -float("inf")}),
    ("job.invalid_payload", {"payload": {1: "int key"}}),
    ("job.invalid_payload", {"payload": {None: "null key"}}),
    ("job.invalid_payload", {"payload": {("a",): "tuple key"}}),
    ("job.invalid_payload", {"payload": {"text": "nul\x00"}}),
    ("job.invalid_payload", {"payload": {"key\x00": 1}}),
    ("job.invalid_payload", {"payload": "lone \ud800 surrogate"}),
    ("job.invalid_payload", {"payload": {"\udc80": 1}}),
    ("job.invalid_payload", {"payload": _nested(257)}),
    ("job.invalid_payload", {"payload": _self_referencing()}),
    ("job.invalid_payload", {"payload": 10**5000}),
]


@pytest.mark.parametrize(
    ("code", "request_"),
    [pytest.param(code, req, id=f"{code}-{i}") for i, (code, req) in enumerate(INVALID_REQUESTS)],
)
def test_record_intent__invalid_input__rejected_before_any_sql(
    code: str, request_: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    request = dict(request_)
    job_type = request.pop("job_type", JOB_TYPE)
    payload = request.pop("payload", {"n": 1})
    key = request.pop("key", "key-1")

    with transaction.atomic():
        with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
            record_intent(job_type, payload, idempotency_key=key, **request)
        # Nothing was sent, so the caller's transaction goes on as if nothing happened.
        assert JobEnqueueIntent.objects.count() == 0
        assert _record().disposition == "inserted"

    _assert_error(info.value, code, ErrorCategory.VALIDATION)


def test_record_intent__many_invalid_fields__reports_in_reference_order() -> None:
    """job type, then key, then max attempts, then timeout, then resource key (reference 4.1)."""
    bad: dict[str, Any] = {
        "max_attempts": 0,
        "timeout_seconds": 0,
        "execution_resource_key": " ",
    }
    steps = [
        ("job.invalid_job_type", {"job_type": " ", "key": " ", **bad}),
        ("job.intent_invalid_idempotency_key", {"key": " ", **bad}),
        ("job.intent_invalid_max_attempts", bad),
        ("job.intent_invalid_timeout", {**bad, "max_attempts": None}),
        ("job.invalid_execution_resource_key", {"execution_resource_key": " "}),
    ]
    for code, request in steps:
        with pytest.raises(RunledgerError) as info:
            _record(**request)
        assert info.value.code == code


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"priority": -(2**31)}, id="priority-min"),
        pytest.param({"priority": 2**31 - 1}, id="priority-max"),
        pytest.param({"priority": 0}, id="priority-zero"),
        pytest.param({"max_attempts": 2**31 - 1, "timeout_seconds": 2**31 - 1}, id="int32-max"),
        pytest.param({"max_attempts": 1, "timeout_seconds": 1}, id="one"),
        pytest.param({"execution_resource_key": "\u00e9" * 256}, id="resource-key-512-bytes"),
        pytest.param({"execution_resource_key": "r" * 512}, id="resource-key-512-ascii"),
        pytest.param({"key": "k" * 1024}, id="key-1024-bytes"),
        pytest.param({"job_type": "j" * 255}, id="job-type-255-bytes"),
        pytest.param({"job_type": "jobs.\u00fcnicode \u2603"}, id="job-type-unicode"),
        pytest.param({"key": " padded key "}, id="key-with-spaces"),
        pytest.param({"payload": None}, id="payload-null"),
        pytest.param({"payload": "text"}, id="payload-string"),
        pytest.param({"payload": 10**4000}, id="payload-big-int"),
        pytest.param({"payload": [1.5e300, -0.0, True, None]}, id="payload-array"),
        pytest.param({"payload": _nested(255)}, id="payload-depth-256"),
        pytest.param({"payload": {"\u2603": "\U0001f600"}}, id="payload-astral"),
        pytest.param({"next_run_at": dt.datetime(2001, 1, 1, tzinfo=dt.UTC)}, id="run-at-past"),
        pytest.param({"next_run_at": dt.datetime(1, 1, 2, tzinfo=dt.UTC)}, id="run-at-earliest"),
        pytest.param({"stage": "completed"}, id="stage-completed"),
        pytest.param({"organization_id": str(ORG_A).upper()}, id="org-uppercase-text"),
    ],
)
def test_record_intent__boundary_input__accepted_and_retry_resolves(
    request_: dict[str, Any],
) -> None:
    request = dict(request_)
    payload = request.pop("payload", {"n": 1})
    if payload is None:
        # A JSON null payload: pass it explicitly (the helper treats None as "default").
        inserted = record_intent(JOB_TYPE, None, idempotency_key="null")
        assert record_intent(JOB_TYPE, None, idempotency_key="null").disposition == "existing"
        assert _row(inserted.intent_id)["payload"] is None
        return
    inserted = _record(payload, **request)
    existing = _record(payload, **request)

    assert inserted.disposition == "inserted"
    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")


# --- outcome decoding and JSON (reference 5, 8.2) -------------------------------------------


def test_intent_outcome__to_dict__lifecycle_shapes() -> None:
    intent_id, job_id = uuid.UUID(int=10), uuid.UUID(int=11)
    pending = IntentOutcome(
        intent_id=intent_id, status=IntentStatus.PENDING, job_id=None, disposition="inserted"
    )
    promoted = IntentOutcome(
        intent_id=intent_id, status=IntentStatus.PROMOTED, job_id=job_id, disposition="existing"
    )
    conflicted = IntentOutcome(
        intent_id=intent_id, status=IntentStatus.CONFLICTED, job_id=None, disposition="existing"
    )

    assert pending.to_dict() == {
        "intent_id": str(intent_id),
        "status": "PENDING",
        "state": {"state": "pending"},
        "job_id": None,
        "disposition": "inserted",
    }
    assert promoted.to_dict()["state"] == {"state": "promoted", "job_id": str(job_id)}
    assert promoted.to_dict()["job_id"] == str(job_id)
    assert conflicted.to_dict()["state"] == {"state": "conflicted"}
    for outcome in (pending, promoted, conflicted):
        assert json.loads(json.dumps(outcome.to_dict())) == outcome.to_dict()


@pytest.mark.parametrize(
    ("status", "job_id", "expected"),
    [
        ("PENDING", None, IntentStatus.PENDING),
        ("PROMOTED", uuid.UUID(int=1), IntentStatus.PROMOTED),
        ("CONFLICTED", None, IntentStatus.CONFLICTED),
    ],
)
def test_decode_outcome_status__consistent_rows__decode(
    status: str, job_id: uuid.UUID | None, expected: IntentStatus
) -> None:
    assert decode_outcome_status(status, job_id) is expected


@pytest.mark.parametrize(
    ("status", "job_id"),
    [
        ("PENDING", uuid.UUID(int=1)),
        ("PROMOTED", None),
        ("CONFLICTED", uuid.UUID(int=1)),
        ("UNKNOWN", None),
        ("pending", None),
    ],
)
def test_decode_outcome_status__impossible_rows__invalid_persisted_row(
    status: str, job_id: uuid.UUID | None
) -> None:
    with pytest.raises(RunledgerError) as info:
        decode_outcome_status(status, job_id)
    _assert_error(info.value, "job.intent_invalid_persisted_row", ErrorCategory.INTERNAL)


@pytest.mark.django_db(transaction=True)
def test_record_intent__manual_transaction__joins_it(observer: psycopg.Connection[Any]) -> None:
    """With autocommit turned off (Django's manual transaction management) the caller already
    owns a transaction: record_intent joins it and commits nothing."""
    transaction.set_autocommit(False)
    try:
        Order.objects.create(reference="manual", customer_email="m@example.com", total_cents=1)
        inserted = _record()
        existing = _record()
        assert _committed_count(observer) == 0
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)

    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")
    assert _committed_count(observer) == 0
    assert not Order.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_record_intent__manual_repeatable_read_transaction__isolation_error() -> None:
    transaction.set_autocommit(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT 1")
        with pytest.raises(RunledgerError) as info:
            _record()
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runledger_job_enqueue_intents")
            assert cursor.fetchone() == (0,)
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)

    _assert_error(
        info.value, "job.intent_idempotency_unsupported_isolation", ErrorCategory.VALIDATION
    )


# --- runledger_record_intent_v2, the insert's function (migrations 0008 and 0013) -------------


def _call_record_function(
    session: psycopg.Connection[Any],
    key: str,
    organization_id: uuid.UUID | None = None,
    *,
    job_type: str = "jobs.fn",
    check_definition: bool = False,
) -> int:
    row = session.execute(
        "SELECT runledger_record_intent_v2(%s, %s, %s, '{}', NULL, NULL, NULL, NULL, %s,"
        " 'queued', '{}', NULL, NULL, %s)",
        [uuid.uuid4(), job_type, organization_id, key, check_definition],
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.django_db(transaction=True)
def test_record_function__each_scope__inserts_once_per_key_then_answers_not_inserted(
    open_session: Callable[..., psycopg.Connection[Any]],
) -> None:
    session = open_session()
    org = uuid.uuid4()

    calls = [
        _call_record_function(session, "k"),
        _call_record_function(session, "k"),
        _call_record_function(session, "k", org),  # the scopes' keys are independent
        _call_record_function(session, "k", org),
        _call_record_function(session, "k", uuid.uuid4()),
    ]

    assert calls == [1, 0, 1, 0, 1]
    assert JobEnqueueIntent.objects.filter(job_type="jobs.fn").count() == 3


@pytest.mark.django_db(transaction=True)
def test_record_function__definition_check__bit_two_only_when_asked_and_missing(
    open_session: Callable[..., psycopg.Connection[Any]],
    make_definition: Callable[..., JobDefinition],
) -> None:
    session = open_session()
    make_definition("jobs.defined")

    calls = [
        _call_record_function(session, "a", job_type="jobs.undefined", check_definition=True),
        _call_record_function(session, "a", job_type="jobs.undefined", check_definition=True),
        _call_record_function(session, "b", job_type="jobs.undefined"),
        _call_record_function(session, "a", job_type="jobs.defined", check_definition=True),
    ]

    assert calls == [1 | 2, 2, 1, 1]


@pytest.mark.django_db(transaction=True)
def test_record_function__trace_context__stored_beside_the_snapshot(
    open_session: Callable[..., psycopg.Connection[Any]],
) -> None:
    session = open_session()
    context = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    session.execute(
        "SELECT runledger_record_intent_v2(%s, 'jobs.fn', NULL, '{}', NULL, NULL, NULL, NULL,"
        " 'k', 'queued', '{}', NULL, %s, false)",
        [uuid.uuid4(), Jsonb(context)],
    )

    intent = JobEnqueueIntent.objects.get(job_type="jobs.fn")
    assert (intent.trace_context, intent.enqueue_request) == (context, {})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "set_level",
    [
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    ],
    ids=["repeatable-read", "serializable"],
)
def test_record_function__stricter_isolation__writes_nothing_and_answers_zero(
    open_session: Callable[..., psycopg.Connection[Any]], set_level: LiteralString
) -> None:
    session = open_session(autocommit=False)
    session.execute(set_level)

    assert _call_record_function(session, "k", check_definition=True) == 0
    session.commit()
    assert JobEnqueueIntent.objects.filter(job_type="jobs.fn").count() == 0


@pytest.mark.django_db(transaction=True)
def test_record_function_version_1__kept_for_a_rolling_deploy__still_records(
    open_session: Callable[..., psycopg.Connection[Any]],
) -> None:
    """Servers of the previous release call migration 0008's function until they are
    replaced; it still inserts once per key (with no trace context)."""
    session = open_session()
    sql: LiteralString = (
        "SELECT runledger_record_intent(%s, 'jobs.fn', NULL, '{}', NULL, NULL, NULL, NULL, 'k',"
        " 'queued', '{}', NULL)"
    )
    answers = [session.execute(sql, [uuid.uuid4()]).fetchone() for _ in range(2)]

    assert answers == [(True,), (False,)]
    assert JobEnqueueIntent.objects.get(job_type="jobs.fn").trace_context is None

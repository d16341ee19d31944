"""record_intents: record_intent for a list of requests, in a constant number of statements.

A batch must behave as the same record_intent calls made one after another in one
transaction (row for row, outcome for outcome), except that it is all or nothing: a request
that would have raised refuses the batch, naming its index, and leaves nothing written.

Tests marked ``transaction=True`` need committed rows seen from other sessions, the owned
transaction path, promotion, or concurrent sessions.
"""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import (
    IntentOutcome,
    IntentRequest,
    IntentStatus,
    RunledgerError,
    enqueue_job,
    promote_intents,
    record_intent,
    record_intents,
)
from runledger_django.api import IntentRequest as ApiIntentRequest
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services import bulk, wakeup
from tests.bulk_support import (
    bulk_request,
    bulk_requests,
    committed_rows,
    race_reversed,
    statement_tags,
)
from tests.conftest import (
    TEST_JOB_TYPE,
    InThread,
    MakeDefinition,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)

pytestmark = pytest.mark.django_db

JOB_TYPE = TEST_JOB_TYPE
ORG = uuid.UUID("0190a6b2-0000-7000-8000-0000000b01c0")
INSERT_FRAGMENT = "/* runledger:record_intents */"
"""The bulk insert's tag, at the front of its text (pg_stat_activity keeps the first 1 kB)."""


_request = partial(bulk_request, IntentRequest)
_requests = partial(bulk_requests, IntentRequest)
_statements = statement_tags


def _committed(observer: psycopg.Connection[Any]) -> int:
    return committed_rows(observer, "runledger_job_enqueue_intents")


# --- outcomes -------------------------------------------------------------------------------


def test_record_intents__api_names__one_type_exported_twice() -> None:
    assert ApiIntentRequest is IntentRequest


def test_record_intents__new_keys__one_outcome_per_request_in_order() -> None:
    requests = [_request("b"), _request("a"), _request("c", organization_id=ORG)]

    outcomes = record_intents(requests)

    assert [o.disposition for o in outcomes] == ["inserted"] * 3
    assert [o.status for o in outcomes] == [IntentStatus.PENDING] * 3
    assert all(o.job_id is None for o in outcomes)
    rows = {row.id: row for row in JobEnqueueIntent.objects.all()}
    assert [rows[o.intent_id].idempotency_key for o in outcomes] == ["b", "a", "c"]
    assert rows[outcomes[2].intent_id].organization_id == ORG


def test_record_intents__every_argument__same_row_as_record_intent() -> None:
    """Row for row: every column a bulk request writes is what record_intent writes."""
    arguments: dict[str, Any] = {
        "organization_id": str(ORG),
        "priority": -(2**31),
        "max_attempts": 4,
        "timeout_seconds": 9,
        "next_run_at": None,
        "stage": "scheduled",
        "execution_resource_key": "printer-1",
    }
    payload = {"n": 1.5, "list": [1, "two", None], "nested": {"ok": True}}
    single = record_intent(JOB_TYPE, payload, idempotency_key="single", **arguments)
    [bulk] = record_intents([IntentRequest(JOB_TYPE, payload, idempotency_key="bulk", **arguments)])

    ignored = {"id", "idempotency_key", "created_at", "updated_at", "next_promotion_at"}
    single_row = JobEnqueueIntent.objects.values().get(id=single.intent_id)
    bulk_row = JobEnqueueIntent.objects.values().get(id=bulk.intent_id)
    assert {k: v for k, v in bulk_row.items() if k not in ignored} == {
        k: v for k, v in single_row.items() if k not in ignored
    }
    assert (bulk.status, bulk.disposition) == (single.status, single.disposition)


def test_record_intents__requests_sharing_options__every_row_as_record_intent() -> None:
    """A batch validates a set of options once and shares its snapshot's tail: every request
    that repeats them still gets its own payload, key and snapshot, as record_intent writes."""
    arguments: dict[str, Any] = {
        "organization_id": str(ORG),
        "priority": 7,
        "max_attempts": 4,
        "next_run_at": dt.datetime(2035, 4, 3, 2, 1, tzinfo=dt.UTC),
        "execution_resource_key": "printer-1",
    }
    payloads = [{"n": n, "text": "ü" * n} for n in range(3)]
    singles = [
        record_intent(JOB_TYPE, payload, idempotency_key=f"single-{n}", **arguments)
        for n, payload in enumerate(payloads)
    ]
    bulks = record_intents(
        [
            IntentRequest(JOB_TYPE, payload, idempotency_key=f"bulk-{n}", **arguments)
            for n, payload in enumerate(payloads)
        ]
    )

    columns = ("payload", "enqueue_request", "organization_id", "priority", "next_run_at")
    for single, bulk_outcome in zip(singles, bulks, strict=True):
        assert JobEnqueueIntent.objects.values(*columns).get(id=bulk_outcome.intent_id) == (
            JobEnqueueIntent.objects.values(*columns).get(id=single.intent_id)
        )


@pytest.mark.parametrize(
    ("later", "code"),
    [
        ({"priority": True}, "job.invalid_priority"),
        ({"idempotency_key": " "}, "job.intent_invalid_idempotency_key"),
        ({"payload": {1: 2}}, "job.invalid_payload"),
        ({"idempotency_key": " ", "payload": {1: 2}}, "job.intent_invalid_idempotency_key"),
    ],
    ids=["true-is-not-1", "blank-key", "bad-payload", "key-before-payload"],
)
def test_record_intents__later_request_repeating_options__still_checked_in_order(
    later: dict[str, Any], code: str
) -> None:
    """Options compare by type as well as value (True == 1, but True is no priority), and a
    request whose options were seen before still has its key, then its payload, checked."""
    first: dict[str, Any] = {"payload": {"n": 1}, "idempotency_key": "a", "priority": 1}
    second = first | later
    payload = second.pop("payload")
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as info:
        record_intents(
            [
                IntentRequest(JOB_TYPE, first.pop("payload"), **first),
                IntentRequest(JOB_TYPE, payload, **second),
            ]
        )

    assert queries.captured_queries == []
    assert (info.value.code, info.value.request_index) == (code, 1)


def test_record_intents__ids__ascend_in_the_order_rows_are_inserted() -> None:
    """Ids follow the insert's key order (the global scope first), so the indexes that end in
    the id take the batch as appends."""
    batch = [
        _request("b"),
        _request("a", organization_id=ORG),
        _request("c"),
        _request("a"),
        _request("b", organization_id=ORG),
    ]
    outcomes = record_intents(batch)

    by_id = [outcomes.index(o) for o in sorted(outcomes, key=lambda o: o.intent_id)]
    assert by_id == [3, 0, 2, 1, 4]


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "a 'quoted' \"string\" with \\ backslashes,\nnewlines and ünïcödé 🎉",
        [1, -2.5e300, 10**40, True, None, {"": []}],
        {"payload": {"payload": 1}, "priority": "not the snapshot's"},
    ],
    ids=["null", "text", "list", "snapshot-keys"],
)
def test_record_intents__awkward_payloads__same_row_as_record_intent(payload: Any) -> None:
    """The payload travels once and the snapshot is put back together around it in the
    statement: whatever the payload, both columns are what record_intent stores."""
    run_at = dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)
    single = record_intent(JOB_TYPE, payload, idempotency_key="single", next_run_at=run_at)
    [bulk_outcome] = record_intents(
        [IntentRequest(JOB_TYPE, payload, idempotency_key="bulk", next_run_at=run_at)]
    )

    columns = ("payload", "enqueue_request", "next_run_at")
    assert JobEnqueueIntent.objects.values(*columns).get(id=bulk_outcome.intent_id) == (
        JobEnqueueIntent.objects.values(*columns).get(id=single.intent_id)
    )
    [retry] = record_intents(
        [IntentRequest(JOB_TYPE, payload, idempotency_key="single", next_run_at=run_at)]
    )
    assert (retry.intent_id, retry.disposition) == (single.intent_id, "existing")


def test_record_intents__identical_retry_of_recorded_keys__existing_same_intents() -> None:
    first = record_intent(JOB_TYPE, {"key": "a"}, idempotency_key="a")
    org_first = record_intent(JOB_TYPE, {"key": "a"}, idempotency_key="a", organization_id=ORG)

    outcomes = record_intents([_request("a"), _request("a", organization_id=ORG)])

    assert outcomes == [
        IntentOutcome(
            intent_id=first.intent_id,
            status=IntentStatus.PENDING,
            job_id=None,
            disposition="existing",
        ),
        IntentOutcome(
            intent_id=org_first.intent_id,
            status=IntentStatus.PENDING,
            job_id=None,
            disposition="existing",
        ),
    ]
    assert JobEnqueueIntent.objects.count() == 2


def test_record_intents__existing_and_new_keys_mixed__each_resolved_in_order() -> None:
    existing = record_intents(_requests(3, "old"))

    outcomes = record_intents(
        [_request("new-1"), *_requests(3, "old"), _request("new-2", organization_id=ORG)]
    )

    assert [o.disposition for o in outcomes] == [
        "inserted",
        "existing",
        "existing",
        "existing",
        "inserted",
    ]
    assert [o.intent_id for o in outcomes[1:4]] == [o.intent_id for o in existing]
    assert JobEnqueueIntent.objects.count() == 5


def test_record_intents__same_key_other_scope__distinct_intents() -> None:
    """The key's scope is part of it: global and organization rows never converge."""
    outcomes = record_intents([_request("a"), _request("a", organization_id=ORG)])

    assert [o.disposition for o in outcomes] == ["inserted", "inserted"]
    assert outcomes[0].intent_id != outcomes[1].intent_id


def test_record_intents__jsonb_equal_snapshot__converges() -> None:
    """Equality is jsonb's, as across calls: 1.0 and 1, key order, spacing."""
    first = record_intent(JOB_TYPE, {"a": 1, "b": 1.0}, idempotency_key="a")

    [outcome] = record_intents([_request("a", {"b": 1, "a": 1.0})])

    assert (outcome.intent_id, outcome.disposition) == (first.intent_id, "existing")


def test_record_intents__different_request_under_recorded_key__conflict_names_index() -> None:
    record_intent(JOB_TYPE, {"n": 1}, idempotency_key="a")

    with pytest.raises(RunledgerError) as info:
        record_intents([_request("new"), _request("a", {"n": 2}), _request("newer")])

    error = info.value
    assert (error.code, error.category) == (
        "job.intent_idempotency_conflict",
        ErrorCategory.CONFLICT,
    )
    assert error.request_index == 1
    assert "request 1" in error.internal_message
    # Nothing of the batch is left; the caller's transaction (the test's) goes on.
    assert list(JobEnqueueIntent.objects.values_list("idempotency_key", flat=True)) == ["a"]


def test_record_intents__two_conflicts__the_earliest_is_reported() -> None:
    record_intents([_request("a"), _request("b")])

    with pytest.raises(RunledgerError) as info:
        record_intents([_request("b", {"x": 1}), _request("a", {"x": 2})])

    assert info.value.request_index == 0


# --- duplicates inside one batch ------------------------------------------------------------


def test_record_intents__identical_duplicates_in_batch__converge_on_the_first() -> None:
    outcomes = record_intents([_request("a"), _request("b"), _request("a"), _request("a")])

    assert [o.disposition for o in outcomes] == ["inserted", "inserted", "existing", "existing"]
    assert outcomes[0].intent_id == outcomes[2].intent_id == outcomes[3].intent_id
    assert JobEnqueueIntent.objects.count() == 2


def test_record_intents__different_duplicate_in_batch__conflict_like_a_later_call() -> None:
    with pytest.raises(RunledgerError) as info:
        record_intents([_request("a"), _request("b"), _request("a", {"other": True})])

    assert info.value.code == "job.intent_idempotency_conflict"
    assert info.value.request_index == 2
    assert JobEnqueueIntent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_record_intents__promoted_and_conflicted_keys__their_states_without_raising(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    enqueue_job(JOB_TYPE, {"direct": True}, idempotency_key="clash")
    record_intents([_request("promoted"), _request("clash")])
    report = promote_intents([JOB_TYPE])
    assert (report.inserted_jobs, report.conflicted) == (1, 1)
    job_id = Job.objects.get(idempotency_key="promoted").id

    promoted, conflicted = record_intents([_request("promoted"), _request("clash")])

    assert (promoted.status, promoted.job_id, promoted.disposition) == (
        IntentStatus.PROMOTED,
        job_id,
        "existing",
    )
    assert (conflicted.status, conflicted.job_id) == (IntentStatus.CONFLICTED, None)


# --- validation before any SQL --------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (IntentRequest(" ", {}, idempotency_key="k"), "job.invalid_job_type"),
        (IntentRequest(JOB_TYPE, {}, idempotency_key=" "), "job.intent_invalid_idempotency_key"),
        (
            IntentRequest(JOB_TYPE, {}, idempotency_key="k", max_attempts=0),
            "job.intent_invalid_max_attempts",
        ),
        (IntentRequest(JOB_TYPE, {1: 2}, idempotency_key="k"), "job.invalid_payload"),
        (
            IntentRequest(JOB_TYPE, {}, idempotency_key="k", organization_id="x"),
            "job.invalid_organization_id",
        ),
        ({"job_type": JOB_TYPE}, "job.invalid_argument"),
    ],
)
def test_record_intents__bad_request__refused_before_any_sql_naming_its_index(
    bad: Any, code: str
) -> None:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        with pytest.raises(RunledgerError) as info:
            record_intents([_request("a"), _request("b"), bad])
        assert queries.captured_queries == []
        # The caller's transaction is untouched and usable.
        assert record_intents([_request("after")])[0].disposition == "inserted"

    assert (info.value.code, info.value.category) == (code, ErrorCategory.VALIDATION)
    assert info.value.request_index == 2
    assert JobEnqueueIntent.objects.count() == 1


def test_record_intents__too_many_requests__batch_too_large_before_any_sql() -> None:
    requests = [_request("same")] * 10_001
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as info:
        record_intents(requests)

    assert (info.value.code, info.value.category) == (
        "job.batch_too_large",
        ErrorCategory.VALIDATION,
    )
    assert queries.captured_queries == []


def test_record_intents__too_much_json__batch_too_large_before_any_sql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch's payloads and snapshots together are bounded (64 Mi characters; lowered
    here): each request may be fine alone."""
    monkeypatch.setattr(bulk, "MAX_BATCH_TEXT", 2_000)
    requests = [_request(f"k{n}", {"text": "x" * 300}) for n in range(3)]
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as info:
        record_intents(requests)

    assert info.value.code == "job.batch_too_large"
    assert queries.captured_queries == []
    assert len(record_intents(requests[:2])) == 2


@pytest.mark.parametrize("requests", [None, "abc", iter([])], ids=["none", "str", "iterator"])
def test_record_intents__not_a_list__invalid_argument(requests: Any) -> None:
    with pytest.raises(RunledgerError) as info:
        record_intents(requests)
    assert info.value.code == "job.invalid_argument"


def test_record_intents__empty__no_sql() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert record_intents([]) == []
    assert queries.captured_queries == []


# --- transactions ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_record_intents__inside_callers_transaction_rolled_back__leaves_nothing(
    observer: psycopg.Connection[Any],
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        record_intents(_requests(50))
        assert _committed(observer) == 0
        raise RuntimeError("the business transaction fails")

    assert JobEnqueueIntent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_record_intents__inside_callers_transaction__commits_with_it(
    observer: psycopg.Connection[Any],
) -> None:
    with transaction.atomic():
        record_intents(_requests(5))
        assert _committed(observer) == 0
    assert _committed(observer) == 5


@pytest.mark.django_db(transaction=True)
def test_record_intents__outside_any_transaction__owns_one_and_commits(
    observer: psycopg.Connection[Any],
) -> None:
    record_intents(_requests(5))
    assert _committed(observer) == 5


@pytest.mark.django_db(transaction=True)
def test_record_intents__refused_outside_a_transaction__nothing_committed(
    observer: psycopg.Connection[Any],
) -> None:
    record_intent(JOB_TYPE, {"n": 1}, idempotency_key="a")

    with pytest.raises(RunledgerError):
        record_intents([*_requests(20), _request("a", {"n": 2})])

    assert _committed(observer) == 1


@pytest.mark.django_db(transaction=True)
def test_record_intents__repeatable_read_caller__refused_nothing_written_usable() -> None:
    with transaction.atomic():
        run_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as info:
            record_intents(_requests(3))
        assert run_sql("SELECT count(*) FROM runledger_job_enqueue_intents") == [(0,)]

    assert info.value.code == "job.intent_idempotency_unsupported_isolation"


@pytest.mark.django_db(transaction=True)
def test_record_intents__repeatable_read_session_default__owns_read_committed(
    session_repeatable_read: None,
) -> None:
    outcomes = record_intents(_requests(3))
    assert [o.disposition for o in outcomes] == ["inserted"] * 3


@pytest.mark.django_db(transaction=True)
def test_record_intents__manual_transaction__joins_it(observer: psycopg.Connection[Any]) -> None:
    transaction.set_autocommit(False)
    try:
        record_intents(_requests(3))
        assert _committed(observer) == 0
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert _committed(observer) == 3


# --- statements -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [10, 1000])
def test_record_intents__new_keys__one_insert_whatever_the_size(no_notify: None, size: int) -> None:
    with CaptureQueriesContext(connection) as queries:
        record_intents(_requests(size))

    assert _statements(queries) == ["SAVEPOINT", "record_intents", "RELEASE"]


@pytest.mark.parametrize("size", [10, 1000])
def test_record_intents__existing_keys_and_duplicates__same_statements_at_any_size(
    no_notify: None, size: int
) -> None:
    record_intents(_requests(size // 2, "old"))
    batch = [
        *_requests(size // 2, "old"),
        *_requests(size // 4, "new"),
        *_requests(size // 4, "new"),
    ]

    with CaptureQueriesContext(connection) as queries:
        outcomes = record_intents(batch)

    assert len(outcomes) == len(batch)
    assert _statements(queries) == [
        "SAVEPOINT",
        "record_intents",
        "SHOW",
        "record_intents_resolve",
        "RELEASE",
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [10, 1000])
def test_record_intents__owned_transaction__same_statements_at_any_size(
    no_notify: None, size: int
) -> None:
    with CaptureQueriesContext(connection) as queries:
        record_intents(_requests(size))

    assert _statements(queries) == ["SET", "record_intents"]


# --- other sessions -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_record_intents__uncommitted_overlapping_batch__waits_then_converges(
    observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    with transaction.atomic():
        first = record_intents(_requests(20))
        waiting = in_thread(record_intents, [*_requests(30)][::-1])
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        assert not waiting.done()
    outcomes = waiting.result(timeout=10)[::-1]

    assert [o.intent_id for o in outcomes[:20]] == [o.intent_id for o in first]
    assert [o.disposition for o in outcomes] == ["existing"] * 20 + ["inserted"] * 10
    assert JobEnqueueIntent.objects.count() == 30


@pytest.mark.django_db(transaction=True)
def test_record_intents__keys_locked_in_key_order__no_deadlock_between_batches(
    observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """A batch locks its keys in key order, not in the order given. The waiting batch names
    "z" before "a": made in the given order, it would hold "z" while it waits for "a", and the
    first transaction's later "z" would close a deadlock. In key order it waits for "a" first,
    holding nothing, and the first transaction goes on."""
    with transaction.atomic():
        [a] = record_intents([_request("a")])
        waiting = in_thread(record_intents, [_request("z"), _request("a")])
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '5s'")
        [z] = record_intents([_request("z")])
    late_z, late_a = waiting.result(timeout=10)

    assert (late_z.intent_id, late_z.disposition) == (z.intent_id, "existing")
    assert (late_a.intent_id, late_a.disposition) == (a.intent_id, "existing")


@pytest.mark.django_db(transaction=True)
def test_record_intents__concurrent_reversed_batches__one_row_per_key_no_deadlock(
    in_thread: InThread,
) -> None:
    """Two sessions record the same 2,000 keys at the same moment, in opposite orders, each
    in its own transaction: both finish, agree on every intent, and no key has two rows."""
    ahead, behind = race_reversed(in_thread, record_intents, _requests(2000))

    assert [o.intent_id for o in ahead] == [o.intent_id for o in behind]
    dispositions = {o.disposition for o in ahead} | {o.disposition for o in behind}
    assert dispositions <= {"inserted", "existing"}
    assert sum(o.disposition == "inserted" for o in ahead + behind) == 2000
    assert JobEnqueueIntent.objects.count() == 2000


# --- wake-ups -------------------------------------------------------------------------------


def _notifications(session: psycopg.Connection[Any], *, timeout: float) -> list[str]:
    """The first notification that reaches ``session`` within ``timeout`` seconds, if any."""
    return [n.channel for n in session.notifies(timeout=timeout, stop_after=1)]


@pytest.mark.django_db(transaction=True)
def test_record_intents__inside_callers_transaction__promoters_notified_after_commit(
    open_session: OpenSession,
) -> None:
    listener = open_session()
    listener.execute("LISTEN runledger_intents")
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        record_intents(_requests(3))
        assert _notifications(listener, timeout=0.3) == []

    assert not any("notify" in q["sql"].lower() for q in inside.captured_queries)
    assert _notifications(listener, timeout=10) == ["runledger_intents"]


@pytest.mark.django_db(transaction=True)
def test_record_intents__nothing_inserted__nobody_notified(
    open_session: OpenSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeup, "COALESCE_SECONDS", 0.0)  # a send would not be coalesced away
    record_intents(_requests(3))
    listener = open_session()
    listener.execute("LISTEN runledger_intents")

    with CaptureQueriesContext(connection) as queries:
        assert {o.disposition for o in record_intents(_requests(3))} == {"existing"}

    assert not any("notify" in q["sql"].lower() for q in queries.captured_queries)
    assert _notifications(listener, timeout=0.3) == []

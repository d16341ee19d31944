"""enqueue_jobs: enqueue_job for a list of requests, in a constant number of statements.

A batch must behave as the same enqueue_job calls made one after another in one transaction
(row for row, event for event, outcome for outcome), except that it is all or nothing: a
request that would have raised refuses the batch, naming its index, and leaves nothing written.

Tests marked ``transaction=True`` need committed rows seen from other sessions, the owned
transaction path, SET TRANSACTION, or concurrent sessions.
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
    EnqueueOutcome,
    IntentRequest,
    JobRequest,
    RunledgerError,
    enqueue_job,
    enqueue_jobs,
)
from runledger_django.api import JobRequest as ApiJobRequest
from runledger_django.domain import JobStatus
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobDefinition, JobEvent
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
OTHER_TYPE = "jobs.test.other"
ORG = uuid.UUID("0190a6b2-0000-7000-8000-0000000b01c1")
RUN_AT = dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)
INSERT_FRAGMENT = "/* runledger:enqueue_jobs */"
"""The bulk insert's tag, at the front of its text (pg_stat_activity keeps the first 1 kB)."""

IGNORED = {"id", "idempotency_key", "created_at", "updated_at", "next_run_at"}
"""Columns two enqueues of the same request differ in (next_run_at defaults to now())."""


_request = partial(bulk_request, JobRequest)
_requests = partial(bulk_requests, JobRequest)
_statements = statement_tags


def _row(job_id: uuid.UUID) -> dict[str, Any]:
    row = Job.objects.values().get(id=job_id)
    return {k: v for k, v in row.items() if k not in IGNORED}


def _events(job_id: uuid.UUID) -> list[tuple[Any, ...]]:
    return list(
        JobEvent.objects.filter(job_id=job_id).values_list(
            "event_type", "run_number", "attempt", "stage", "payload"
        )
    )


def _committed(observer: psycopg.Connection[Any]) -> int:
    return committed_rows(observer, "runledger_job_queue")


@pytest.fixture
def definition(make_definition: MakeDefinition) -> JobDefinition:
    return make_definition()


# --- outcomes -------------------------------------------------------------------------------


def test_enqueue_jobs__api_names__one_type_exported_twice() -> None:
    assert ApiJobRequest is JobRequest


def test_enqueue_jobs__keyed_and_unkeyed__one_outcome_per_request_in_order(
    definition: JobDefinition,
) -> None:
    requests = [_request("b"), _request(None), _request("a", organization_id=ORG), _request(None)]

    outcomes = enqueue_jobs(requests)

    assert [(o.status, o.run_number, o.disposition) for o in outcomes] == [
        (JobStatus.PENDING, 1, "inserted")
    ] * 4
    rows = {job.id: job for job in Job.objects.all()}
    assert [rows[o.job_id].idempotency_key for o in outcomes] == ["b", None, "a", None]
    assert [rows[o.job_id].payload for o in outcomes] == [r.payload for r in requests]
    assert rows[outcomes[2].job_id].organization_id == ORG


@pytest.mark.parametrize("key", ["keyed", None], ids=["keyed", "unkeyed"])
def test_enqueue_jobs__every_argument__same_row_and_event_as_enqueue_job(
    make_definition: MakeDefinition, key: str | None
) -> None:
    """Row for row and event for event, definition defaults included."""
    make_definition(default_priority=-7, max_attempts=9, default_timeout_seconds=11)
    arguments: dict[str, Any] = {
        "organization_id": str(ORG),
        "priority": None,
        "max_attempts": 4,
        "timeout_seconds": None,
        "next_run_at": RUN_AT,
        "stage": "scheduled",
        "execution_resource_key": "printer-1",
    }
    payload = {"n": 1.5, "nested": {"ok": True}}
    single = enqueue_job(JOB_TYPE, payload, idempotency_key=key and f"single-{key}", **arguments)
    [bulk] = enqueue_jobs([JobRequest(JOB_TYPE, payload, idempotency_key=key, **arguments)])

    assert _row(bulk.job_id) == _row(single.job_id)
    assert Job.objects.get(id=bulk.job_id).next_run_at == RUN_AT
    assert _events(bulk.job_id) == _events(single.job_id)
    assert (bulk.status, bulk.run_number, bulk.disposition) == (
        single.status,
        single.run_number,
        single.disposition,
    )


def test_enqueue_jobs__nothing_requested__definition_defaults_and_now(
    make_definition: MakeDefinition,
) -> None:
    make_definition(default_priority=-7, max_attempts=9, default_timeout_seconds=11)

    [outcome] = enqueue_jobs([_request("a")])

    job = Job.objects.get(id=outcome.job_id)
    assert (job.priority, job.max_attempts, job.timeout_seconds) == (-7, 9, 11)
    assert job.next_run_at == run_sql("SELECT now()")[0][0]


def test_enqueue_jobs__two_job_types__each_with_its_definition(
    make_definition: MakeDefinition,
) -> None:
    make_definition(default_priority=1)
    make_definition(OTHER_TYPE, default_priority=2)

    outcomes = enqueue_jobs([_request(None), _request(None, job_type=OTHER_TYPE)])

    assert [Job.objects.get(id=o.job_id).priority for o in outcomes] == [1, 2]


def test_enqueue_jobs__identical_retry_of_enqueued_keys__existing_current_status(
    definition: JobDefinition,
) -> None:
    first = enqueue_job(JOB_TYPE, {"key": "a"}, idempotency_key="a")
    org_first = enqueue_job(JOB_TYPE, {"key": "a"}, idempotency_key="a", organization_id=ORG)
    Job.objects.filter(id=first.job_id).update(status="CANCELED")

    outcomes = enqueue_jobs([_request("a"), _request("a", organization_id=ORG)])

    assert outcomes == [
        EnqueueOutcome(
            job_id=first.job_id, status=JobStatus.CANCELED, run_number=1, disposition="existing"
        ),
        EnqueueOutcome(
            job_id=org_first.job_id, status=JobStatus.PENDING, run_number=1, disposition="existing"
        ),
    ]
    assert Job.objects.count() == 2
    assert JobEvent.objects.count() == 2


def test_enqueue_jobs__existing_and_new_keys_mixed__each_resolved_in_order(
    definition: JobDefinition,
) -> None:
    existing = enqueue_jobs(_requests(3, "old"))

    outcomes = enqueue_jobs([_request("new"), *_requests(3, "old"), _request(None)])

    assert [o.disposition for o in outcomes] == [
        "inserted",
        "existing",
        "existing",
        "existing",
        "inserted",
    ]
    assert [o.job_id for o in outcomes[1:4]] == [o.job_id for o in existing]
    assert Job.objects.count() == 5
    assert JobEvent.objects.count() == 5


def test_enqueue_jobs__identical_retry_after_definition_disabled__existing(
    definition: JobDefinition,
) -> None:
    """As enqueue_job: the existing-row lookup does not need the definition."""
    [first] = enqueue_jobs([_request("a")])
    JobDefinition.objects.filter(job_type=JOB_TYPE).update(is_enabled=False)

    [retry] = enqueue_jobs([_request("a")])

    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")


def test_enqueue_jobs__jsonb_equal_snapshot__converges(definition: JobDefinition) -> None:
    first = enqueue_job(JOB_TYPE, {"a": 1, "b": 1.0}, idempotency_key="a")

    [outcome] = enqueue_jobs([_request("a", {"b": 1, "a": 1.0})])

    assert (outcome.job_id, outcome.disposition) == (first.job_id, "existing")


def test_enqueue_jobs__different_request_under_enqueued_key__conflict_names_index(
    definition: JobDefinition,
) -> None:
    enqueue_job(JOB_TYPE, {"n": 1}, idempotency_key="a")

    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("new"), _request(None), _request("a", {"n": 2})])

    error = info.value
    assert (error.code, error.category) == ("job.idempotency_conflict", ErrorCategory.CONFLICT)
    assert error.request_index == 2
    # Nothing of the batch is left (no job, no event); the caller's transaction goes on.
    assert list(Job.objects.values_list("idempotency_key", flat=True)) == ["a"]
    assert JobEvent.objects.count() == 1


def test_enqueue_jobs__legacy_job_without_snapshot__legacy_error(
    definition: JobDefinition,
) -> None:
    """Our CHECK forbids such a row: the test drops it inside its own (rolled back)
    transaction."""
    run_sql(
        "ALTER TABLE runledger_job_queue DROP CONSTRAINT ck_job_queue_idempotency_enqueue_request"
    )
    legacy = enqueue_job(JOB_TYPE, {"key": "a"}, idempotency_key="a")
    Job.objects.filter(id=legacy.job_id).update(enqueue_request=None)

    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("a")])

    assert (info.value.code, info.value.request_index) == (
        "job.legacy_idempotency_snapshot_missing",
        0,
    )


@pytest.mark.parametrize("key", ["keyed", None], ids=["keyed", "unkeyed"])
def test_enqueue_jobs__no_enabled_definition__refused_naming_index(
    make_definition: MakeDefinition, key: str | None
) -> None:
    make_definition()
    make_definition(OTHER_TYPE, is_enabled=False)

    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("ok"), _request(key, job_type=OTHER_TYPE), _request(None)])

    assert (info.value.code, info.value.category) == (
        "job.definition_not_found_or_disabled",
        ErrorCategory.VALIDATION,
    )
    assert info.value.request_index == 1
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


@pytest.fixture
def inserts_swallowed() -> None:
    """Make every insert into the queue do nothing (a trigger returning NULL), so a keyed
    insert finds no row afterwards, as when the winner vanished between the statements."""
    run_sql(
        "CREATE FUNCTION runledger_test_swallow() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RETURN NULL; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_swallow BEFORE INSERT ON runledger_job_queue "
        "FOR EACH ROW EXECUTE FUNCTION runledger_test_swallow()"
    )


def test_enqueue_jobs__keyed_job_vanished__missing_existing(
    definition: JobDefinition, inserts_swallowed: None
) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("a"), _request("b")])

    assert (info.value.code, info.value.category, info.value.request_index) == (
        "job.idempotency_conflict_missing_existing",
        ErrorCategory.INTERNAL,
        0,
    )


def test_enqueue_jobs__several_requests_refused__the_earliest_is_reported(
    definition: JobDefinition, inserts_swallowed: None
) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("a"), _request(None), _request(None, job_type=OTHER_TYPE)])

    assert (info.value.code, info.value.request_index) == (
        "job.idempotency_conflict_missing_existing",
        0,
    )


# --- duplicates inside one batch ------------------------------------------------------------


def test_enqueue_jobs__identical_duplicates_in_batch__converge_on_the_first(
    definition: JobDefinition,
) -> None:
    outcomes = enqueue_jobs([_request("a"), _request(None), _request("a"), _request("a")])

    assert [o.disposition for o in outcomes] == ["inserted", "inserted", "existing", "existing"]
    assert outcomes[0].job_id == outcomes[2].job_id == outcomes[3].job_id
    assert Job.objects.count() == 2
    assert JobEvent.objects.count() == 2


def test_enqueue_jobs__unkeyed_identical_requests__each_a_job(definition: JobDefinition) -> None:
    outcomes = enqueue_jobs([_request(None, {"same": True})] * 3)

    assert len({o.job_id for o in outcomes}) == 3
    assert Job.objects.count() == 3


def test_enqueue_jobs__different_duplicate_in_batch__conflict_like_a_later_call(
    definition: JobDefinition,
) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request("a"), _request(None), _request("a", {"other": True})])

    assert (info.value.code, info.value.request_index) == ("job.idempotency_conflict", 2)
    assert Job.objects.count() == 0


# --- validation before any SQL --------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (JobRequest(" ", {}), "job.invalid_job_type"),
        (JobRequest(JOB_TYPE, {}, idempotency_key=" "), "job.invalid_idempotency_key"),
        (JobRequest(JOB_TYPE, {}, max_attempts=0), "job.invalid_max_attempts"),
        (JobRequest(JOB_TYPE, {}, timeout_seconds=-1), "job.invalid_timeout"),
        (JobRequest(JOB_TYPE, {}, priority=2**31), "job.invalid_priority"),
        (JobRequest(JOB_TYPE, {"at": RUN_AT}), "job.invalid_payload"),
        (JobRequest(JOB_TYPE, {}, next_run_at=dt.datetime(2035, 1, 1)), "job.invalid_next_run_at"),
        (JobRequest(JOB_TYPE, {}, stage="later"), "job.invalid_stage"),
        (IntentRequest(JOB_TYPE, {}, idempotency_key="k"), "job.invalid_argument"),
    ],
)
def test_enqueue_jobs__bad_request__refused_before_any_sql_naming_its_index(
    definition: JobDefinition, bad: Any, code: str
) -> None:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        with pytest.raises(RunledgerError) as info:
            enqueue_jobs([_request("a"), _request(None), bad])
        assert queries.captured_queries == []
        # The caller's transaction is untouched and usable.
        assert enqueue_jobs([_request("after")])[0].disposition == "inserted"

    assert (info.value.code, info.value.category) == (code, ErrorCategory.VALIDATION)
    assert info.value.request_index == 2
    assert Job.objects.count() == 1


def test_enqueue_jobs__too_many_requests__batch_too_large_before_any_sql() -> None:
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as info:
        enqueue_jobs([_request(None)] * 10_001)

    assert (info.value.code, info.value.category) == (
        "job.batch_too_large",
        ErrorCategory.VALIDATION,
    )
    assert queries.captured_queries == []


def test_enqueue_jobs__empty__no_sql() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert enqueue_jobs([]) == []
    assert queries.captured_queries == []


# --- transactions ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__inside_callers_transaction_rolled_back__leaves_nothing(
    definition: JobDefinition, observer: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_jobs([*_requests(25), *[_request(None)] * 25])
        assert _committed(observer) == 0
        raise RuntimeError("the business transaction fails")

    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__outside_any_transaction__owns_one_and_commits(
    definition: JobDefinition, observer: psycopg.Connection[Any]
) -> None:
    enqueue_jobs(_requests(5))
    assert _committed(observer) == 5


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__refused_outside_a_transaction__nothing_committed(
    definition: JobDefinition, observer: psycopg.Connection[Any]
) -> None:
    enqueue_job(JOB_TYPE, {"n": 1}, idempotency_key="a")

    with pytest.raises(RunledgerError):
        enqueue_jobs([*_requests(20), _request("a", {"n": 2})])

    assert _committed(observer) == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__repeatable_read_caller__keyed_batch_refused_unkeyed_accepted(
    definition: JobDefinition,
) -> None:
    """As enqueue_job: keyed requests need READ COMMITTED, unkeyed ones do not."""
    with transaction.atomic():
        run_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as info:
            enqueue_jobs([_request(None), _request("a")])
        assert run_sql("SELECT count(*) FROM runledger_job_queue") == [(0,)]
        unkeyed = enqueue_jobs([_request(None), _request(None)])

    assert info.value.code == "job.enqueue_idempotency_unsupported_isolation"
    assert Job.objects.filter(id__in=[o.job_id for o in unkeyed]).count() == 2


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__repeatable_read_session_default__owns_read_committed(
    definition: JobDefinition, session_repeatable_read: None
) -> None:
    outcomes = enqueue_jobs(_requests(3))
    assert [o.disposition for o in outcomes] == ["inserted"] * 3


# --- statements -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [10, 1000])
def test_enqueue_jobs__new_jobs__one_insert_whatever_the_size(
    definition: JobDefinition, no_notify: None, size: int
) -> None:
    with CaptureQueriesContext(connection) as queries:
        enqueue_jobs([*_requests(size // 2), *[_request(None)] * (size // 2)])

    assert _statements(queries) == ["SAVEPOINT", "enqueue_jobs", "RELEASE"]
    assert JobEvent.objects.count() == size


@pytest.mark.parametrize("size", [10, 1000])
def test_enqueue_jobs__existing_keys_and_duplicates__same_statements_at_any_size(
    definition: JobDefinition, no_notify: None, size: int
) -> None:
    enqueue_jobs(_requests(size // 2, "old"))
    batch = [
        *_requests(size // 2, "old"),
        *_requests(size // 4, "new"),
        *_requests(size // 4, "new"),
    ]

    with CaptureQueriesContext(connection) as queries:
        outcomes = enqueue_jobs(batch)

    assert len(outcomes) == len(batch)
    assert _statements(queries) == [
        "SAVEPOINT",
        "enqueue_jobs",
        "SHOW",
        "enqueue_jobs_resolve",
        "RELEASE",
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [10, 1000])
def test_enqueue_jobs__owned_transaction__same_statements_at_any_size(
    definition: JobDefinition, no_notify: None, size: int
) -> None:
    with CaptureQueriesContext(connection) as queries:
        enqueue_jobs(_requests(size))

    assert _statements(queries) == ["SET", "enqueue_jobs"]


# --- other sessions -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__uncommitted_overlapping_batch__waits_then_converges(
    definition: JobDefinition, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    with transaction.atomic():
        first = enqueue_jobs(_requests(20))
        waiting = in_thread(enqueue_jobs, _requests(30)[::-1])
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        assert not waiting.done()
    outcomes = waiting.result(timeout=10)[::-1]

    assert [o.job_id for o in outcomes[:20]] == [o.job_id for o in first]
    assert [o.disposition for o in outcomes] == ["existing"] * 20 + ["inserted"] * 10
    assert Job.objects.count() == 30
    assert JobEvent.objects.count() == 30


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__keys_locked_in_key_order__no_deadlock_between_batches(
    definition: JobDefinition, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """The waiting batch names "z" before "a": in the given order it would hold "z" while it
    waits for "a", and the first transaction's later "z" would close a deadlock."""
    with transaction.atomic():
        [a] = enqueue_jobs([_request("a")])
        waiting = in_thread(enqueue_jobs, [_request("z"), _request("a")])
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        run_sql("SET LOCAL lock_timeout = '5s'")
        [z] = enqueue_jobs([_request("z")])
    late_z, late_a = waiting.result(timeout=10)

    assert (late_z.job_id, late_z.disposition) == (z.job_id, "existing")
    assert (late_a.job_id, late_a.disposition) == (a.job_id, "existing")


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__concurrent_reversed_batches__one_job_per_key_no_deadlock(
    definition: JobDefinition, in_thread: InThread
) -> None:
    """Two sessions enqueue the same 2,000 keys at the same moment, in opposite orders, each
    in its own transaction: both finish, agree on every job, and no key has two jobs."""
    ahead, behind = race_reversed(in_thread, enqueue_jobs, _requests(2000))

    assert [o.job_id for o in ahead] == [o.job_id for o in behind]
    assert sum(o.disposition == "inserted" for o in ahead + behind) == 2000
    assert Job.objects.count() == 2000
    assert JobEvent.objects.count() == 2000


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__definition_disabled_concurrently__waits_for_the_batch(
    definition: JobDefinition, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """As enqueue_job: the batch share-locks its definitions until it commits, so an operator
    disabling one waits instead of slipping in between."""
    with transaction.atomic():
        enqueue_jobs([_request(None)])

        def disable() -> int:
            return JobDefinition.objects.filter(job_type=JOB_TYPE).update(is_enabled=False)

        waiting = in_thread(disable)
        wait_for_lock_wait(observer, "UPDATE")
        assert not waiting.done()
    assert waiting.result(timeout=10) == 1


# --- wake-ups -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__inside_callers_transaction__workers_notified_after_commit(
    definition: JobDefinition, open_session: OpenSession
) -> None:
    listener = open_session()
    listener.execute("LISTEN runledger_jobs")
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        enqueue_jobs([_request(None), _request("a")])
        assert [n.channel for n in listener.notifies(timeout=0.3, stop_after=1)] == []

    assert not any("notify" in q["sql"].lower() for q in inside.captured_queries)
    assert [n.channel for n in listener.notifies(timeout=10, stop_after=1)] == ["runledger_jobs"]


@pytest.mark.django_db(transaction=True)
def test_enqueue_jobs__autocommit__notified_once_committed(
    definition: JobDefinition, open_session: OpenSession
) -> None:
    listener = open_session()
    listener.execute("LISTEN runledger_jobs")

    enqueue_jobs(_requests(2))

    assert [n.channel for n in listener.notifies(timeout=10, stop_after=1)] == ["runledger_jobs"]

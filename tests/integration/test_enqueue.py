"""enqueue_job: the ordinary keyed or unkeyed enqueue (reference 3, upstream enqueue_outcome.rs).

Most tests join the test's transaction, as a caller's atomic block would. Tests marked
``transaction=True`` need what a rolled-back test transaction cannot give: the library's own
transaction outside any atomic block, SET TRANSACTION as a transaction's first statement,
or another session waiting on committed rows.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from pytest_django import DjangoAssertNumQueries
from pytest_django import Settings as SettingsWrapper

from runledger_django import EnqueueOutcome, RunledgerError, enqueue_job
from runledger_django.domain import JobStatus
from runledger_django.models import Job, JobDefinition, JobEvent
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, wait_for_lock_wait

pytestmark = pytest.mark.django_db


DEFAULT_SNAPSHOT = {
    "payload": {"target": "same-request"},
    "priority": None,
    "max_attempts": None,
    "timeout_seconds": None,
    "next_run_at": None,
    "stage": "queued",
}
PAYLOAD = {"target": "same-request"}
RUN_AT = dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)


def job_row(job_id: uuid.UUID) -> dict[str, Any]:
    return dict(
        Job.objects.values(
            "job_type",
            "organization_id",
            "payload",
            "status",
            "priority",
            "run_number",
            "attempt",
            "max_attempts",
            "timeout_seconds",
            "next_run_at",
            "idempotency_key",
            "stage",
            "enqueue_request",
            "execution_resource_key",
        ).get(id=job_id)
    )


def events(job_id: uuid.UUID) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in JobEvent.objects.filter(job_id=job_id).values(
            "event_type", "run_number", "attempt", "stage", "payload"
        )
    ]


def transaction_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        row = cursor.fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def select_one_works() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return bool(cursor.fetchone() == (1,))


def raw_update_job(job_id: uuid.UUID, assignments: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE runledger_job_queue SET {assignments} WHERE id = %s", [job_id])


@pytest.fixture
def definition(make_definition: MakeDefinition) -> JobDefinition:
    return make_definition()


# --- keyed insert ------------------------------------------------------------------------------


def test_enqueue_job__keyed_new_key__inserted_pending_run_1(
    definition: JobDefinition, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(1):
        outcome = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="same-request")
    assert outcome == EnqueueOutcome(
        job_id=outcome.job_id, status=JobStatus.PENDING, run_number=1, disposition="inserted"
    )
    assert job_row(outcome.job_id) == {
        "job_type": TEST_JOB_TYPE,
        "organization_id": None,
        "payload": PAYLOAD,
        "status": "PENDING",
        "priority": 100,
        "run_number": 1,
        "attempt": 0,
        "max_attempts": 3,
        "timeout_seconds": 60,
        "next_run_at": transaction_now(),
        "idempotency_key": "same-request",
        "stage": "queued",
        "enqueue_request": DEFAULT_SNAPSHOT,
        "execution_resource_key": None,
    }


def test_enqueue_job__keyed_new_key__exactly_one_enqueued_event(definition: JobDefinition) -> None:
    outcome = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k", stage="scheduled")
    assert events(outcome.job_id) == [
        {
            "event_type": "ENQUEUED",
            "run_number": 1,
            "attempt": None,
            "stage": "scheduled",
            "payload": {"job_type": TEST_JOB_TYPE},
        }
    ]


def test_enqueue_job__identical_retry__existing_without_new_event(
    definition: JobDefinition,
) -> None:
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert retry == EnqueueOutcome(
        job_id=first.job_id, status=JobStatus.PENDING, run_number=1, disposition="existing"
    )
    assert Job.objects.count() == 1
    assert len(events(first.job_id)) == 1


def test_enqueue_job__identical_retry_after_cancel__existing_with_current_status(
    definition: JobDefinition,
) -> None:
    """Convergence never looks at the job's status: the caller learns what became of it."""
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    raw_update_job(first.job_id, "status = 'CANCELED'")
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert retry == EnqueueOutcome(
        job_id=first.job_id, status=JobStatus.CANCELED, run_number=1, disposition="existing"
    )
    raw_update_job(first.job_id, "status = 'SUCCEEDED', run_number = 3, stage = 'completed'")
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (retry.status, retry.run_number) == (JobStatus.SUCCEEDED, 3)
    assert len(events(first.job_id)) == 1


def test_enqueue_job__identical_retry_after_definition_disabled__existing(
    definition: JobDefinition,
) -> None:
    """The existing-row lookup does not need the definition."""
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    JobDefinition.objects.filter(job_type=TEST_JOB_TYPE).update(is_enabled=False)
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")


def test_enqueue_job__jsonb_numeric_forms__converge(definition: JobDefinition) -> None:
    """jsonb = decides equality: 1.7e18 and 1700000000000000000 are the same number."""
    first = enqueue_job(TEST_JOB_TYPE, {"value": 1.7e18}, idempotency_key="n")
    retry = enqueue_job(TEST_JOB_TYPE, {"value": 1700000000000000000}, idempotency_key="n")
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")


def test_enqueue_job__key_order_and_spacing__converge(definition: JobDefinition) -> None:
    first = enqueue_job(TEST_JOB_TYPE, {"a": 1, "b": [1.0, 2]}, idempotency_key="o")
    retry = enqueue_job(TEST_JOB_TYPE, {"b": [1, 2.00], "a": 1}, idempotency_key="o")
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")


# --- conflicts and unresolvable keys -----------------------------------------------------------


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": {"target": "other-request"}},
        {"priority": 100},
        {"max_attempts": 3},
        {"timeout_seconds": 60},
        {"next_run_at": RUN_AT},
        {"stage": "scheduled"},
        {"execution_resource_key": "acct:1"},
    ],
    ids=lambda changed: next(iter(changed)),
)
def test_enqueue_job__same_key_other_request__idempotency_conflict(
    definition: JobDefinition, changed: dict[str, Any]
) -> None:
    """Even a value equal to the definition default differs from "not requested"."""
    enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    request: dict[str, Any] = {"payload": PAYLOAD, **changed}
    payload = request.pop("payload")
    with pytest.raises(RunledgerError) as info:
        enqueue_job(TEST_JOB_TYPE, payload, idempotency_key="k", **request)
    assert (info.value.code, info.value.category) == ("job.idempotency_conflict", "conflict")
    assert info.value.client_message == (
        "Job enqueue retry conflicts with the existing idempotency key."
    )
    assert Job.objects.count() == 1
    assert select_one_works()


def test_enqueue_job__legacy_job_without_snapshot__legacy_idempotency_snapshot_missing(
    definition: JobDefinition,
) -> None:
    """A keyed row from before snapshots existed cannot be matched. Our CHECK forbids making
    one, so the test drops it inside its own transaction (rolled back afterwards)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE runledger_job_queue "
            "DROP CONSTRAINT ck_job_queue_idempotency_enqueue_request"
        )
        cursor.execute(
            "INSERT INTO runledger_job_queue (job_type, max_attempts, idempotency_key, payload) "
            "VALUES (%s, 3, 'legacy', %s::jsonb)",
            [TEST_JOB_TYPE, '{"target": "same-request"}'],
        )
    with pytest.raises(RunledgerError) as info:
        enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="legacy")
    assert (info.value.code, info.value.category) == (
        "job.legacy_idempotency_snapshot_missing",
        "conflict",
    )
    assert Job.objects.count() == 1


@pytest.mark.parametrize("key", ["k", None], ids=["keyed", "unkeyed"])
def test_enqueue_job__no_definition__definition_not_found_or_disabled(key: str | None) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_job("jobs.test.missing", PAYLOAD, idempotency_key=key)
    assert (info.value.code, info.value.category) == (
        "job.definition_not_found_or_disabled",
        "validation",
    )
    assert info.value.client_message == "Job type is not available."
    assert (Job.objects.count(), JobEvent.objects.count()) == (0, 0)
    assert select_one_works()


@pytest.mark.parametrize("key", ["k", None], ids=["keyed", "unkeyed"])
def test_enqueue_job__disabled_definition__definition_not_found_or_disabled(
    make_definition: MakeDefinition, key: str | None
) -> None:
    make_definition(is_enabled=False)
    with pytest.raises(RunledgerError) as info:
        enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key=key)
    assert info.value.code == "job.definition_not_found_or_disabled"
    assert Job.objects.count() == 0


# --- unkeyed -----------------------------------------------------------------------------------


def test_enqueue_job__unkeyed__new_row_every_time_without_key_or_snapshot(
    definition: JobDefinition,
) -> None:
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD)
    second = enqueue_job(TEST_JOB_TYPE, PAYLOAD)
    assert first.job_id != second.job_id
    for outcome in (first, second):
        assert (outcome.status, outcome.run_number, outcome.disposition) == (
            JobStatus.PENDING,
            1,
            "inserted",
        )
        row = job_row(outcome.job_id)
        assert (row["idempotency_key"], row["enqueue_request"]) == (None, None)
        assert len(events(outcome.job_id)) == 1


# --- scopes ------------------------------------------------------------------------------------


def test_enqueue_job__same_key_global_and_per_organization__independent(
    definition: JobDefinition,
) -> None:
    org_a, org_b = uuid.uuid4(), uuid.uuid4()
    global_job = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    job_a = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k", organization_id=org_a)
    job_b = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k", organization_id=str(org_b))
    assert len({global_job.job_id, job_a.job_id, job_b.job_id}) == 3
    retry_a = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k", organization_id=org_a)
    retry_global = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (retry_a.job_id, retry_a.disposition) == (job_a.job_id, "existing")
    assert (retry_global.job_id, retry_global.disposition) == (global_job.job_id, "existing")
    assert job_row(job_a.job_id)["organization_id"] == org_a
    with pytest.raises(RunledgerError) as info:
        enqueue_job(TEST_JOB_TYPE, {"other": 1}, idempotency_key="k", organization_id=org_b)
    assert info.value.code == "job.idempotency_conflict"


# --- requested values vs definition defaults ---------------------------------------------------


def test_enqueue_job__requested_values__override_definition_defaults(
    definition: JobDefinition,
) -> None:
    outcome = enqueue_job(
        TEST_JOB_TYPE,
        {"account": "acct_1"},
        idempotency_key="overrides",
        priority=250,
        max_attempts=5,
        timeout_seconds=45,
        next_run_at=RUN_AT,
        stage="scheduled",
        execution_resource_key="analytics:account:acct_1",
    )
    row = job_row(outcome.job_id)
    assert {key: row[key] for key in ("priority", "max_attempts", "timeout_seconds")} == {
        "priority": 250,
        "max_attempts": 5,
        "timeout_seconds": 45,
    }
    assert (row["next_run_at"], row["stage"], row["execution_resource_key"]) == (
        RUN_AT,
        "scheduled",
        "analytics:account:acct_1",
    )
    assert row["enqueue_request"] == {
        "payload": {"account": "acct_1"},
        "priority": 250,
        "max_attempts": 5,
        "timeout_seconds": 45,
        "next_run_at": "2035-04-03T02:01:00.123456Z",
        "stage": "scheduled",
        "execution_resource_key": "analytics:account:acct_1",
    }


def test_enqueue_job__nothing_requested__definition_defaults_and_now(
    make_definition: MakeDefinition,
) -> None:
    make_definition(default_priority=-7, max_attempts=9, default_timeout_seconds=11)
    outcome = enqueue_job(TEST_JOB_TYPE, None)
    row = job_row(outcome.job_id)
    assert (row["priority"], row["max_attempts"], row["timeout_seconds"]) == (-7, 9, 11)
    assert (row["payload"], row["next_run_at"], row["stage"]) == (None, transaction_now(), "queued")


def test_enqueue_job__definition_defaults_change__retry_still_converges(
    definition: JobDefinition,
) -> None:
    """The snapshot holds what was requested, not the defaults that were applied."""
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    JobDefinition.objects.filter(job_type=TEST_JOB_TYPE).update(default_priority=1, max_attempts=1)
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")


# --- validation before SQL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"job_type": "\u00a0"}, "job.invalid_job_type"),
        ({"idempotency_key": "   "}, "job.invalid_idempotency_key"),
        ({"max_attempts": 0}, "job.invalid_max_attempts"),
        ({"timeout_seconds": True}, "job.invalid_timeout"),
        ({"priority": 2**31}, "job.invalid_priority"),
        ({"execution_resource_key": "r" * 513}, "job.invalid_execution_resource_key"),
        ({"stage": "future_stage"}, "job.invalid_stage"),
        ({"organization_id": "acme"}, "job.invalid_organization_id"),
        ({"next_run_at": dt.datetime(2030, 1, 1)}, "job.invalid_next_run_at"),
        ({"payload": {"at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}}, "job.invalid_payload"),
        ({"payload": {"text": "nul\x00"}}, "job.invalid_payload"),
        ({"payload": [float("nan")]}, "job.invalid_payload"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_enqueue_job__bad_input__rejected_before_any_sql(
    definition: JobDefinition,
    django_assert_num_queries: DjangoAssertNumQueries,
    arguments: dict[str, Any],
    code: str,
) -> None:
    request: dict[str, Any] = {
        "job_type": TEST_JOB_TYPE,
        "payload": PAYLOAD,
        "idempotency_key": "k",
        **arguments,
    }
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        enqueue_job(request.pop("job_type"), request.pop("payload"), **request)
    assert (info.value.code, info.value.category) == (code, "validation")
    assert select_one_works()
    assert not connection.needs_rollback
    assert Job.objects.count() == 0


# --- isolation (owned and caller transactions) -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_job__keyed_in_repeatable_read_caller__unsupported_isolation(
    definition: JobDefinition,
) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as info:
            enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
        assert select_one_works()
        assert not connection.needs_rollback
        assert Job.objects.count() == 0
    assert (info.value.code, info.value.category) == (
        "job.enqueue_idempotency_unsupported_isolation",
        "validation",
    )
    assert info.value.client_message == (
        "Job idempotent enqueue requires READ COMMITTED transaction isolation."
    )


@pytest.mark.django_db(transaction=True)
def test_enqueue_job__unkeyed_in_repeatable_read_caller__inserted(
    definition: JobDefinition,
) -> None:
    """Only keyed requests need a fresh snapshot for their second statement."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        outcome = enqueue_job(TEST_JOB_TYPE, PAYLOAD)
    assert outcome.disposition == "inserted"
    assert Job.objects.filter(id=outcome.job_id).exists()


@pytest.mark.django_db(transaction=True)
def test_enqueue_job__outside_atomic__one_statement_commits(
    definition: JobDefinition,
    observer: psycopg.Connection[Any],
    django_assert_num_queries: DjangoAssertNumQueries,
    settings: SettingsWrapper,
) -> None:
    # The wake-up NOTIFY that follows the commit is a query of its own, coalesced in time
    # (tests/worker/test_wakeup.py covers it); here only the enqueue itself is counted.
    settings.RUNLEDGER = {"WAKEUP_NOTIFY": False}
    with django_assert_num_queries(1):
        outcome = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert not connection.in_atomic_block
    committed = observer.execute(
        "SELECT count(*) FROM runledger_job_events WHERE job_id = %s", [outcome.job_id]
    ).fetchone()
    assert committed == (1,)


@pytest.mark.django_db(transaction=True)
def test_enqueue_job__outside_atomic__retry_and_conflict_resolve_in_owned_transaction(
    definition: JobDefinition,
) -> None:
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")
    with pytest.raises(RunledgerError) as info:
        enqueue_job(TEST_JOB_TYPE, {"other": True}, idempotency_key="k")
    assert info.value.code == "job.idempotency_conflict"
    with pytest.raises(RunledgerError) as info:
        enqueue_job("jobs.test.missing", PAYLOAD, idempotency_key="k")
    assert info.value.code == "job.definition_not_found_or_disabled"
    assert not connection.in_atomic_block
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_job__outside_atomic_with_repeatable_read_default__read_committed_anyway(
    definition: JobDefinition, session_repeatable_read: None
) -> None:
    """The one-statement path refuses to write under the stricter default and falls back to an
    owned READ COMMITTED transaction."""
    first = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    retry = enqueue_job(TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    assert (first.disposition, retry.disposition) == ("inserted", "existing")
    assert retry.job_id == first.job_id
    assert Job.objects.count() == 1


# --- the definition share lock -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("blocker_commits", [True, False], ids=["commit", "rollback"])
def test_enqueue_job__definition_being_disabled__waits_then_rechecks(
    definition: JobDefinition,
    open_session: Callable[..., psycopg.Connection[Any]],
    observer: psycopg.Connection[Any],
    in_thread: Callable[..., Future[Any]],
    blocker_commits: bool,
) -> None:
    """The enabled definition row is share-locked by the insert: a concurrent disable makes it
    wait, and under READ COMMITTED the waiting insert re-checks the updated row."""
    blocker = open_session(autocommit=False)
    blocker.execute(
        "UPDATE runledger_job_definitions SET is_enabled = false WHERE job_type = %s",
        [TEST_JOB_TYPE],
    )
    pending = in_thread(enqueue_job, TEST_JOB_TYPE, PAYLOAD, idempotency_key="k")
    waiting = wait_for_lock_wait(observer, "INSERT INTO runledger_job_queue")
    assert waiting["wait_event_type"] == "Lock"
    if blocker_commits:
        blocker.commit()
        with pytest.raises(RunledgerError) as info:
            pending.result(timeout=5)
        assert info.value.code == "job.definition_not_found_or_disabled"
        assert Job.objects.count() == 0
    else:
        blocker.rollback()
        assert pending.result(timeout=5).disposition == "inserted"
        assert Job.objects.count() == 1


# --- concurrent identical requests -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("organization_id", [None, uuid.uuid4()], ids=["global", "org"])
@pytest.mark.parametrize("winner_commits", [True, False], ids=["commit", "rollback"])
def test_enqueue_job__concurrent_uncommitted_same_key__waits_then_converges(
    definition: JobDefinition,
    observer: psycopg.Connection[Any],
    in_thread: Callable[..., Future[Any]],
    organization_id: uuid.UUID | None,
    winner_commits: bool,
) -> None:
    """The second insert waits on the unique key; a new READ COMMITTED statement then sees
    the committed winner (or, after a rollback, inserts itself)."""
    inserted = threading.Event()
    finish = threading.Event()

    class RollbackError(Exception):
        pass

    def winner() -> EnqueueOutcome:
        try:
            with transaction.atomic():
                outcome = enqueue_job(
                    TEST_JOB_TYPE, PAYLOAD, idempotency_key="race", organization_id=organization_id
                )
                inserted.set()
                assert finish.wait(timeout=10)
                if not winner_commits:
                    raise RollbackError
        except RollbackError:
            pass
        return outcome

    first = in_thread(winner)
    assert inserted.wait(timeout=5)
    second = in_thread(
        enqueue_job, TEST_JOB_TYPE, PAYLOAD, idempotency_key="race", organization_id=organization_id
    )
    wait_for_lock_wait(observer, "INSERT INTO runledger_job_queue")
    finish.set()
    winner_outcome = first.result(timeout=5)
    outcome = second.result(timeout=5)
    if winner_commits:
        assert (outcome.job_id, outcome.disposition) == (winner_outcome.job_id, "existing")
    else:
        assert outcome.job_id != winner_outcome.job_id
        assert outcome.disposition == "inserted"
    assert list(Job.objects.values_list("id", flat=True)) == [outcome.job_id]
    assert JobEvent.objects.count() == 1

"""record_intent against other sessions: unique-key waits, row locks, table locks.

Every test is ``transaction=True``: the sessions must see each other's committed rows and
wait on each other's real locks. Waits are observed in pg_stat_activity, and a recording that
must not wait runs under a lock_timeout, so waiting would fail it instead of hanging.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from runledger_django import IntentOutcome, IntentStatus, RunledgerError, record_intent
from runledger_django.errors import ErrorCategory
from runledger_django.models import JobEnqueueIntent
from tests.conftest import TEST_JOB_TYPE, InThread, OpenSession, wait_for_lock_wait

pytestmark = pytest.mark.django_db(transaction=True)

ORG = uuid.UUID("0190a6b2-0000-7000-8000-00000000c0c0")
INSERT_FRAGMENT = "runledger_record_intent_v2("
"""record_intent's insert: a call of the function of migration 0008."""


def _record(payload: Any = None, *, org: uuid.UUID | None = None) -> IntentOutcome:
    return record_intent(
        TEST_JOB_TYPE,
        {"n": 1} if payload is None else payload,
        idempotency_key="shared-key",
        organization_id=org,
    )


def _record_in_atomic(payload: Any = None, *, org: uuid.UUID | None = None) -> IntentOutcome:
    with transaction.atomic():
        return _record(payload, org=org)


RECORDERS = {"owned": _record, "caller-atomic": _record_in_atomic}


@pytest.fixture
def no_lock_waits() -> Iterator[None]:
    """Make any lock wait of the main Django session fail after 2 s instead of blocking."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '2s'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


# --- unique-key waits -------------------------------------------------------------------


@pytest.mark.parametrize("org", [None, ORG], ids=["global", "organization"])
@pytest.mark.parametrize("second", RECORDERS)
def test_record_intent__uncommitted_first_recorder__second_waits_then_converges(
    observer: psycopg.Connection[Any], in_thread: InThread, org: uuid.UUID | None, second: str
) -> None:
    with transaction.atomic():
        first = _record(org=org)
        assert first.disposition == "inserted"
        waiting = in_thread(RECORDERS[second], org=org)
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        assert not waiting.done()
    outcome = waiting.result(timeout=10)

    assert outcome == IntentOutcome(
        intent_id=first.intent_id,
        status=IntentStatus.PENDING,
        job_id=None,
        disposition="existing",
    )
    assert JobEnqueueIntent.objects.filter(idempotency_key="shared-key").count() == 1


@pytest.mark.parametrize("second", RECORDERS)
def test_record_intent__first_recorder_rolls_back__waiting_recorder_inserts(
    observer: psycopg.Connection[Any], in_thread: InThread, second: str
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        first = _record()
        waiting = in_thread(RECORDERS[second])
        wait_for_lock_wait(observer, INSERT_FRAGMENT)
        raise RuntimeError("the first request fails")
    outcome = waiting.result(timeout=10)

    assert outcome.disposition == "inserted"
    assert outcome.intent_id != first.intent_id
    assert list(JobEnqueueIntent.objects.values_list("id", flat=True)) == [outcome.intent_id]


def test_record_intent__uncommitted_first_recorder__different_request_conflicts_after_wait(
    observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    with transaction.atomic():
        _record({"n": 1})
        waiting = in_thread(_record, {"n": 2})
        wait_for_lock_wait(observer, INSERT_FRAGMENT)

    with pytest.raises(RunledgerError) as info:
        waiting.result(timeout=10)
    assert (info.value.code, info.value.category) == (
        "job.intent_idempotency_conflict",
        ErrorCategory.CONFLICT,
    )
    assert JobEnqueueIntent.objects.get().payload == {"n": 1}


def test_record_intent__many_simultaneous_recorders__one_intent(in_thread: InThread) -> None:
    start = threading.Barrier(6)

    def race() -> IntentOutcome:
        start.wait(timeout=10)
        return _record()

    outcomes = [future.result(timeout=20) for future in [in_thread(race) for _ in range(6)]]

    assert sorted(o.disposition for o in outcomes) == ["existing"] * 5 + ["inserted"]
    assert len({o.intent_id for o in outcomes}) == 1
    assert JobEnqueueIntent.objects.count() == 1


# --- row locks ----------------------------------------------------------------------------


@pytest.mark.parametrize("recorder", RECORDERS)
def test_record_intent__promoter_holds_row_lock__duplicate_does_not_wait(
    open_session: OpenSession, no_lock_waits: None, recorder: str
) -> None:
    """The lookup's FOR KEY SHARE is compatible with the promoter's FOR NO KEY UPDATE claim."""
    first = _record()
    promoter = open_session(autocommit=False)
    promoter.execute(
        "SELECT id FROM runledger_job_enqueue_intents WHERE id = %s FOR NO KEY UPDATE",
        [first.intent_id],
    )

    outcome = RECORDERS[recorder]()

    assert (outcome.intent_id, outcome.disposition) == (first.intent_id, "existing")
    promoter.rollback()


def test_record_intent__promoter_transition_in_flight__duplicate_waits_then_sees_it(
    open_session: OpenSession, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """An uncommitted transition UPDATE leaves a row version whose fate the insert's unique
    check must learn, so the duplicate waits for the promoter (whose transaction is capped at
    25 s) and its lookup, a new statement, then returns the committed new state."""
    first = _record()
    promoter = open_session(autocommit=False)
    promoter.execute(
        "UPDATE runledger_job_enqueue_intents SET status = 'CONFLICTED', promotion_attempts = 1,"
        " last_attempted_at = now(), conflicted_at = now(), last_error_code = 'c',"
        " last_error_message = 'm' WHERE id = %s",
        [first.intent_id],
    )

    waiting = in_thread(_record)
    wait_for_lock_wait(observer, INSERT_FRAGMENT)
    promoter.commit()
    outcome = waiting.result(timeout=10)

    assert outcome == IntentOutcome(
        intent_id=first.intent_id,
        status=IntentStatus.CONFLICTED,
        job_id=None,
        disposition="existing",
    )


def test_record_intent__duplicate_recorder__blocks_deletion_until_its_commit(
    open_session: OpenSession, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """FOR KEY SHARE keeps the intent the caller observed from being deleted under it."""
    first = _record()
    deleter = open_session()

    with transaction.atomic():
        assert _record().disposition == "existing"
        deleting = in_thread(
            lambda: (
                deleter.execute(
                    "DELETE FROM runledger_job_enqueue_intents WHERE id = %s", [first.intent_id]
                ).rowcount
            )
        )
        wait_for_lock_wait(observer, "DELETE FROM runledger_job_enqueue_intents")
        assert JobEnqueueIntent.objects.filter(id=first.intent_id).exists()

    assert deleting.result(timeout=10) == 1
    assert not JobEnqueueIntent.objects.exists()


def test_record_intent__duplicate_recorder__lets_the_promoter_update(
    open_session: OpenSession,
) -> None:
    first = _record()
    promoter = open_session()
    promoter.execute("SET lock_timeout = '2s'")

    with transaction.atomic():
        assert _record().disposition == "existing"
        updated = promoter.execute(
            "UPDATE runledger_job_enqueue_intents SET status = 'CONFLICTED',"
            " promotion_attempts = 1, last_attempted_at = now(), conflicted_at = now(),"
            " last_error_code = 'c', last_error_message = 'm' WHERE id = %s",
            [first.intent_id],
        ).rowcount

    assert updated == 1


# --- job definitions ------------------------------------------------------------------------


@pytest.mark.parametrize("recorder", RECORDERS)
def test_record_intent__job_definitions_locked_access_exclusive__still_records(
    open_session: OpenSession,
    observer: psycopg.Connection[Any],
    no_lock_waits: None,
    recorder: str,
) -> None:
    """Recording never reads or locks job definitions, so a migration or an operator holding
    the table cannot stall it."""
    locker = open_session(autocommit=False)
    locker.execute("LOCK TABLE runledger_job_definitions IN ACCESS EXCLUSIVE MODE")
    held = observer.execute(
        "SELECT count(*) FROM pg_locks WHERE relation = 'runledger_job_definitions'::regclass"
        " AND mode = 'AccessExclusiveLock' AND granted"
    ).fetchone()
    assert held == (1,)

    inserted = RECORDERS[recorder]()
    existing = RECORDERS[recorder]()

    assert (inserted.disposition, inserted.status) == ("inserted", IntentStatus.PENDING)
    assert (existing.intent_id, existing.disposition) == (inserted.intent_id, "existing")
    locker.rollback()

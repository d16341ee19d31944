"""The 25 s promotion budget and the retention fence that relies on it (reference 4.4, 4.5, 6.1).

On PostgreSQL 17+ the server enforces the budget with transaction_timeout; on 15 and 16 the
client keeps a deadline and caps every statement's statement_timeout to what is left. The
client-side path is forced on any server by patching ``server_has_transaction_timeout``, so
both paths are tested everywhere they can run.

``transaction=True`` throughout: promotion owns its transaction, the timeouts must really fire,
and retention runs in a second session. A trigger that sleeps inside the promoted update stands
in for a stuck pass; the tests that wait on a real timeout are marked slow.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, transaction

from runledger_django import (
    RunledgerError,
    delete_promoted_intents_for_jobs,
    promote_intents,
    record_intent,
)
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services import promotion_pass as promotion
from tests.conftest import TEST_JOB_TYPE, InThread, MakeDefinition, Observer, run_sql

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
NEEDS_TRANSACTION_TIMEOUT = (
    "transaction_timeout exists from PostgreSQL 17 on; the client-side variant covers 15 and 16"
)


@pytest.fixture
def client_side_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the PostgreSQL 15/16 path whatever the server."""
    monkeypatch.setattr(promotion, "server_has_transaction_timeout", lambda using: False)


@pytest.fixture
def seen_settings(server_version_num: int) -> Iterator[Callable[[float], None]]:
    """Record the pass's timeouts when it marks an intent promoted, then sleep ``seconds``.

    Returns an installer; the rows land in runledger_test_seen (committed with the pass).
    """
    transaction_timeout = (
        "current_setting('transaction_timeout')" if server_version_num >= 170000 else "NULL"
    )
    run_sql(
        "CREATE TABLE runledger_test_seen (lock_timeout text, statement_timeout_ms bigint,"
        " transaction_timeout text)"
    )

    def install(seconds: float) -> None:
        run_sql(
            "CREATE FUNCTION runledger_test_seen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.status = 'PROMOTED' THEN"
            " INSERT INTO runledger_test_seen VALUES (current_setting('lock_timeout'),"
            " (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'),"
            f" {transaction_timeout}); PERFORM pg_sleep({seconds}); END IF;"
            " RETURN NEW; END $$"
        )
        run_sql(
            "CREATE TRIGGER runledger_test_seen BEFORE UPDATE ON runledger_job_enqueue_intents"
            " FOR EACH ROW EXECUTE FUNCTION runledger_test_seen()"
        )

    yield install
    run_sql("DROP TRIGGER IF EXISTS runledger_test_seen ON runledger_job_enqueue_intents")
    run_sql("DROP FUNCTION IF EXISTS runledger_test_seen()")
    run_sql("DROP TABLE runledger_test_seen")


def wait_for_sleep(observer: Observer, *, timeout: float = 10.0) -> int:
    """Poll pg_stat_activity until a backend sleeps in the trigger; return its pid."""
    deadline = time.monotonic() + timeout
    while True:
        row = observer.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
        ).fetchone()
        if row is not None:
            return int(row[0])
        if time.monotonic() > deadline:
            raise AssertionError("no backend slept in the trigger")
        time.sleep(0.01)


def assert_rolled_back(intent_id: uuid.UUID) -> None:
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    assert (intent.status, intent.promotion_attempts, intent.last_error_code) == (
        "PENDING",
        0,
        None,
    )
    assert Job.objects.count() == 0


def record(key: str) -> uuid.UUID:
    return record_intent(TYPE, {"key": key}, idempotency_key=key).intent_id


# --- the caps a pass runs under -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_lock", "expected_lock"), [(None, "5s"), ("1s", "1s"), ("1min", "5s")]
)
def test_promote_intents__server_budget__caps_transaction_25s_and_lock_waits_5s(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    server_version_num: int,
    session_lock: str | None,
    expected_lock: str,
) -> None:
    if server_version_num < 170000:
        pytest.skip(NEEDS_TRANSACTION_TIMEOUT)
    make_definition()
    seen_settings(0)
    record("capped")
    if session_lock:
        run_sql(f"SET lock_timeout = '{session_lock}'")
    try:
        assert promote_intents([TYPE]).inserted_jobs == 1
    finally:
        run_sql("RESET lock_timeout")

    assert run_sql("SELECT lock_timeout, transaction_timeout FROM runledger_test_seen") == [
        (expected_lock, "25s")
    ]


def test_promote_intents__stricter_session_transaction_timeout__kept(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    server_version_num: int,
) -> None:
    if server_version_num < 170000:
        pytest.skip(NEEDS_TRANSACTION_TIMEOUT)
    make_definition()
    seen_settings(0)
    record("strict")
    run_sql("SET transaction_timeout = '10s'")
    try:
        assert promote_intents([TYPE]).inserted_jobs == 1
    finally:
        run_sql("RESET transaction_timeout")

    assert run_sql("SELECT transaction_timeout FROM runledger_test_seen") == [("10s",)]


def test_promote_intents__client_budget__statements_capped_to_what_is_left(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    client_side_budget: None,
    server_version_num: int,
) -> None:
    make_definition()
    seen_settings(0)
    record("client")

    assert promote_intents([TYPE]).inserted_jobs == 1

    [(lock_timeout, statement_ms, transaction_timeout)] = run_sql(
        "SELECT * FROM runledger_test_seen"
    )
    assert lock_timeout == "5s"
    assert 20_000 < statement_ms <= 25_000
    assert transaction_timeout == ("0" if server_version_num >= 170000 else None)


@pytest.mark.parametrize("budget", ["server", "client"])
def test_promote_intents__row_fails_after_a_slow_statement__deferred_without_failing_the_pass(
    make_definition: MakeDefinition,
    server_version_num: int,
    monkeypatch: pytest.MonkeyPatch,
    budget: str,
) -> None:
    """Unwinding a failed row must not wait for, or be blocked by, the budget's bookkeeping."""
    if budget == "server" and server_version_num < 170000:
        pytest.skip(NEEDS_TRANSACTION_TIMEOUT)
    if budget == "client":
        monkeypatch.setattr(promotion, "server_has_transaction_timeout", lambda using: False)
    make_definition()
    run_sql(
        "CREATE FUNCTION runledger_test_slow_failure() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.idempotency_key = 'slow-failure' THEN PERFORM pg_sleep(0.4);"
        " RAISE EXCEPTION 'rejected'; END IF; RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_slow_failure BEFORE INSERT ON runledger_job_queue"
        " FOR EACH ROW EXECUTE FUNCTION runledger_test_slow_failure()"
    )
    try:
        failing = record("slow-failure")
        healthy = record("healthy")
        report = promote_intents([TYPE])
    finally:
        run_sql("DROP TRIGGER runledger_test_slow_failure ON runledger_job_queue")
        run_sql("DROP FUNCTION runledger_test_slow_failure()")

    assert (report.inserted_jobs, report.retry_deferred) == (1, 1)
    assert JobEnqueueIntent.objects.get(id=failing).last_error_code == "db.query_failed"
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"


# --- the budget ends a stuck pass and rolls everything back ------------------------------------


def run_stuck_pass() -> tuple[RunledgerError, float]:
    start = time.monotonic()
    with pytest.raises(RunledgerError) as caught:
        promote_intents([TYPE])
    return caught.value, time.monotonic() - start


def assert_budget_exhausted(error: RunledgerError) -> None:
    assert (error.code, error.category) == (
        "job.intent_promotion_budget_exhausted",
        ErrorCategory.INTERNAL,
    )
    assert error.client_message == "Database operation failed."
    assert error.__cause__ is not None


def test_promote_intents__short_server_budget__terminates_session_and_rolls_back(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    server_version_num: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same mechanism as the 25 s budget, with a 1.5 s cap so it runs in every suite."""
    if server_version_num < 170000:
        pytest.skip(NEEDS_TRANSACTION_TIMEOUT)
    monkeypatch.setattr(promotion, "TRANSACTION_BUDGET_MS", 1_500)
    make_definition()
    seen_settings(30)
    intent_id = record("stuck")
    run_sql("SET transaction_timeout = '1min'")

    error, elapsed = run_stuck_pass()

    assert_budget_exhausted(error)
    assert error.sqlstate == "25P04"
    assert 1.2 <= elapsed < 5
    assert connection.connection is None  # the server ended the session; Django reconnects
    assert_rolled_back(intent_id)


def test_promote_intents__short_client_budget__cancels_statement_and_rolls_back(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    client_side_budget: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(promotion, "TRANSACTION_BUDGET_MS", 1_500)
    make_definition()
    seen_settings(30)
    intent_id = record("stuck")

    error, elapsed = run_stuck_pass()

    assert_budget_exhausted(error)
    assert error.sqlstate == "57014"
    assert 1.2 <= elapsed < 5
    assert run_sql("SELECT 1") == [(1,)]  # the session survives a cancelled statement
    assert_rolled_back(intent_id)


@pytest.mark.slow
def test_promote_intents__transaction_timeout__terminates_session_and_rolls_back(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    server_version_num: int,
) -> None:
    """A looser session transaction_timeout set before BEGIN is re-armed to 25 s."""
    if server_version_num < 170000:
        pytest.skip(NEEDS_TRANSACTION_TIMEOUT)
    make_definition()
    seen_settings(30)
    intent_id = record("stuck")
    run_sql("SET transaction_timeout = '1min'")

    error, elapsed = run_stuck_pass()

    assert_budget_exhausted(error)
    assert error.sqlstate == "25P04"
    assert 24 <= elapsed < 32
    assert_rolled_back(intent_id)


@pytest.mark.slow
def test_promote_intents__client_budget__ends_stuck_pass_and_rolls_back(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    client_side_budget: None,
) -> None:
    """The PostgreSQL 15/16 path: the statement cap spends exactly the 25 s budget."""
    make_definition()
    seen_settings(30)
    intent_id = record("stuck")

    error, elapsed = run_stuck_pass()

    assert_budget_exhausted(error)
    assert 24 <= elapsed < 32
    assert_rolled_back(intent_id)


# --- the retention fence covers a whole pass, not only its lock waits ---------------------------


@pytest.mark.slow
def test_delete_promoted_intents_for_jobs__slow_pass_in_flight__fence_wait_outlasts_lock_cap(
    make_definition: MakeDefinition,
    seen_settings: Callable[[float], None],
    in_thread: InThread,
    observer: Observer,
    server_version_num: int,
) -> None:
    """A pass may run past 5 s (its row-lock cap): retention's 30 s fence wait still covers it."""
    make_definition()
    seen_settings(6)
    record("slow")
    pass_ = in_thread(promote_intents, [TYPE])
    wait_for_sleep(observer)

    start = time.monotonic()
    with transaction.atomic():
        deleted = delete_promoted_intents_for_jobs([uuid.uuid4()])
    waited = time.monotonic() - start

    assert deleted == 0
    assert 5 <= waited < 10
    assert pass_.result(timeout=10).total_promoted == 1
    [(_, _, transaction_timeout)] = run_sql("SELECT * FROM runledger_test_seen")
    assert transaction_timeout == ("25s" if server_version_num >= 170000 else None)

"""Transaction helpers (reference 6): timeout caps, owned READ COMMITTED, isolation checks.

Tests that set the isolation level must issue SET TRANSACTION as the first statement of a
transaction, and owned transactions must start outside any atomic block: those use
``transaction=True``. So does the transaction_timeout test, whose session the server kills.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.db.backends.utils import CursorWrapper

from runledger_django.db.classify import sqlstate_of
from runledger_django.db.transaction import (
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    cap_timeout,
    cap_transaction_timeout,
    ensure_read_committed,
    execute,
    has_transaction_timeout,
    isolation_level,
    owned_read_committed,
    restore_setting,
    timeout_text,
)
from runledger_django.errors import Code, RunledgerError
from runledger_django.models import JobDefinition

pytestmark = pytest.mark.django_db


def show(cursor: CursorWrapper, name: str) -> str:
    cursor.execute(f"SHOW {name}")
    row = cursor.fetchone()
    assert row is not None
    return str(row[0])


# --- timeout_text ------------------------------------------------------------------------------


def test_timeout_text__whole_milliseconds() -> None:
    assert timeout_text(1250) == "1250ms"
    assert timeout_text(0) == "0ms"
    assert timeout_text(2**63 - 1) == f"{2**63 - 1}ms"


@pytest.mark.parametrize("value", [-1, 1.5, True, "5"], ids=repr)
def test_timeout_text__not_whole_nonnegative_ms__value_error(value: Any) -> None:
    with pytest.raises(ValueError, match="whole"):
        timeout_text(value)


# --- lock_timeout / statement_timeout caps -----------------------------------------------------


@pytest.mark.parametrize("name", [LOCK_TIMEOUT, STATEMENT_TIMEOUT])
@pytest.mark.parametrize(
    ("caller", "previous", "capped"),
    [
        ("999ms", "999ms", "999ms"),
        ("1000ms", "1s", "1s"),
        ("1001ms", "1001ms", "1s"),
        ("0", "0", "1s"),
        ("11s", "11s", "1s"),
    ],
)
def test_cap_timeout__cap_1000ms__keeps_stricter_caller_value(
    name: str, caller: str, previous: str, capped: str
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, true)", [name, caller])
        assert cap_timeout(cursor, name, 1000) == previous
        assert show(cursor, name) == capped
        restore_setting(cursor, name, previous)
        assert show(cursor, name) == previous


def test_cap_timeout__restore__caller_values_survive_byte_for_byte() -> None:
    """Reference 8.1: a caller's 11s / 41s are identical after a capped operation."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '11s'")
        cursor.execute("SET LOCAL statement_timeout = '41s'")
        statement = cap_timeout(cursor, STATEMENT_TIMEOUT, 35_000)
        lock = cap_timeout(cursor, LOCK_TIMEOUT, 30_000)
        assert (show(cursor, LOCK_TIMEOUT), show(cursor, STATEMENT_TIMEOUT)) == ("11s", "35s")
        cap_timeout(cursor, LOCK_TIMEOUT, 5_000)
        assert show(cursor, LOCK_TIMEOUT) == "5s"
        restore_setting(cursor, LOCK_TIMEOUT, lock)
        restore_setting(cursor, STATEMENT_TIMEOUT, statement)
        assert (show(cursor, LOCK_TIMEOUT), show(cursor, STATEMENT_TIMEOUT)) == ("11s", "41s")


def test_cap_timeout__transaction_local__gone_after_the_transaction() -> None:
    with connection.cursor() as cursor:
        before = show(cursor, LOCK_TIMEOUT)
        with transaction.atomic():
            cap_timeout(cursor, LOCK_TIMEOUT, 1234)
            assert show(cursor, LOCK_TIMEOUT) == "1234ms"
        # The savepoint released; the cap lives until the (test's) transaction ends.
        assert show(cursor, LOCK_TIMEOUT) == "1234ms"
        with pytest.raises(RuntimeError), transaction.atomic():
            cap_timeout(cursor, LOCK_TIMEOUT, 10)
            raise RuntimeError
        assert show(cursor, LOCK_TIMEOUT) == "1234ms"
    assert before == "0"


def test_cap_timeout__other_setting__value_error() -> None:
    with connection.cursor() as cursor, pytest.raises(ValueError, match="work_mem"):
        cap_timeout(cursor, "work_mem", 1000)


# --- transaction_timeout (PostgreSQL 17+) ------------------------------------------------------


def test_has_transaction_timeout__matches_the_server(server_version_num: int) -> None:
    """Below 17 promotion falls back to a client-side deadline; this switch picks the path."""
    assert has_transaction_timeout("default") is (server_version_num >= 170000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_settings WHERE name = 'transaction_timeout'")
        row = cursor.fetchone()
    assert row is not None
    assert row[0] == (1 if server_version_num >= 170000 else 0)


@pytest.fixture
def needs_transaction_timeout(server_version_num: int) -> None:
    if server_version_num < 170000:
        pytest.skip(
            "transaction_timeout exists from PostgreSQL 17; "
            "test_has_transaction_timeout__matches_the_server covers the older path"
        )


@pytest.mark.parametrize(
    ("caller", "previous", "capped"),
    [("0", "0", "2min"), ("1min", "1min", "1min"), ("5min", "5min", "2min")],
)
def test_cap_transaction_timeout__keeps_stricter_caller_value(
    needs_transaction_timeout: None, caller: str, previous: str, capped: str
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('transaction_timeout', %s, true)", [caller])
        assert cap_transaction_timeout(cursor, 120_000) == previous
        assert show(cursor, "transaction_timeout") == capped


@pytest.mark.django_db(transaction=True)
def test_cap_transaction_timeout__looser_session_value__rearms_a_shorter_deadline(
    needs_transaction_timeout: None, in_thread: Callable[..., Future[Any]]
) -> None:
    """The 5 s deadline armed at BEGIN is replaced by a fresh 300 ms one; the server then
    ends the session, so this runs on a thread's own connection."""

    def run() -> tuple[str, str, float, BaseException | None]:
        conn = connections["default"]
        with conn.cursor() as cursor:
            cursor.execute("SET transaction_timeout = '5s'")
        previous = shown = ""
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            with transaction.atomic(), conn.cursor() as cursor:
                previous = cap_transaction_timeout(cursor, 300)
                started = time.monotonic()
                shown = show(cursor, "transaction_timeout")
                cursor.execute("SELECT pg_sleep(2)")
        except DatabaseError as exc:
            failure = exc
        return previous, shown, time.monotonic() - started, failure

    previous, shown, elapsed, failure = in_thread(run).result(timeout=10)
    assert (previous, shown) == ("5s", "300ms")
    assert failure is not None
    assert sqlstate_of(failure) == "25P04"  # transaction_timeout
    assert 0.2 <= elapsed < 1.5


# --- owned READ COMMITTED ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_owned_read_committed__session_default_repeatable_read__read_committed(
    session_repeatable_read: None,
) -> None:
    with connection.cursor() as cursor:
        with transaction.atomic():
            assert isolation_level(cursor) == "repeatable read"
        with owned_read_committed("default") as owned:
            assert isolation_level(owned) == "read committed"
            assert connection.in_atomic_block
        assert not connection.in_atomic_block


@pytest.mark.django_db(transaction=True)
def test_owned_read_committed__success__commits(
    observer: psycopg.Connection[Any],
) -> None:
    with owned_read_committed("default") as cursor:
        cursor.execute(
            "INSERT INTO runledger_job_definitions (job_type) VALUES ('jobs.test.owned')"
        )
    committed = observer.execute(
        "SELECT count(*) FROM runledger_job_definitions WHERE job_type = 'jobs.test.owned'"
    ).fetchone()
    assert committed == (1,)


@pytest.mark.django_db(transaction=True)
def test_owned_read_committed__error__rolls_back_and_reraises_the_original() -> None:
    class BoomError(Exception):
        pass

    original = BoomError("operation failed")
    with pytest.raises(BoomError) as info, owned_read_committed("default") as cursor:
        cursor.execute(
            "INSERT INTO runledger_job_definitions (job_type) VALUES ('jobs.test.owned')"
        )
        raise original
    assert info.value is original
    assert not JobDefinition.objects.filter(job_type="jobs.test.owned").exists()
    assert not connection.in_atomic_block


# --- ensure_read_committed ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("level", ["READ COMMITTED", "READ UNCOMMITTED"])
def test_ensure_read_committed__read_committed_levels__accepted(level: str) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        ensure_read_committed(
            cursor, operation="test", code=Code.INTENT_RETENTION_UNSUPPORTED_ISOLATION
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_ensure_read_committed__stale_snapshot_level__given_code_and_usable_transaction(
    level: str,
) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        with pytest.raises(RunledgerError) as info:
            ensure_read_committed(
                cursor,
                operation="job enqueue intent retention",
                code=Code.INTENT_RETENTION_UNSUPPORTED_ISOLATION,
            )
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
        assert not connection.needs_rollback
    error = info.value
    assert (error.code, error.category) == (
        "job.intent_retention_unsupported_isolation",
        "validation",
    )
    assert error.client_message == (
        "Job enqueue intent retention requires READ COMMITTED transaction isolation."
    )
    assert error.internal_message == (
        "job enqueue intent retention requires READ COMMITTED isolation; got " + level.lower()
    )


# --- execute -----------------------------------------------------------------------------------


def test_execute__database_error_in_atomic_block__classified_and_block_rolls_back() -> None:
    with connection.cursor() as cursor:
        with pytest.raises(RunledgerError) as info, transaction.atomic():
            execute(cursor, "SELECT 1 / 0", None, context="divide")
        assert connection.in_atomic_block  # the test's own transaction
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    error = info.value
    assert (error.code, error.sqlstate) == ("db.query_failed", "22012")
    assert error.internal_message == "divide: division by zero"
    assert isinstance(error.__cause__, DatabaseError)


def test_execute__error_caught_inside_the_block__block_still_rolls_back() -> None:
    """Swallowing the error inside atomic() must not let Django try to commit a dead txn."""
    with connection.cursor() as cursor:
        with transaction.atomic():
            with pytest.raises(RunledgerError):
                execute(cursor, "SELECT 1 / 0", None, context="divide")
            assert connection.needs_rollback
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)

"""Shared fixtures: job definitions, second sessions, threads, and lock-wait observation."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from runledger_django.models import JobDefinition

TEST_JOB_TYPE = "jobs.test.enqueue_intent"

MakeDefinition = Callable[..., JobDefinition]
OpenSession = Callable[..., psycopg.Connection[Any]]
InThread = Callable[..., Future[Any]]
Observer = psycopg.Connection[Any]


@pytest.fixture
def make_definition() -> Callable[..., JobDefinition]:
    """Create a job definition with the reference tests' defaults (3 attempts, 60 s, 100)."""

    def make(job_type: str = TEST_JOB_TYPE, **overrides: Any) -> JobDefinition:
        values: dict[str, Any] = {
            "max_attempts": 3,
            "default_timeout_seconds": 60,
            "default_priority": 100,
            "is_enabled": True,
        }
        values.update(overrides)
        return JobDefinition.objects.create(job_type=job_type, **values)

    return make


def connection_kwargs() -> dict[str, Any]:
    """psycopg connect arguments for the database the tests run on (the test database)."""
    settings = connection.settings_dict
    kwargs: dict[str, Any] = {
        "dbname": settings["NAME"],
        "user": settings["USER"] or None,
        "password": settings["PASSWORD"] or None,
        "host": settings["HOST"] or None,
        "port": settings["PORT"] or None,
    }
    return {key: value for key, value in kwargs.items() if value is not None}


@pytest.fixture
def open_session() -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """Open extra raw psycopg sessions (autocommit unless asked), closed at teardown.

    They stand in for other processes: lock holders, blockers and observers.
    """
    opened: list[psycopg.Connection[Any]] = []

    def open_(*, autocommit: bool = True) -> psycopg.Connection[Any]:
        conn = psycopg.connect(**connection_kwargs(), autocommit=autocommit)
        opened.append(conn)
        return conn

    yield open_
    for conn in opened:
        conn.close()


@pytest.fixture
def observer(open_session: Callable[..., psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    """An autocommit session for reading pg_stat_activity and committed state."""
    return open_session()


@pytest.fixture
def in_thread() -> Iterator[Callable[..., Future[Any]]]:
    """Run a callable in a worker thread with its own Django connection (closed afterwards)."""
    pool = ThreadPoolExecutor(max_workers=8)

    def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        def run() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                connections.close_all()

        return pool.submit(run)

    yield submit
    pool.shutdown(wait=True, cancel_futures=True)


def wait_for_lock_wait(
    observer: psycopg.Connection[Any], query_fragment: str, *, timeout: float = 5.0
) -> dict[str, Any]:
    """Poll pg_stat_activity until a backend waits on a lock in a query containing
    ``query_fragment``; return its row. Observing the wait replaces any sleep."""
    deadline = time.monotonic() + timeout
    sql = """
        SELECT pid, wait_event_type, wait_event, query
        FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND wait_event_type = 'Lock' AND position(%s in query) > 0
    """
    while True:
        row = observer.execute(sql, (query_fragment,)).fetchone()
        if row is not None:
            return {"pid": row[0], "wait_event_type": row[1], "wait_event": row[2], "query": row[3]}
        if time.monotonic() > deadline:
            raise AssertionError(f"no backend waited on a lock in a query with {query_fragment!r}")
        time.sleep(0.01)


def run_sql(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run raw SQL on the test's Django connection; return its rows (none for commands)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


@pytest.fixture
def session_repeatable_read() -> Iterator[None]:
    """Make REPEATABLE READ the default of the test's connection, as a host project might."""
    run_sql("SET default_transaction_isolation = 'repeatable read'")
    try:
        yield
    finally:
        run_sql("RESET default_transaction_isolation")


@pytest.fixture
def server_version_num() -> int:
    connection.ensure_connection()
    return int(connection.pg_version)  # type: ignore[attr-defined]


def insert_raw_intent(**columns: Any) -> uuid.UUID:
    """Insert an intent row with raw SQL, bypassing validation.

    Only for states the public API cannot produce (corrupt, drifted or future rows).
    """
    values: dict[str, Any] = {
        "job_type": TEST_JOB_TYPE,
        "payload": {},
        "idempotency_key": f"raw-{uuid.uuid4()}",
        "stage": "queued",
        "enqueue_request": None,
    }
    values.update(columns)
    if values["enqueue_request"] is None:
        values["enqueue_request"] = {
            "payload": values["payload"],
            "priority": values.get("priority"),
            "max_attempts": values.get("max_attempts"),
            "timeout_seconds": values.get("timeout_seconds"),
            "next_run_at": None,
            "stage": values["stage"],
        }
    for key in ("payload", "enqueue_request"):
        values[key] = json.dumps(values[key])
    names = list(values)
    placeholders = ", ".join(
        f"%({name})s::jsonb" if name in ("payload", "enqueue_request") else f"%({name})s"
        for name in names
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO runledger_job_enqueue_intents ({', '.join(names)}) "
            f"VALUES ({placeholders}) RETURNING id",
            values,
        )
        row = cursor.fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))

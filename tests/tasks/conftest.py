"""Fixtures of the django.tasks backend tests (Django 6 and newer; see test_import.py for 5.2).

Every test runs with TASKS naming RunledgerTaskBackend (the ``settings`` fixture, so Django
rebuilds its backends). The backend creates each task's job definition on a connection of its
own, which commits even in a test whose transaction rolls back; after each test of this
directory those definitions are deleted again, so no other test sees them (the backend
remembers nothing of them: the next enqueue of a task makes its definition again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.conftest import connection_kwargs
from tests.tasks.task_settings import TASKS
from tests.worker.processes import BASE_DIR, WorkerProcess, database_url, stop_all

TASK_TEST_SETTINGS = TASKS
"""The same TASKS as tests/tasks/worker_settings.py gives the subprocesses."""

SUBPROCESS_SETTINGS = "tests.tasks.worker_settings"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the test's own teardown (its transaction rolled back or its tables flushed),
    delete the task definitions the backend committed on its side connection."""
    yield
    if (
        "runledger_django.tasks.definitions" not in sys.modules
        or item.get_closest_marker("django_db") is None
        or nextitem is None
    ):
        # The Django 5.2 leg, a test that never reached the test database, or the last test
        # (the test database is gone by now, and nothing runs after it).
        return
    with psycopg.connect(**connection_kwargs(), autocommit=True) as conn:
        conn.execute(
            "DELETE FROM runledger_job_definitions definition "
            "WHERE definition.job_type LIKE 'task:%' AND NOT EXISTS ("
            "  SELECT 1 FROM runledger_job_queue job WHERE job.job_type = definition.job_type)"
        )


@pytest.fixture(autouse=True)
def task_settings(settings: Any) -> None:
    settings.TASKS = TASK_TEST_SETTINGS


def wait_until(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy (a bounded wait for another
    process's progress, never a stand-in for a fixed delay)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate!r}")
        time.sleep(0.02)


SpawnWorker = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker() -> Iterator[SpawnWorker]:
    """``manage.py runledger_worker --settings=tests.tasks.worker_settings ARGS`` subprocesses
    (killed at teardown if alive); keyword arguments become RUNLEDGER keys (LEASE_SECONDS=2)."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, **settings: Any) -> WorkerProcess:
        process = WorkerProcess([f"--settings={SUBPROCESS_SETTINGS}", *args], settings)
        started.append(process)
        return process

    yield spawn
    stop_all(started)


def run_in_subprocess(code: str) -> str:
    """Run Python ``code`` in ``manage.py shell`` of another process on the test database
    (TASKS as in worker_settings) and return what it printed."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SUBPROCESS_SETTINGS,
        "DATABASE_URL": database_url(),
        "RUNLEDGER_TEST_DB": str(connection.settings_dict["NAME"]),
        "PYTHONUNBUFFERED": "1",
    }
    completed = subprocess.run(  # noqa: S603  (fixed interpreter and arguments)
        [sys.executable, "-m", "django", "shell", "--no-imports", "-c", code],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout
